"""LoRA over MoE experts held as stacked tensors (`--moe-experts stacked`: transformers >= 5 with peft).

Transformers 5 keeps a MoE layer's routed experts as two 3-D parameters, `gate_up_proj` [E, 2I, H] and
`down_proj` [E, H, I] (e.g. `Qwen3MoeExperts`), where transformers 4 had an nn.Linear per expert. peft
0.21 adapts a stack with one `ParamWrapper` (peft/tuners/lora/layer.py), only for the model types whose
v4 checkpoints transformers converts with the mixtral or qwen2_moe pattern (`_convert_peft_config_moe`,
peft/utils/transformers_weight_conversion.py; keyed by peft release, PEFT_STACKED_MOE_TYPES_BY_VERSION),
with the rank doubled on the fused gate_up stack; other MoE types keep their routed experts and router
out. Each forward builds W' = W + s B A (`torch.baddbmm`, `_LoraFactorsProxy`): W' is held until the
backward (one layer's under checkpointing) beside the layer's dW'; the backward computes W''s full
weight gradient, then the factors' from it; the stack's bytes move STACK_PASSES_FORWARD /
STACK_PASSES_BACKWARD times, with STACK_KERNELS kernels per stack. Counts match peft's (tests/test_moe_lora.py).
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.stack import get
from tuneplan.specs.peft import peft_version_key

PEFT_021_STACKED_MOE_TYPES = frozenset({
    "mixtral", "minimax", "minimax_m2",
    "afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe",
    "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe",
    "longcat_flash", "mellum", "olmoe", "qwen3_moe", "qwen3_next", "qwen3_omni_moe", "qwen3_omni_moe_text",
    "qwen3_omni_moe_thinker", "sarvam_mla", "solar_open",
})
"""MoE model types whose stacked experts peft 0.21's LoRA reaches: transformers 5.24/5.25's
`conversion_mapping._MODEL_TO_CONVERSION_PATTERN` entries whose pattern is mixtral or qwen2_moe, plus
mixtral itself (peft 0.21.2 utils/transformers_weight_conversion.py adds it; qwen2_moe is a pattern
there, not a key, so Qwen1.5-MoE's experts are not reached)."""

PEFT_STACKED_MOE_TYPES_BY_VERSION: dict[tuple[int, int], frozenset[str]] = {
    (0, 21): PEFT_021_STACKED_MOE_TYPES,
    # peft 0.22.0 utils/transformers_weight_conversion.py adds `_MODEL_TO_CONVERSION_PATTERN["qwen2_moe"]
    # = "qwen2_moe"`: Qwen1.5/Qwen2-MoE's routed experts (gate_up at twice the rank, down) are reached,
    # next to the shared expert's linears
    (0, 22): PEFT_021_STACKED_MOE_TYPES | {"qwen2_moe"},
}
"""Per peft release (major, minor; specs.peft.PEFT_TESTED_VERSIONS), the MoE model types whose stacked
routed experts and router its LoRA reaches. A release between two keys follows the older one, a newer
release the newest, an older one the oldest."""


def peft_reach_release(version: str | None) -> tuple[int, int]:
    """The tested peft release (major, minor) whose reach a job's `peft_version` follows (None: the
    newest; make_job fills the installed version)."""
    keys = sorted(PEFT_STACKED_MOE_TYPES_BY_VERSION)
    if version is None:
        return keys[-1]
    v = peft_version_key(version)
    older = [k for k in keys if k <= v]
    return older[-1] if older else keys[0]


STACK_PASSES_FORWARD = 2.0
"""Passes over a stack's bytes per forward (elements of the weights' dtype): baddbmm reads W and
writes W' (the factors are small)."""

STACK_PASSES_BACKWARD = 3.0
"""Passes per backward: the GEMMs' weight gradient writes dW', and the two factor gradients
(dW' A^T and B^T dW') read it once each."""

STACK_KERNELS = 6.0
"""Kernels per adapted stack per micro-step: forward the baddbmm and the parametrization's cache,
backward the weight-gradient output and two batched products for the factors, and the scale."""

EXPERT_NAMES = ("gate", "up", "down")
"""Routed experts' linears in the model specs (count_per_layer > 1); gate and up share one stack."""


def is_routed_expert(lin) -> bool:
    return lin.name in EXPERT_NAMES and lin.count_per_layer > 1


def peft_reaches_stacks(model, peft_version: str | None = None) -> bool:
    """Whether peft's LoRA (the release of `peft_version`) reaches this model's stacked routed experts
    and router (PEFT_STACKED_MOE_TYPES_BY_VERSION)."""
    types = PEFT_STACKED_MOE_TYPES_BY_VERSION[peft_reach_release(peft_version)]
    return str(getattr(model, "model_type", "")).lower() in types


def stacked_adapters(experts: list, rank: float, dense_moe: bool) -> dict[str, float]:
    """What LoRA trains (`trainable`) and costs (the `stacked_*` fields of `terms.ModelTerms`, whole model)
    on the stacks of the chosen routed-expert linears (`experts`: LinearShapes with count_per_layer > 1):
    gate and up fused in one [E, 2I, H] stack at rank r x the number of them chosen, down at rank r."""
    by_name = {lin.name: lin for lin in experts}
    stacks = []  # (linears in the stack, stack rank)
    fused = [by_name[n] for n in ("gate", "up") if n in by_name]
    if fused:
        stacks.append(([by_name["gate"], by_name["up"]] if "gate" in by_name and "up" in by_name else fused,
                       rank * len(fused)))
    if "down" in by_name:
        stacks.append(([by_name["down"]], rank))
    out = dict(trainable=0.0, stacked_lora_params=0.0, stacked_lora_flops=0.0, stacked_wgrad_flops=0.0,
               stacked_lora_stacks=0.0)
    for lins, r in stacks:
        first = lins[0]
        e, layers, fan_in = float(first.count_per_layer), float(first.n_layers), float(first.in_features)
        fan_out = float(sum(lin.out_features for lin in lins))
        active = e if dense_moe else float(first.active_per_token)
        out["trainable"] += r * e * (fan_in + fan_out) * layers
        out["stacked_lora_params"] += e * fan_in * fan_out * layers
        out["stacked_lora_flops"] += 2.0 * e * fan_in * fan_out * r * layers
        out["stacked_wgrad_flops"] += 2.0 * active * fan_in * fan_out * layers
        out["stacked_lora_stacks"] += layers
    return out


def _terms(a: dict, key: str) -> np.ndarray:
    v = a.get(key)
    return np.zeros_like(np.asarray(a["micro_batch"], dtype=float)) if v is None else np.asarray(v, dtype=float)


def stacked_lora_held_bytes(a: dict) -> np.ndarray:
    """Bytes per GPU autograd holds for the stacks: every adapted layer's W' until the backward (one
    layer's under checkpointing) and the dW' of the layer in hand, over the ep x etp x pp GPUs of a copy."""
    params = _terms(a, "stacked_lora_params")
    per_layer = params / np.maximum(a["moe_layers"], 1.0)
    held = np.where(a["grad_ckpt"] > 0, per_layer, params) + per_layer
    return held * a["weight_bytes_compute"] / (a["ep"] * get(a, "etp") * a["pp"])


def stacked_lora_seconds(a: dict, c, tokens: np.ndarray, bw: np.ndarray, expert_rate: np.ndarray,
                         rec_share: np.ndarray) -> tuple:
    """(forward, backward, recompute, launch) seconds per micro-step of LoRA over stacked experts:
    building W' (memory-bound, or the baddbmm's FLOPs at the GEMM ceiling if larger), the full weight
    gradient of the stacks at the experts' GEMM rate, and the stacks' kernels."""
    params = _terms(a, "stacked_lora_params")
    split = a["ep"] * get(a, "etp") * a["pp"]
    nbytes = params * a["weight_bytes_compute"] / split
    flops = _terms(a, "stacked_lora_flops") / split
    ceiling = get(a, "bf16_peak_flops") * c.mfu_max * a["matmul_rel"]
    build = np.maximum(STACK_PASSES_FORWARD * nbytes / bw, flops / ceiling)
    factors = np.maximum(STACK_PASSES_BACKWARD * nbytes / bw, 2.0 * flops / ceiling)
    wgrad = tokens * _terms(a, "stacked_wgrad_flops") / (a["tp"] * a["pp"]) / expert_rate
    launch = (1.0 + 0.5 * rec_share) * _terms(a, "stacked_lora_stacks") * STACK_KERNELS * c.kernel_launch_s / a["pp"]
    return build, factors + wgrad, rec_share * build, launch


def moe_experts_assumptions(model, job) -> list[str]:
    """What the experts' layout means for a LoRA-family job on a MoE model (said once per estimate)."""
    if not (getattr(model, "is_moe", False) and job.is_lora_family):
        return []
    from tuneplan.specs.framework import get_framework

    fw = get_framework(job.framework)
    # the layout follows the transformers version the profile stands for (hf-trainer: what pip installs today)
    filled = f", {fw.label}'s default" if job.moe_experts == fw.moe_experts else ""
    if job.moe_experts == "modules":
        return [f"MoE experts as one module per expert (--moe-experts modules{filled}: transformers 4): LoRA adapts "
                "each expert's linears with its own small kernels (--moe-experts stacked for transformers >= 5)."]
    release = ".".join(map(str, peft_reach_release(job.peft_version)))
    named = job.peft_version or f"{release}, the newest tested"
    follows = "" if job.peft_version and release == ".".join(job.peft_version.split(".")[:2]) else \
        f" (its reach follows peft {release}'s)"
    which = (f"peft {named}{follows} decides which model types' stacks LoRA reaches (--peft-version; default: "
             "the installed peft, else the newest tested)")
    if not peft_reaches_stacks(model, job.peft_version):
        return [f"MoE experts as stacked tensors (--moe-experts stacked{filled}: transformers >= 5): peft does not "
                f"reach the routed experts or the router of model type {model.model_type}; the adapters sit on "
                f"attention and shared experts only. {which}."]
    return [f"MoE experts as stacked tensors (--moe-experts stacked{filled}: transformers >= 5): peft adapts each "
            "stack whole (gate_up at twice the rank, down at the rank) and rebuilds W + BA every forward; the "
            "rebuilt stacks are held for the backward, which computes their full weight gradient "
            f"(--moe-experts modules for transformers 4). {which}."]
