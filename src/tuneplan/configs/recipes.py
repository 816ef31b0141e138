"""Recipe configs: torchtune recipe YAML and litgpt YAML. torchtune `_component_` values are read as
names only (never imported); defaults are the recipes' `cfg.get(..., default)` values (torchtune 0.6
recipes/*.py) and litgpt's `finetune/*.py setup()` / `TrainArgs` defaults."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from tuneplan.configs.base import ConfigRead, Doc
from tuneplan.configs.maps import precision, set_optimizer, truthy
from tuneplan.configs.trainers import _common_ignored, _lora_rank_alpha

TORCHTUNE_MODELS = Path(__file__).resolve().parent.parent / "data" / "torchtune_models.yaml"
TORCHTUNE_LAUNCH = re.compile(r"tune\s+run\s+(?:--nnodes[ =](\d+)\s+)?(?:--nproc_per_node[ =](\d+)\s+)?"
                              r"(?:--nnodes[ =](\d+)\s+)?([A-Za-z0-9_]+)")
"""The launch line torchtune's shipped configs state in their header comment."""
TORCHTUNE_TARGETS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "output_proj": "o"}
LITGPT_TARGETS = {"lora_query": "q", "lora_key": "k", "lora_value": "v", "lora_projection": "o"}
LITGPT_TARGET_DEFAULTS = {"lora_query": True, "lora_key": False, "lora_value": True, "lora_projection": False,
                          "lora_mlp": False, "lora_head": False}
"""litgpt finetune/lora.py setup() defaults for which weights get adapters."""
LITGPT_LORA_R_DEFAULT = 8  # litgpt finetune/lora.py `lora_r` default.
LITGPT_GLOBAL_BATCH_DEFAULT = 16
"""litgpt finetune/lora.py TrainArgs(global_batch_size=16) default (samples per optimizer step)."""
LITGPT_EPOCHS_DEFAULT = 5  # litgpt finetune/lora.py TrainArgs(epochs=5) default.


@lru_cache(maxsize=1)
def torchtune_models() -> dict[str, str]:
    import yaml

    return yaml.safe_load(TORCHTUNE_MODELS.read_text(encoding="utf-8")) or {}


def _launch_line(text: str) -> tuple[int | None, int | None, str | None]:
    """(GPUs per node, nodes, recipe) from a `tune run ...` line in the file's comments."""
    for line in text.splitlines():
        if line.lstrip().startswith("#") and (m := TORCHTUNE_LAUNCH.search(line)):
            nodes = m.group(1) or m.group(3)
            return (int(m.group(2)) if m.group(2) else None, int(nodes) if nodes else None, m.group(4))
    return None, None, None


def read_torchtune(doc: Doc, out: ConfigRead, follow, text: str = "") -> None:
    f = doc.path
    comp = str(doc.get("model._component_") or "")
    builder = comp.rsplit(".", 1)[-1]
    method = "qlora" if builder.startswith("qlora_") else "lora" if builder.startswith("lora_") else "full"
    base = re.sub(r"^(q?lora_)", "", builder)
    if method != "full" and truthy(doc.get("model.use_dora", False)):
        method = "dora"
    out.set("method", method, f, "model._component_", f"builder {builder}")
    ckpt_dir = doc.get("checkpointer.checkpoint_dir")
    local = Path(str(ckpt_dir)).expanduser() / "config.json" if ckpt_dir else None
    if local is not None and local.is_file():
        out.set("model", str(local), f, "checkpointer.checkpoint_dir", "the checkpoint's own config.json")
    elif base in torchtune_models():
        out.set("model", torchtune_models()[base], f, "model._component_", f"torchtune builder {base}")
    elif comp:
        out.ignore(f, "model._component_", f"builder '{builder}' is not in tuneplan's list: pass --model")
    if method != "full":
        out.take("lora_rank", doc.int("model.lora_rank"), f, "model.lora_rank")
        out.take("lora_alpha", doc.get("model.lora_alpha"), f, "model.lora_alpha", note="no effect on cost")
        t = [TORCHTUNE_TARGETS[str(x)] for x in doc.get("model.lora_attn_modules") or [] if str(x) in TORCHTUNE_TARGETS]
        if truthy(doc.get("model.apply_lora_to_mlp", False)):
            t += ["gate", "up", "down"]
        if t:
            out.set("lora_targets", tuple(t), f, "model.lora_attn_modules" + (
                "+apply_lora_to_mlp" if "gate" in t else ""))
        if truthy(doc.get("model.apply_lora_to_output", False)):
            out.ignore(f, "model.apply_lora_to_output", "an adapter on the output projection is not counted")
        doc.touch("model.apply_lora_to_output", "model.lora_dropout", "model.quantize_base")
    if method == "qlora":
        out.set("quant", "nf4", f, "model._component_", "torchtune QLoRA: NF4 base weights")
    _torchtune_training(doc, out, text)
    _common_ignored(doc, out)


def _torchtune_training(doc: Doc, out: ConfigRead, text: str) -> None:
    f = doc.path
    out.take("micro_batch", doc.int("batch_size"), f, "batch_size")
    out.take("grad_accum", doc.int("gradient_accumulation_steps"), f, "gradient_accumulation_steps", 1,
             "gradient_accumulation_steps not set: torchtune recipes' default 1")
    out.take("epochs", doc.num("epochs"), f, "epochs")
    out.take("max_steps", doc.steps("max_steps_per_epoch"), f, "max_steps_per_epoch", note="optimizer steps per epoch")
    if pr := precision(doc.get("dtype")):
        out.set("precision", pr, f, "dtype", "weights and compute in it (no fp32 master copy)")
        out.set("master_weights", "none", f, "dtype", "torchtune trains the low-precision weights in place")
    else:
        out.assume("precision", "fp32", f, "dtype not set: fp32")
    out.take("grad_ckpt", doc.flag("enable_activation_checkpointing"), f, "enable_activation_checkpointing", False,
             "enable_activation_checkpointing not set: torchtune default off")
    if truthy(doc.get("enable_activation_offloading", False)):
        out.set("activation_offload", "true", f, "enable_activation_offloading", "not modelled")
    seq = doc.int("tokenizer.max_seq_len")
    out.take("seq_len", seq, f, "tokenizer.max_seq_len")
    if seq is None and doc.has("tokenizer.max_seq_len"):
        out.nulls.setdefault("seq_len", f"{f}: tokenizer.max_seq_len")
        out.notes.append(f"{f}: tokenizer.max_seq_len is null: samples are not truncated, so the length is the "
                         "data's (give --seq-len or --tokens-per-example)")
    ds = doc.get("dataset")
    packed = None
    if isinstance(ds, dict):
        packed = ds.get("packed")
        doc.touch("dataset.packed")
    elif isinstance(ds, list):
        packed = any(isinstance(d, dict) and truthy(d.get("packed", False)) for d in ds)
    out.take("packing", None if packed is None else truthy(packed), f, "dataset.packed", False,
             "dataset.packed not set: torchtune default off")
    if not out.value("packing"):
        out.assume("padding", "longest", f, "unpacked batches padded to their longest sample "
                                             "(torchtune's padded_collate_sft)")
    if opt := doc.get("optimizer._component_"):
        set_optimizer(out, f, "optimizer._component_", opt, fused=doc.get("optimizer.fused"))
    if truthy(doc.get("optimizer_in_bwd", False)):
        out.notes.append(f"{f}: optimizer_in_bwd: gradients freed as the optimizer steps in backward, not modelled")
    if truthy(doc.get("compile", False)):
        out.notes.append(f"{f}: compile: torch.compile kernels are not modelled")
    doc.touch("optimizer_in_bwd", "compile", "custom_sharded_layers", "device", "loss._component_")
    _torchtune_launch(doc, out, text)


def _torchtune_launch(doc: Doc, out: ConfigRead, text: str) -> None:
    f = doc.path
    per_node, nodes, recipe = _launch_line(text)
    offload = truthy(doc.get("fsdp_cpu_offload", False))
    tp = doc.int("tensor_parallel_dim")
    if isinstance(tp, int) and tp > 1:
        out.set("tp", tp, f, "tensor_parallel_dim")
    if recipe is None:
        out.notes.append(f"{f}: no `tune run` line: the recipe (single device or distributed) is not stated")
        return
    key = f"comment: tune run {recipe}"
    if "distributed" in recipe:
        n = (per_node or 1) * (nodes or 1)
        if per_node:
            out.set("gpus", n, f, key + f" --nproc_per_node {per_node}")
        if nodes:
            out.set("nodes", nodes, f, key + f" --nnodes {nodes}")
        out.set("sharding", "fsdp-offload" if offload else "fsdp", f, key,
                "torchtune's distributed recipes shard with FSDP2 (full shard)")
    else:
        out.set("gpus", 1, f, key, "a single-device recipe")


# ---- litgpt ------------------------------------------------------------------------------------

def _litgpt_model(ckpt: str) -> str:
    """checkpoints/<org>/<name> -> <org>/<name> (litgpt's download layout); a local folder with a
    config.json as it is."""
    p = Path(ckpt).expanduser()
    if (p / "config.json").is_file():
        return str(p / "config.json")
    parts = [x for x in Path(ckpt).parts if x not in ("", ".", "/")]
    return "/".join(parts[-2:]) if len(parts) >= 2 else ckpt


def read_litgpt(doc: Doc, out: ConfigRead, follow) -> None:
    f = doc.path
    ckpt = doc.get("checkpoint_dir")
    out.take("model", _litgpt_model(str(ckpt)) if ckpt else None, f, "checkpoint_dir")
    is_lora = any(doc.has(k) for k in ("lora_r", "lora_alpha", *LITGPT_TARGET_DEFAULTS))
    q = str(doc.get("quantize") or "")
    if is_lora:
        four_bit = q.startswith(("bnb.nf4", "bnb.fp4"))
        out.set("method", "qlora" if four_bit else "lora", f, "lora_r" if doc.has("lora_r") else "lora_*")
        if four_bit:
            out.set("quant", "nf4", f, "quantize")
        _lora_rank_alpha(doc, out, "lora_r", LITGPT_LORA_R_DEFAULT, "lora_r not set: litgpt default",
                         "no effect on cost")
        t = [code for k, code in LITGPT_TARGETS.items() if truthy(doc.get(k, LITGPT_TARGET_DEFAULTS[k]))]
        if truthy(doc.get("lora_mlp", False)):
            t += ["gate", "up", "down"]
        if truthy(doc.get("lora_head", False)):
            out.ignore(f, "lora_head", "an adapter on the output head is not counted")
        out.set("lora_targets", tuple(t) or ("q", "v"), f, "lora_query/key/value/projection/mlp")
        out.set("adapter_dtype", "compute", f, "lora_r", "litgpt's adapters run in the compute dtype")
    else:
        out.assume("method", "full", f, "no lora_* keys: litgpt finetune_full")
    if q == "bnb.int8-training":
        out.set("quant", "int8", f, "quantize")
    pr = precision(doc.get("precision"))
    out.take("precision", pr, f, "precision", "bf16", "precision not set: litgpt's default bf16-true where supported")
    if pr and str(doc.get("precision")).endswith("-true"):
        out.set("master_weights", "none", f, "precision", "'-true': weights trained in that dtype")
    devices = doc.get("devices", 1)
    nodes = doc.get("num_nodes", 1)
    dev = devices if isinstance(devices, int) and devices > 0 else 1
    nn = nodes if isinstance(nodes, int) and nodes > 0 else 1
    out.set("gpus", dev * nn, f, "devices" + (" x num_nodes" if nn > 1 else "")) if doc.has("devices") else \
        out.assume("gpus", 1, f, "devices not set: litgpt default 1")
    if nn > 1:
        out.set("nodes", nn, f, "num_nodes")
    if dev * nn > 1:
        out.set("sharding", "fsdp", f, "devices", "litgpt shards over several devices with FSDP")
        out.assume("grad_ckpt", not is_lora, f, "litgpt's FSDP strategy checkpoints each Block (finetune/full.py)")
    out.assume("grad_ckpt", False, f, "litgpt has no activation checkpointing on one device")
    _litgpt_train(doc, out, dev * nn)
    opt = doc.get("optimizer")
    name = opt.get("class_path") if isinstance(opt, dict) else opt
    if isinstance(opt, dict):
        doc.touch("optimizer")
    if name:
        set_optimizer(out, f, "optimizer", name)
    out.assume("optimizer", "adamw", f, "optimizer not set: litgpt default AdamW")
    out.assume("optimizer_impl", "foreach", f, "litgpt builds torch.optim.AdamW with torch's defaults (foreach on CUDA)")
    _common_ignored(doc, out)


def _litgpt_train(doc: Doc, out: ConfigRead, world: int) -> None:
    f = doc.path
    mb = doc.int("train.micro_batch_size") or 1
    out.set("micro_batch", mb, f, "train.micro_batch_size") if doc.has("train.micro_batch_size") else \
        out.assume("micro_batch", 1, f, "train.micro_batch_size not set: litgpt finetune default")
    gb = doc.int("train.global_batch_size") or LITGPT_GLOBAL_BATCH_DEFAULT
    ga = max(1, gb // world // mb)
    if doc.has("train.global_batch_size"):
        out.set("global_batch", gb, f, "train.global_batch_size")
        out.set("grad_accum", ga, f, "train.global_batch_size", f"{gb} // {world} device(s) // micro-batch {mb}")
    else:
        out.assume("grad_accum", ga, f, f"global_batch_size not set: litgpt default {gb} // devices // micro-batch")
    out.take("seq_len", doc.int("train.max_seq_length"), f, "train.max_seq_length")
    out.take("epochs", doc.num("train.epochs"), f, "train.epochs", float(LITGPT_EPOCHS_DEFAULT),
             "train.epochs not set: litgpt finetune default")
    out.take("max_steps", doc.steps("train.max_steps"), f, "train.max_steps")
    out.take("tokens", doc.num("train.max_tokens"), f, "train.max_tokens")
    out.assume("padding", "longest", f, "litgpt pads each batch to its longest sample")
