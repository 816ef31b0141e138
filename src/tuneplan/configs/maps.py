"""Framework names -> tuneplan's: optimizers, precisions, attention implementations, LoRA target
modules. Each table lists the names the frameworks document (transformers' OptimizerNames,
bitsandbytes / torchao classes used by torchtune and litgpt, peft module names)."""

from __future__ import annotations

import re

OPTIMIZERS: dict[str, str] = {
    # transformers OptimizerNames (also axolotl's `optimizer`, LLaMA-Factory's `optim`)
    "adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw", "adamw": "adamw",
    "adam": "adamw", "adamw_apex_fused": "adamw", "adamw_torch_xla": "adamw", "adamw_torch_npu_fused": "adamw",
    "adamw_anyprecision": "adamw", "adamw_bnb_8bit": "adamw-8bit", "adamw_8bit": "adamw-8bit",
    "adam8bit": "adamw-8bit", "ao_adamw_8bit": "adamw-8bit", "adamw_torch_8bit": "adamw-8bit",
    "paged_adamw_8bit": "paged-adamw-8bit", "paged_adam_8bit": "paged-adamw-8bit",
    "paged_adamw_32bit": "adamw", "paged_adamw": "adamw", "paged_adam_32bit": "adamw", "paged_adam": "adamw",
    "adafactor": "adafactor", "sgd": "sgd", "optimi_adamw": "adamw", "adamw_torch_4bit": "adamw-4bit",
    # class paths (torchtune `_component_`, litgpt `class_path`, DeepSpeed `optimizer.type`)
    "torch.optim.adamw": "adamw", "torch.optim.adam": "adamw", "torch.optim.sgd": "sgd",
    "bitsandbytes.optim.adamw8bit": "adamw-8bit", "bitsandbytes.optim.adam8bit": "adamw-8bit",
    "bitsandbytes.optim.pagedadamw8bit": "paged-adamw-8bit", "bitsandbytes.optim.pagedadamw": "adamw",
    "bitsandbytes.optim.pagedadamw32bit": "adamw", "torchao.optim.adamw8bit": "adamw-8bit",
    "torchao.prototype.low_bit_optim.adamw8bit": "adamw-8bit", "torchao.optim.adamw4bit": "adamw-4bit",
    "torchao.prototype.low_bit_optim.adamw4bit": "adamw-4bit",
    "adamw8bit": "adamw-8bit", "pagedadamw8bit": "paged-adamw-8bit", "onebitadam": "adamw",
    # transformers' GaLore optims (galore_torch): the block linears' moments at rank r
    "galore_adamw": "galore-adamw", "galore_adamw_layerwise": "galore-adamw", "galore_adamw_8bit": "galore-adamw",
    "galore_adamw_8bit_layerwise": "galore-adamw",
}
"""Optimizer name (lower case) -> tuneplan optimizer. Paged 32-bit AdamW keeps fp32 moments (same
memory as AdamW, paged to CPU only under pressure); 4-bit AdamW (torchao's) is its own (physics/memory.py)."""

OPTIMIZER_NOTES = {
    "galore_adamw_layerwise": "layer-wise GaLore steps free each gradient early: counted with all of them held",
    "galore_adamw_8bit": "GaLore's 8-bit moments counted as 16/32-bit (the projected moments are small)",
    "galore_adamw_8bit_layerwise": "GaLore's 8-bit moments counted as 16/32-bit; every gradient counted as held",
    "paged_adamw_32bit": "paged 32-bit AdamW: fp32 moments as AdamW (paged out only under memory pressure)",
    "paged_adamw": "paged 32-bit AdamW: fp32 moments as AdamW (paged out only under memory pressure)",
}

PRECISIONS: dict[str, str] = {
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16", "bf16-true": "bf16", "bf16-mixed": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16", "16-mixed": "fp16",
    "16-true": "fp16", "fp32": "fp32", "float32": "fp32", "32-true": "fp32", "32": "fp32", "no": "fp32",
    "fp8": "fp8", "transformer-engine": "fp8",
}
"""Precision / dtype names (torch dtypes, Lightning precision strings, accelerate mixed_precision)."""

TARGETS: dict[str, str] = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "output_proj": "o", "out_proj": "o",
    "dense": "o", "gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w3": "up",
    "w2": "down", "qkv_proj": "qkv", "query_key_value": "qkv", "c_attn": "qkv", "wqkv": "qkv",
    "fc1": "fc1", "fc2": "fc2", "gate_up_proj": "gate", "q": "q", "k": "k", "v": "v", "o": "o",
    "gate": "gate", "up": "up", "down": "down",
}
"""peft / torchtune module names -> tuneplan target codes (see `--lora-targets`)."""

ALL_LINEAR_NAMES = ("all", "all-linear", "all_linear")


def optimizer(name: str) -> tuple[str | None, str]:
    """(tuneplan optimizer or None when unknown, a note)."""
    low = str(name).strip().lower()
    key = low if low in OPTIMIZERS else low.rsplit(".", 1)[-1]  # a class path by its class name
    return OPTIMIZERS.get(key), OPTIMIZER_NOTES.get(key, "")


OPTIMIZER_IMPLS_BY_NAME: dict[str, str] = {
    # transformers OptimizerNames (trainer.py get_optimizer_cls_and_kwargs): adamw_torch is torch.optim.AdamW
    # with torch's defaults (foreach on CUDA), the *_fused ones pass fused=True or are apex's FusedAdam;
    # adamw_hf was transformers' own AdamW, a loop over parameters
    "adamw_torch": "foreach", "adamw_torch_fused": "fused", "adamw_apex_fused": "fused",
    "adamw_torch_npu_fused": "fused", "adamw_hf": "for-loop",
    # class paths (torchtune `_component_`, litgpt `class_path`): torch's defaults unless `fused: True`
    "torch.optim.adamw": "foreach", "torch.optim.adam": "foreach",
}
"""Optimizer name (lower case) -> how its AdamW step runs (specs.framework.OPTIMIZER_IMPLS)."""


def set_optimizer(out, f: str, key: str, name, fused=None) -> None:
    """A config's optimizer name on `out` (a ConfigRead): tuneplan's optimizer, or ignored (AdamW
    assumed) when tuneplan does not know it; and how its step runs where the name (or a `fused`
    option next to it) says."""
    o, note = optimizer(name)
    if o:
        out.set("optimizer", o, f, key, note)
    else:
        out.ignore(f, key, f"optimizer '{name}' not in tuneplan's list: AdamW assumed")
    impl = OPTIMIZER_IMPLS_BY_NAME.get(str(name).strip().lower())
    if impl and fused is not None and truthy(fused):
        out.set("optimizer_impl", "fused", f, key.rsplit(".", 1)[0] + ".fused", "torch.optim fused=True: one kernel")
    elif impl:
        out.set("optimizer_impl", impl, f, key, f"{name}: {impl} AdamW step")


def galore_rank(optim_args) -> int | None:
    """GaLore's `rank` from transformers' `optim_args` ("rank=64, update_proj_gap=100, ..."; None when
    not there: transformers' default 128 applies)."""
    m = re.search(r"(?:^|[,\s])rank\s*=\s*(\d+)", str(optim_args or ""))
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def precision(name) -> str | None:
    """tuneplan's precision of a dtype / precision name; None when absent or unknown."""
    return PRECISIONS.get(str(name).strip().lower())


def targets(names) -> tuple[tuple[str, ...], list[str]]:
    """LoRA target modules -> (tuneplan targets, names not mapped). `all` / `all-linear` -> all-linear."""
    if isinstance(names, str):
        items = [x.strip() for x in re.split(r"[,\s]+", names) if x.strip()]
    else:
        items = [str(x).strip() for x in names or []]
    if any(x.lower() in ALL_LINEAR_NAMES for x in items):
        return ("all-linear",), []
    out: list[str] = []
    unknown: list[str] = []
    for x in items:
        code = TARGETS.get(x.rsplit(".", 1)[-1])
        if code is None:
            unknown.append(x)
        elif code not in out:
            out.append(code)
    return tuple(out), unknown


def attention(name) -> bool:
    """attn_implementation -> flash/SDPA memory-efficient attention (True) or eager (False)."""
    return str(name).strip().lower() not in ("eager", "disabled", "false", "none")


def truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "yes", "1", "on")
    return bool(v)
