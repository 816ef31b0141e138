"""A live transformers run described in the runs schema (model, peft and training-argument settings),
and tuneplan's prediction for it."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from typing import Any

from tuneplan.configs.maps import optimizer as map_optimizer
from tuneplan.configs.maps import targets as map_targets

SHARDING_TO_JOB = {"fsdp-full": "fsdp", "none": "ddp"}
"""Runs-schema sharding -> JobSpec sharding where the names differ."""
STAGE_OF_ARGS = {"SFTConfig": "sft", "TrainingArguments": "sft", "DPOConfig": "dpo", "ORPOConfig": "orpo",
                 "KTOConfig": "kto", "CPOConfig": "cpo", "GRPOConfig": "grpo", "PPOConfig": "ppo", "RLOOConfig": "rloo"}
"""TRL / transformers argument classes -> the runs `stage` (CPO with loss_type simpo: simpo)."""
TRAINING_ARG_KEYS = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps", "bf16", "fp16",
    "optim", "gradient_checkpointing", "gradient_checkpointing_kwargs", "deepspeed", "fsdp", "fsdp_config",
    "torch_compile", "max_length", "max_seq_length", "packing", "padding_free", "use_liger_kernel", "world_size",
    "seed", "learning_rate",
)
"""Training arguments kept in `training_args_json` (the ones that describe the run's cost)."""


def _stage(args) -> str:
    for cls in type(args).__mro__:
        if cls.__name__ in STAGE_OF_ARGS:
            stage = STAGE_OF_ARGS[cls.__name__]
            return "simpo" if stage == "cpo" and str(getattr(args, "loss_type", "")) == "simpo" else stage
    return "sft"


def _base(model):
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _peft(model) -> dict | None:
    cfgs = getattr(model, "peft_config", None)
    if not isinstance(cfgs, dict) or not cfgs:
        return None
    cfg = cfgs.get(getattr(model, "active_adapter", None) or "default") or next(iter(cfgs.values()))
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    return {k: (sorted(v) if isinstance(v, set) else v) for k, v in d.items()}


def _quant(config) -> str:
    q = getattr(config, "quantization_config", None)
    if q is None:
        return "none"
    d = q.to_dict() if hasattr(q, "to_dict") else dict(q)
    if d.get("load_in_4bit"):
        return "nf4"
    if d.get("load_in_8bit"):
        return "int8"
    method = str(d.get("quant_method", "")).lower()
    return {"gptq": "gptq-int4", "awq": "awq-int4"}.get(method, method or "none")


def _method(model, peft: dict | None, quant: str) -> str:
    if peft is None:
        params = list(_base(model).parameters()) if model is not None else []
        frozen = any(not p.requires_grad for p in params)
        return "freeze" if frozen and any(p.requires_grad for p in params) else "full"
    from tuneplan.specs.peft import PEFT_TYPES

    kind = str(peft.get("peft_type", "")).upper().removeprefix("PEFTTYPE.")
    if kind in PEFT_TYPES:  # peft's other methods (specs/peft.py)
        return PEFT_TYPES[kind]
    if not kind.endswith("LORA"):
        return "other"
    return "dora" if peft.get("use_dora") else {"nf4": "qlora", "gptq-int4": "gptq-lora", "awq-int4": "gptq-lora"}.get(quant, "lora")


def _precision(args, model) -> str:
    if getattr(args, "bf16", False):
        return "bf16"
    if getattr(args, "fp16", False):
        return "fp16"
    dtype = str(getattr(_base(model), "dtype", "")) if model is not None else ""
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(dtype, "fp32")


def _sharding(args, world: int) -> str:
    if getattr(args, "deepspeed", None):
        cfg = getattr(getattr(args, "hf_deepspeed_config", None), "config", None)
        zero = (cfg.get("zero_optimization") or {}) if isinstance(cfg, dict) else {}
        stage = zero.get("stage")
        if stage == 3 and str((zero.get("offload_param") or {}).get("device", "none")) in ("cpu", "nvme"):
            return "zero3-offload"
        return f"zero{stage}" if stage in (1, 2, 3) else "zero3"
    fsdp = getattr(args, "fsdp", None)
    if fsdp:
        text = (" ".join(map(str, fsdp)) if isinstance(fsdp, list | tuple) else str(fsdp)).lower()
        return "fsdp-grad-op" if "shard_grad_op" in text else "fsdp-hybrid" if "hybrid" in text else "fsdp-full"
    return "ddp" if world > 1 else "none"


def _ckpt_on(model) -> bool:
    base = _base(model) if model is not None else None
    attrs = [a for a in ("is_activation_checkpointing", "is_gradient_checkpointing") if a in dir(type(base))]
    return bool(base is not None and attrs and getattr(base, attrs[0], False))


def _args_json(args) -> str:
    d = args.to_dict() if hasattr(args, "to_dict") else {}
    keep = {k: d.get(k, getattr(args, k, None)) for k in TRAINING_ARG_KEYS if k in d or hasattr(args, k)}
    return json.dumps({k: getattr(v, "value", v) for k, v in keep.items()}, default=str, sort_keys=True)


def describe_run(model, args, world: int, device: str, model_name: str | None) -> dict[str, Any]:
    """The configuration columns of the row for a live run."""
    from tuneplan.profile.runner import adapter_dtype, device_name, gpu_column, versions

    config = getattr(_base(model), "config", None) if model is not None else None
    name = model_name or (getattr(config, "_name_or_path", "") or getattr(config, "name_or_path", "") or "")
    peft = _peft(model)
    quant = _quant(config)
    method = _method(model, peft, quant)
    opt_name = getattr(getattr(args, "optim", None), "value", getattr(args, "optim", None))
    opt, _ = map_optimizer(opt_name) if opt_name else (None, "")
    attn = str(getattr(config, "_attn_implementation", "") or "")
    tgt = peft.get("target_modules") if peft else None
    t, _unknown = map_targets([tgt] if isinstance(tgt, str) else tgt or [])
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world) or world)
    cuda = "cuda" if device == "cuda" else "cpu"
    mb = int(getattr(args, "per_device_train_batch_size", 1) or 1)
    ga = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
    row: dict[str, Any] = {
        "model": name or "unknown",
        "model_hf_id": name if re.match(r"^[\w.\-]+/[\w.\-]+$", name or "") and not os.path.exists(name) else "",
        "method": method, "lora_rank": peft.get("r") if peft else None, "lora_targets": ",".join(t) if t else None,
        "adapter_dtype": adapter_dtype() if method in ("lora", "qlora", "dora", "gptq-lora") else None,
        "precision": _precision(args, model), "quant": quant,
        "optimizer": opt or (str(opt_name) if opt_name else None),
        "grad_ckpt": bool(getattr(args, "gradient_checkpointing", False) or _ckpt_on(model)),
        "flash_attn": attn != "eager" if attn else None, "attn_impl": attn or None,
        "framework": "trl" if type(args).__module__.startswith("trl") else "hf-trainer", "stage": _stage(args),
        "group_size": getattr(args, "num_generations", None),
        "completion_len": getattr(args, "max_completion_length", None), "sharding": _sharding(args, world),
        "gpu": gpu_column(cuda, None), "device_name": device_name("cuda:0" if cuda == "cuda" else "cpu"),
        "device": cuda, "gpus": world, "nodes": max(1, world // max(1, local)), "micro_batch_size": mb,
        "grad_accum": ga, "global_batch_size": mb * ga * world,
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_config_json": json.dumps(config.to_dict(), default=str, sort_keys=True) if config is not None else "",
        "peft_config_json": json.dumps(peft, default=str, sort_keys=True) if peft else "",
        "training_args_json": _args_json(args), **versions(("torch", "transformers", "peft", "trl")),
    }
    if config is not None:
        try:
            from tuneplan.specs.architectures import model_from_config

            row["params_b"] = model_from_config(config.to_dict(), name or "model").params_total / 1e9
        except Exception:  # noqa: BLE001 - an architecture tuneplan cannot describe: count the tensors
            row["params_b"] = sum(p.numel() for p in _base(model).parameters()) / 1e9
    return row


def predict_row(row: dict[str, Any], model, gpu) -> dict[str, Any] | None:
    """tuneplan's estimate for the recorded configuration; None when there is no GPU to predict for."""
    from tuneplan.api import estimate
    from tuneplan.specs.architectures import model_from_config
    from tuneplan.specs.gpu import GPUSpec, resolve_gpu
    from tuneplan.specs.job import METHODS, OPTIMIZERS, STAGES

    if not gpu and str(row.get("gpu", "")).startswith("local-"):
        return None
    gspec = gpu if isinstance(gpu, GPUSpec) else resolve_gpu(str(gpu or row["gpu"]))
    config = getattr(_base(model), "config", None)
    mspec = model_from_config(config.to_dict(), row["model"])
    method = row["method"] if row["method"] in METHODS else "lora"
    kw: dict[str, Any] = {
        "method": method, "precision": row["precision"] if row["precision"] in ("bf16", "fp16", "fp32") else "bf16",
        "grad_ckpt": row["grad_ckpt"], "gpus": row["gpus"], "nodes": row["nodes"],
        "sharding": SHARDING_TO_JOB.get(row["sharding"], row["sharding"]), "micro_batch": row["micro_batch_size"],
        "grad_accum": row["grad_accum"], "seq_len": row["seq_len"], "padding": row["padding"],
        "examples": float(row["global_batch_size"] * max(1, row["n_steps"])),
        "tokens_per_example": row.get("avg_tokens_per_sample") or None,
    }
    if row.get("flash_attn") is not None:
        kw["flash_attn"] = bool(row["flash_attn"])
    if row.get("stage") in STAGES and row["stage"] != "sft":
        kw["stage"] = row["stage"]
        if row["stage"] in ("grpo", "ppo", "rloo"):
            kw.update(group_size=row.get("group_size") or None, completion_len=row.get("completion_len") or None)
    if row.get("optimizer") in OPTIMIZERS:
        kw["optimizer"] = row["optimizer"]
    if method in ("lora", "qlora", "dora", "gptq-lora"):
        kw.update(lora_rank=row.get("lora_rank") or 8, lora_targets=row.get("lora_targets") or "q,v",
                  adapter_dtype=row.get("adapter_dtype") or "fp32")
    if row.get("quant") not in (None, "none") and method != "full":
        kw["quant"] = row["quant"]
    r = estimate(mspec, gspec, interval=None, **kw)
    return {"gpu": gspec.name, "step_time_s": r.step_time_s, "memory_per_gpu_gib": r.memory_per_gpu_gib,
            "tokens_per_s": r.tokens_per_s}
