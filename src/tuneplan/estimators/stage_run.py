"""What every stage shares: `StageRun` (a stage's step, memory and what the run totals need), the
stage's step and memory parts, and the helpers both the preference and the RL stages use (their
memory added to the policy's peak, the largest micro-batch search, the no-grad forward)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneplan.physics import stages as ps
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import backward_peak_gib, settle_peaks
from tuneplan.specs.job import JobSpec

POLICY_PARTS = ("forward_s", "backward_s", "recompute_s", "dequant_s", "elementwise_s", "overhead_s",
                "tensor_parallel_s", "pipeline_bubble_s", "optimizer_s", "communication_s")
TRAIN_GROUPS = {"generation": ("rollout_prefill_s", "rollout_decode_s", "rollout_decode_tail_s",
                               "rollout_weight_sync_s"),
                "scoring": ("reward_s",), "reference": ("reference_forward_s",),
                "policy_update": POLICY_PARTS + ("policy_nograd_s", "value_model_s"), "overlap": ("overlap_s",)}
"""How the wall clock's training time splits by stage part."""
STAGE_STEP_PARTS = tuple(k for ks in TRAIN_GROUPS.values() for k in ks if k not in POLICY_PARTS)
"""Step parts a stage adds to the policy's (each appears in a breakdown only when the stage has it)."""
STAGE_MEMORY_PARTS = ("reference_model_gib", "reward_model_gib", "value_model_gib", "rollout_kv_cache_gib",
                      "loss_buffers_gib", "rollout_engine_gib")
"""Memory parts a stage adds per training GPU."""


@dataclass
class StageRun:
    """A stage's step and memory, and what the run-level totals need to count it."""

    arrays: dict[str, np.ndarray]  # the policy's trained pass (effective SFT job)
    out: dict[str, Any]  # estimator output: policy parts + stage parts; step_s is the stage's step
    totals_job: JobSpec  # the job whose steps, evaluation and saves the run totals count
    samples_scale: float  # samples per epoch x this = what totals_job's global batch consumes
    samples_per_step: float
    gpu_factor: float  # all GPUs / training GPUs (device-hours, cost and energy count the rollout GPUs)
    one_time_s: float  # reference log-probs precomputed before training
    max_micro_batch: int
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def workload(self, wl):
        """The workload the run totals count: samples scaled to what one step's global batch consumes
        (RL: completions = prompts x group size)."""
        from dataclasses import replace

        return wl if self.samples_scale == 1.0 else replace(wl, samples_per_epoch=wl.samples_per_epoch
                                                             * self.samples_scale)

    def step_parts(self) -> tuple[str, ...]:
        return tuple(k for k in STAGE_STEP_PARTS if k in self.out)

    def memory_parts(self) -> tuple[str, ...]:
        return tuple(k for k in STAGE_MEMORY_PARTS if k in self.out)


def first_value(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def shard_degree(a: dict[str, np.ndarray]) -> np.ndarray:
    """Ranks a ZeRO-3 / FSDP (or hybrid, within a node) job shards its weights over; 1 otherwise."""
    shard, dp = a["sharding"], a["dp"]
    sdeg = np.where(shard == 4, np.minimum(dp, a["gpus"] / a["nodes"]), dp)
    return np.where((shard == 3) | (shard == 4), sdeg, 1.0)


def add_memory(out: dict, extra_bytes: dict[str, np.ndarray], engine_bytes, c=DEFAULT_CONSTANTS) -> None:
    """Add the stage's tensors to the allocated peak (they pass through torch's caching allocator) and
    an inference engine's own pool after it; recompute reserved, nvidia-smi and the fit."""
    g = BYTES_PER_GIB
    ones = np.ones_like(np.asarray(out["allocated_gib"], dtype=float))
    add = sum(extra_bytes.values())
    for k, v in extra_bytes.items():
        out[k] = np.asarray(v, dtype=float) * ones / g
    if np.any(np.asarray(engine_bytes) > 0):
        out["rollout_engine_gib"] = np.asarray(engine_bytes, dtype=float) * ones / g
    # the stage's tensors (reference / reward / value models, buffers) are held through the step too
    backward = backward_peak_gib(out) + add / g
    out["step_peak_gib"] = out.get("step_peak_gib", backward - add / g) + add / g
    if "eval_peak_gib" in out:  # held through an evaluation pass too
        out["eval_peak_gib"] = np.where(out["eval_peak_gib"] > 0, out["eval_peak_gib"] + add / g, 0.0)
    settle_peaks(out, backward, c, np.asarray(engine_bytes) / g)
    out["memory_gib"] = out["nvidia_smi_gib"]


def search_micro_batch(est, a: dict, per_sample: float, extras) -> int:
    """Largest micro-batch (samples) whose stage peak fits, by binary search; 0 when 1 does not."""
    c = getattr(est, "constants", DEFAULT_CONSTANTS)
    lo, hi = 0, 4097
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial = dict(a)
        trial["micro_batch"] = np.asarray(a["micro_batch"]) * 0 + mid * per_sample
        out = dict(est.predict_arrays(trial))
        if "allocated_gib" not in out:
            return 0
        b, e = extras(trial, out)
        add_memory(out, b, e, c)
        if bool(np.asarray(out["fits"]).reshape(-1)[0]):
            lo = mid
        else:
            hi = mid
    return lo


def forward_only(out: dict, a: dict) -> np.ndarray:
    if "forward_s" not in out:  # an estimator with no step parts (xia): the forward's third of the step
        return np.asarray(out["step_s"], dtype=float) * ps.FORWARD_SHARE
    z = np.zeros_like(np.asarray(out["step_s"], dtype=float))
    return ps.forward_only_s(out.get("forward_s", z), out.get("elementwise_s", z), out.get("overhead_s", z),
                             out.get("dequant_s", z), a["grad_ckpt"])


def reference_bytes(a: dict) -> np.ndarray:
    return ps.reference_weight_bytes(a["params_total"], a["weight_bytes_compute"], a["tp"] * a["pp"],
                                      shard_degree(a))
