"""Recipe configs: torchtune recipe YAML and litgpt YAML. torchtune `_component_` values are read as
names only (never imported); defaults are the recipes' `cfg.get(..., default)` values (torchtune 0.6
recipes/*.py) and litgpt's `finetune/*.py setup()` / `TrainArgs` defaults."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from tuneplan.configs.base import ConfigRead, Doc
from tuneplan.configs.maps import precision, set_optimizer, truthy
from tuneplan.configs.trainers import _common_ignored

TORCHTUNE_MODELS = Path(__file__).resolve().parent.parent / "data" / "torchtune_models.yaml"
TORCHTUNE_LAUNCH = re.compile(r"tune\s+run\s+(?:--nnodes[ =](\d+)\s+)?(?:--nproc_per_node[ =](\d+)\s+)?"
                              r"(?:--nnodes[ =](\d+)\s+)?([A-Za-z0-9_]+)")
"""The launch line torchtune's shipped configs state in their header comment."""
TORCHTUNE_TARGETS = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "output_proj": "o"}
LITGPT_TARGETS = {"lora_query": "q", "lora_key": "k", "lora_value": "v", "lora_projection": "o"}
LITGPT_TARGET_DEFAULTS = {"lora_query": True, "lora_key": False, "lora_value": True, "lora_projection": False,
                          "lora_mlp": False, "lora_head": False}
"""litgpt finetune/lora.py setup() defaults for which weights get adapters."""
LITGPT_LORA_R_DEFAULT = 8
"""litgpt finetune/lora.py `lora_r` default."""
LITGPT_GLOBAL_BATCH_DEFAULT = 16
"""litgpt finetune/lora.py TrainArgs(global_batch_size=16) default (samples per optimizer step)."""
LITGPT_EPOCHS_DEFAULT = 5
"""litgpt finetune/lora.py TrainArgs(epochs=5) default."""


@lru_cache(maxsize=1)
def torchtune_models() -> dict[str, str]:
    import yaml

    return yaml.safe_load(TORCHTUNE_MODELS.read_text(encoding="utf-8")) or {}


def _launch_line(text: str) -> tuple[int | None, int | None, str | None]:
    """(GPUs per node, nodes, recipe) from a `tune run ...` line in the file's comments."""
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            continue
        m = TORCHTUNE_LAUNCH.search(line)
        if m:
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
        r = doc.int("model.lora_rank")
        if isinstance(r, int) and r > 0:
            out.set("lora_rank", r, f, "model.lora_rank")
        if doc.get("model.lora_alpha") is not None:
            out.set("lora_alpha", doc.get("model.lora_alpha"), f, "model.lora_alpha", "no effect on cost")
        t = [TORCHTUNE_TARGETS.get(str(x)) for x in doc.get("model.lora_attn_modules") or []]
        t = [x for x in t if x]
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
    for key, fld in (("batch_size", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        v = doc.int(key)
        if isinstance(v, int) and v > 0:
            out.set(fld, v, f, key)
    out.assume("grad_accum", 1, f, "gradient_accumulation_steps not set: torchtune recipes' default 1")
    ep = doc.num("epochs")
    if isinstance(ep, int | float) and ep > 0:
        out.set("epochs", float(ep), f, "epochs")
    ms = doc.int("max_steps_per_epoch", minimum=None)
    if isinstance(ms, int) and ms > 0:
        out.set("max_steps", ms, f, "max_steps_per_epoch", "optimizer steps per epoch")
    pr = precision(doc.get("dtype"))
    if pr:
        out.set("precision", pr, f, "dtype", "weights and compute in it (no fp32 master copy)")
        out.set("master_weights", "none", f, "dtype", "torchtune trains the low-precision weights in place")
    else:
        out.assume("precision", "fp32", f, "dtype not set: fp32")
    out.set("grad_ckpt", truthy(doc.get("enable_activation_checkpointing", False)), f,
            "enable_activation_checkpointing") if doc.has("enable_activation_checkpointing") else out.assume(
        "grad_ckpt", False, f, "enable_activation_checkpointing not set: torchtune default off")
    if truthy(doc.get("enable_activation_offloading", False)):
        out.set("activation_offload", "true", f, "enable_activation_offloading", "not modelled")
    seq = doc.int("tokenizer.max_seq_len")
    if isinstance(seq, int) and seq > 0:
        out.set("seq_len", seq, f, "tokenizer.max_seq_len")
    elif doc.has("tokenizer.max_seq_len"):
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
    out.set("packing", truthy(packed), f, "dataset.packed") if packed is not None else out.assume(
        "packing", False, f, "dataset.packed not set: torchtune default off")
    if not out.value("packing"):
        out.assume("padding", "longest", f, "unpacked batches padded to their longest sample "
                                             "(torchtune's padded_collate_sft)")
    opt = doc.get("optimizer._component_")
    if opt:
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
    if ckpt:
        out.set("model", _litgpt_model(str(ckpt)), f, "checkpoint_dir")
    is_lora = any(doc.has(k) for k in ("lora_r", "lora_alpha", *LITGPT_TARGET_DEFAULTS))
    q = str(doc.get("quantize") or "")
    if is_lora:
        method = "qlora" if q.startswith("bnb.nf4") or q.startswith("bnb.fp4") else "lora"
        out.set("method", method, f, "lora_r" if doc.has("lora_r") else "lora_*")
        if q.startswith("bnb.nf4") or q.startswith("bnb.fp4"):
            out.set("quant", "nf4", f, "quantize")
        r = doc.int("lora_r")
        out.set("lora_rank", r, f, "lora_r") if isinstance(r, int) and r > 0 else out.assume(
            "lora_rank", LITGPT_LORA_R_DEFAULT, f, "lora_r not set: litgpt default")
        if doc.get("lora_alpha") is not None:
            out.set("lora_alpha", doc.get("lora_alpha"), f, "lora_alpha", "no effect on cost")
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
    if pr:
        out.set("precision", pr, f, "precision")
        if str(doc.get("precision")).endswith("-true"):
            out.set("master_weights", "none", f, "precision", "'-true': weights trained in that dtype")
    else:
        out.assume("precision", "bf16", f, "precision not set: litgpt's default bf16-true where supported")
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
    mb = doc.int("train.micro_batch_size")
    mb = mb if isinstance(mb, int) and mb > 0 else 1
    out.set("micro_batch", mb, f, "train.micro_batch_size") if doc.has("train.micro_batch_size") else \
        out.assume("micro_batch", 1, f, "train.micro_batch_size not set: litgpt finetune default")
    gb = doc.int("train.global_batch_size")
    gb = gb if isinstance(gb, int) and gb > 0 else LITGPT_GLOBAL_BATCH_DEFAULT
    ga = max(1, gb // world // mb)
    if doc.has("train.global_batch_size"):
        out.set("global_batch", gb, f, "train.global_batch_size")
        out.set("grad_accum", ga, f, "train.global_batch_size", f"{gb} // {world} device(s) // micro-batch {mb}")
    else:
        out.assume("grad_accum", ga, f, f"global_batch_size not set: litgpt default {gb} // devices // micro-batch")
    seq = doc.int("train.max_seq_length")
    if isinstance(seq, int) and seq > 0:
        out.set("seq_len", seq, f, "train.max_seq_length")
    ep = doc.num("train.epochs")
    if isinstance(ep, int | float) and ep > 0:
        out.set("epochs", float(ep), f, "train.epochs")
    else:
        out.assume("epochs", float(LITGPT_EPOCHS_DEFAULT), f, "train.epochs not set: litgpt finetune default")
    ms = doc.int("train.max_steps", minimum=None)
    if isinstance(ms, int) and ms > 0:
        out.set("max_steps", ms, f, "train.max_steps")
    mt = doc.num("train.max_tokens")
    if isinstance(mt, int | float) and mt > 0:
        out.set("tokens", float(mt), f, "train.max_tokens")
    out.assume("padding", "longest", f, "litgpt pads each batch to its longest sample")
