"""The Run Planner seed, exactly: the 6ND compute estimate and bytes-per-parameter memory.

  tokens      = examples x tokens per example x epochs
  FLOPs       = factor x params x tokens             (factor 6 full, ~4 LoRA)
  per device  = peak TFLOP/s x MFU                   cluster = per device x devices
  wall clock  = FLOPs / cluster                      device-hours = wall x devices
  memory      = bytes per parameter x params         (16 full mixed-precision Adam, ~2 LoRA)
  per device  = memory / devices (sharded evenly)    fits = per device <= VRAM, before activations
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.codes import full_weights
from tuneplan.physics.constants import DEFAULT_CONSTANTS

Arrays = dict[str, np.ndarray]

DEFAULT_MFU = 0.4
"""The seed's worked example (its text: well-tuned large runs 0.3-0.5; a first attempt lower)."""
FLOPS_PER_PARAM_TOKEN = {"full": 6.0, "freeze": 6.0, "lora": 4.0}
"""6 for full fine-tuning (2 forward, 2 input gradients, 2 weight gradients); about 4 with LoRA."""
BYTES_PER_PARAM = {"full": 16.0, "freeze": 16.0, "lora": 2.0}
"""16 for mixed-precision full fine-tuning with Adam; about 2 for LoRA over a frozen fp16 base."""


def planner_numbers(params: float, tokens: float, flops_per_param_token: float, peak_tflops: float,
                    mfu: float, devices: int, rate: float | None, bytes_per_param: float,
                    memory_gib: float) -> dict:
    """The seed's calculator, figure for figure."""
    total_flops = flops_per_param_token * params * tokens
    per_device = peak_tflops * 1e12 * mfu
    cluster = per_device * devices
    wall_s = total_flops / cluster
    device_hours = wall_s / 3600.0 * devices
    mem_total_gib = bytes_per_param * params / 1024.0**3
    per_dev_gib = mem_total_gib / devices
    return {
        "tokens": tokens, "total_flops": total_flops, "per_device_flops": per_device,
        "cluster_flops": cluster, "wall_clock_s": wall_s, "device_hours": device_hours,
        "cost_usd": None if rate is None else device_hours * rate, "tokens_per_s": tokens / wall_s,
        "memory_total_gib": mem_total_gib, "memory_per_device_gib": per_dev_gib, "fits": per_dev_gib <= memory_gib}


class PlannerEstimator:
    """The seed as an estimator over configurations: step time from 6ND at a fixed MFU."""

    name = "planner"
    constants = DEFAULT_CONSTANTS  # the arrays and run totals; the seed itself has no physics constants
    memory_parts = ("weights_and_optimizer_state_gib",)
    memory_model = None  # bytes per parameter: no activations, so no largest micro-batch or fixes

    def __init__(self, mfu: float = DEFAULT_MFU, flops_per_param_token: float | None = None,
                 bytes_per_param: float | None = None) -> None:
        self.mfu = mfu
        self.flops_per_param_token = flops_per_param_token
        self.bytes_per_param = bytes_per_param

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False) -> Arrays:
        full = full_weights(a["method_code"])
        factor = (np.full_like(a["seq_len"], self.flops_per_param_token) if self.flops_per_param_token
                  else np.where(full, 6.0, 4.0))
        bpp = (np.full_like(a["seq_len"], self.bytes_per_param) if self.bytes_per_param
               else np.where(full, 16.0, 2.0))
        params = a["params_active"]
        tokens = a["micro_batch"] * a["seq_len"] * a["grad_accum"] * a["dp"]
        rate = a["peak_flops"] * self.mfu * a["gpus"]
        step = factor * params * tokens / rate
        mem = bpp * a["params_total"] / 1024.0**3 / a["gpus"]
        return {
            "step_s": step, "compute_s": step, "forward_s": step * np.where(full, 2.0 / 6.0, 2.0 / 4.0),
            "backward_s": step * np.where(full, 4.0 / 6.0, 2.0 / 4.0), "memory_gib": mem,
            "weights_and_optimizer_state_gib": mem, "allocated_gib": mem, "reserved_gib": mem,
            "nvidia_smi_gib": mem, "fits": mem <= a["memory_bytes"] / 1024.0**3, "tokens_per_step": tokens,
            "model_flops_per_step": factor * params * tokens, "efficiency": np.full_like(step, self.mfu)}

    def assumptions(self, job=None) -> list[str]:
        return [
            "The 6ND form: six FLOPs per parameter per token for a dense forward and backward pass "
            "(about four with LoRA), attention's quadratic term ignored.",
            f"Model FLOPs utilisation {self.mfu:g} of peak; scaling across devices assumed linear "
            "(communication overhead ignored).",
            "Memory counts weights, gradients and optimiser state only (16 bytes/param full, ~2 LoRA), "
            "sharded evenly: activations, KV cache and fragmentation are extra.",
            "Data preparation, checkpointing, failed runs and hyper-parameter search are not included.",
        ]
