"""Launcher and sharding configs: DeepSpeed JSON, accelerate YAML, and the FSDP settings that
axolotl, transformers and accelerate write (`fsdp` + `fsdp_config`)."""

from __future__ import annotations

from tuneplan.configs.base import ConfigRead, Doc
from tuneplan.configs.maps import precision, set_optimizer, truthy

ZERO_STAGES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}
"""DeepSpeed `zero_optimization.stage` -> tuneplan sharding (stage 0: plain data parallel)."""

FSDP_STRATEGIES = {
    "full_shard": "fsdp", "1": "fsdp", "shard_grad_op": "fsdp-grad-op", "2": "fsdp-grad-op",
    "no_shard": "ddp", "3": "ddp", "hybrid_shard": "fsdp-hybrid", "4": "fsdp-hybrid",
    "_hybrid_shard_zero2": "fsdp-hybrid", "5": "fsdp-hybrid",
}
"""torch FSDP ShardingStrategy names (and accelerate's numbers 1-5) -> tuneplan sharding."""

OFFLOAD_DEVICES = ("cpu", "nvme")


def read_deepspeed(doc: Doc, out: ConfigRead, prefix: str = "") -> None:
    """A DeepSpeed config (a JSON file, or the dict inline in a training config: keys under `prefix`)."""
    f = doc.path
    p = prefix
    auto: list[str] = []

    def num(key: str, fld: str) -> None:
        v = doc.get(p + key)
        if v is None:
            return
        if isinstance(v, str) and v.strip().lower() == "auto":
            auto.append(key)
            return
        out.take(fld, doc.int(p + key), f, p + key)

    num("train_micro_batch_size_per_gpu", "micro_batch")
    num("gradient_accumulation_steps", "grad_accum")
    num("train_batch_size", "global_batch")
    _zero_stage(doc, out, p + "zero_optimization.stage", p + "zero_optimization.offload_param.device",
                p + "zero_optimization.offload_optimizer.device")
    for dtype in ("bf16", "fp16"):
        en = doc.get(p + f"{dtype}.enabled")
        if en is None:
            continue
        if isinstance(en, str) and en.strip().lower() == "auto":
            auto.append(f"{dtype}.enabled")
        elif truthy(en):
            out.set("precision", dtype, f, p + f"{dtype}.enabled")
    opt = doc.get(p + "optimizer.type")
    if opt is not None:
        set_optimizer(out, f, p + "optimizer.type", opt)
        if str(opt).strip().lower() in ("adam", "adamw") and not truthy(doc.get(p + "optimizer.params.torch_adam", False)):
            out.set("optimizer_impl", "fused", f, p + "optimizer.type",
                    "DeepSpeed's Adam / AdamW is its FusedAdam (runtime/engine.py)")
    if truthy(doc.get(p + "activation_checkpointing.partition_activations", False)) or truthy(
            doc.get(p + "activation_checkpointing.cpu_checkpointing", False)):
        out.set("grad_ckpt", True, f, p + "activation_checkpointing")
    if auto:
        out.notes.append(f"{f}: DeepSpeed 'auto' values ({', '.join(auto)}) take the training arguments' "
                         "values")


def _zero_stage(doc: Doc, out: ConfigRead, stage_key: str, param_key: str, optimizer_key: str) -> None:
    """A ZeRO stage -> sharding; ZeRO-3 with the parameters or the optimizer offloaded -> zero3-offload."""
    f = doc.path
    stage = doc.get(stage_key)
    if stage is None:
        return
    try:
        st = int(stage)
    except (TypeError, ValueError):
        st = -1
    if st not in ZERO_STAGES:
        out.ignore(f, stage_key, f"unknown ZeRO stage '{stage}' (allowed: 0, 1, 2, 3)")
        return
    devices = {what: str(doc.get(key, "none")).lower() for what, key in (("parameters", param_key),
                                                                         ("optimizer", optimizer_key))}
    offloaded = {what: dev for what, dev in devices.items() if dev in OFFLOAD_DEVICES}
    if st == 3 and offloaded:
        out.set("sharding", "zero3-offload", f, stage_key,
                f"ZeRO-3 with {' and '.join(offloaded)} offloaded to {next(iter(offloaded.values()))}")
    else:
        out.set("sharding", ZERO_STAGES[st], f, stage_key)
        if "optimizer" in offloaded:
            out.ignore(f, optimizer_key, f"ZeRO-{st} optimizer offload is not modelled: the optimizer state is "
                                         "counted on the GPU (an upper bound on memory)")


def read_fsdp(doc: Doc, out: ConfigRead, list_key: str | None, cfg_key: str) -> bool:
    """FSDP from a transformers/axolotl `fsdp` option list (or string) and an `fsdp_config` mapping
    (keys with or without the `fsdp_` prefix; FSDP2's `reshard_after_forward`). True when FSDP is on."""
    f = doc.path
    opts: list[str] = []
    if list_key is not None:
        raw = doc.get(list_key)
        if isinstance(raw, str):
            opts = [x.strip().lower() for x in raw.replace(",", " ").split() if x.strip()]
        elif isinstance(raw, list):
            opts = [str(x).strip().lower() for x in raw]
    cfg = doc.get(cfg_key) if doc.has(cfg_key) else None
    if not opts and not isinstance(cfg, dict):
        return False

    def ckey(name: str):
        for k in (f"fsdp_{name}", name):
            if isinstance(cfg, dict) and k in cfg:
                doc.touch(f"{cfg_key}.{k}")
                return f"{cfg_key}.{k}", cfg[k]
        return None, None

    sharding = None
    src = list_key or cfg_key
    for o in opts:
        if o in FSDP_STRATEGIES:
            sharding, src = FSDP_STRATEGIES[o], list_key
    k, v = ckey("sharding_strategy")
    if v is not None and sharding is None:
        sharding = FSDP_STRATEGIES.get(str(v).strip().lower())
        src = k
    k2, reshard = ckey("reshard_after_forward")
    if sharding is None and reshard is not None:
        sharding, src = ("fsdp" if truthy(reshard) else "fsdp-grad-op"), k2
    if sharding is None:
        if not opts and not cfg:
            return False
        sharding = "fsdp"
        out.notes.append(f"{f}: FSDP without a sharding strategy: FULL_SHARD assumed (torch's default)")
    k3, off = ckey("offload_params")
    offload = "offload" in opts or truthy(off)
    if offload and sharding == "fsdp":
        out.set("sharding", "fsdp-offload", f, k3 or (list_key or cfg_key), "parameters offloaded to CPU")
    else:
        out.set("sharding", sharding, f, src)
    k4, ac = ckey("activation_checkpointing")
    if ac is not None and truthy(ac):
        out.set("grad_ckpt", True, f, k4)
    if list_key and opts:
        doc.touch(list_key)
    return True


def read_accelerate(doc: Doc, out: ConfigRead, follow) -> None:
    """An accelerate config (`accelerate config` / `--config_file`)."""
    f = doc.path
    out.take("gpus", doc.int("num_processes"), f, "num_processes", note="total processes (GPUs) over all machines")
    out.take("nodes", doc.int("num_machines"), f, "num_machines")
    out.take("precision", precision(doc.get("mixed_precision")), f, "mixed_precision")
    if truthy(doc.get("use_cpu", False)):
        out.ignore(f, "use_cpu", "training on CPU is not estimated (GPU only)")
    dt = str(doc.get("distributed_type", "NO")).upper()
    if dt == "MULTI_GPU":
        out.set("sharding", "ddp", f, "distributed_type")
    elif dt == "FSDP":
        if not read_fsdp(doc, out, None, "fsdp_config"):
            out.set("sharding", "fsdp", f, "distributed_type", "FULL_SHARD assumed (no fsdp_config)")
        else:
            doc.touch("distributed_type")
    elif dt == "DEEPSPEED":
        doc.touch("distributed_type")
        _accelerate_deepspeed(doc, out, follow)
    elif dt == "MEGATRON_LM":
        doc.touch("distributed_type")
        for key, fld in (("megatron_lm_config.megatron_lm_tp_degree", "tp"),
                         ("megatron_lm_config.megatron_lm_pp_degree", "pp")):
            out.take(fld, doc.int(key), f, key)
    ids = doc.get("gpu_ids")
    if ids is not None and str(ids) != "all":
        out.set("gpu_ids", str(ids), f, "gpu_ids")


def _accelerate_deepspeed(doc: Doc, out: ConfigRead, follow) -> None:
    f = doc.path
    file_key = "deepspeed_config.deepspeed_config_file"
    if ref := doc.get(file_key):
        follow(ref, file_key)
    _zero_stage(doc, out, "deepspeed_config.zero_stage", "deepspeed_config.offload_param_device",
                "deepspeed_config.offload_optimizer_device")
    out.take("grad_accum", doc.int("deepspeed_config.gradient_accumulation_steps"), f,
             "deepspeed_config.gradient_accumulation_steps")
