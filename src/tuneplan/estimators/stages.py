"""Preference and RL stages on top of any estimator's SFT step: the policy's trained pass is an SFT
step of the effective batch (DPO: chosen + rejected; GRPO: prompt + completion for every completion),
and the stage's own terms (`tuneplan.physics.stages`) are added: reference and no-grad forwards,
rollout generation, scoring, value model, and their memory."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneplan.errors import InputError
from tuneplan.physics import stages as ps
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import settle_peaks
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import PREFERENCE_STAGES, JobSpec
from tuneplan.specs.model import ModelSpec

POLICY_PARTS = ("forward_s", "backward_s", "recompute_s", "dequant_s", "elementwise_s", "overhead_s",
                "tensor_parallel_s", "pipeline_bubble_s", "optimizer_s", "communication_s")
STAGE_STEP_PARTS = ("rollout_prefill_s", "rollout_decode_s", "rollout_weight_sync_s", "reward_s",
                    "reference_forward_s", "policy_nograd_s", "value_model_s")
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


def _v(x) -> float:
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
    backward = out["allocated_gib"] - out.get("optimizer_step_gib", 0.0) + add / g
    out["step_peak_gib"] = out.get("step_peak_gib", backward - add / g) + add / g
    settle_peaks(out, backward, c, np.asarray(engine_bytes) / g)
    out["memory_gib"] = out["nvidia_smi_gib"]


def _search_micro_batch(est, a: dict, per_sample: float, extras) -> int:
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


def _forward_only(out: dict, a: dict) -> np.ndarray:
    if "forward_s" not in out:  # an estimator with no step parts (xia): the forward's third of the step
        return np.asarray(out["step_s"], dtype=float) * ps.FORWARD_SHARE
    z = np.zeros_like(np.asarray(out["step_s"], dtype=float))
    return ps.forward_only_s(out.get("forward_s", z), out.get("elementwise_s", z), out.get("overhead_s", z),
                             out.get("dequant_s", z), a["grad_ckpt"])


def _reference_bytes(a: dict) -> np.ndarray:
    return ps.reference_weight_bytes(a["params_total"], a["weight_bytes_compute"], a["tp"] * a["pp"],
                                      shard_degree(a))


def stage_for_estimate(est, phys, estimator: str, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, wl):
    """(stage run, arrays, time output, memory output) for `api.estimate`: the memory from tuneplan's
    physics when the chosen estimator has no memory model."""
    if estimator == "planner":
        raise InputError("stage", "the Run Planner seed has no stage model: use --estimator tuneplan (default), "
                         "kavier, xia or slst with --stage")
    run = run_stage(est, mspec, gspec, jspec, wl.seq_len, wl.samples_per_epoch)
    if "forward_s" not in run.out:
        run.assumptions.append(f"{estimator} has no forward part: each no-grad forward (reference, KL, old "
                               f"log-probs) is taken as {ps.FORWARD_SHARE:.2f} of its training step.")
    if "weights_gib" in run.out:
        return run, run.arrays, run.out, run.out
    mrun = run_stage(phys, mspec, gspec, jspec, wl.seq_len, wl.samples_per_epoch)
    run.max_micro_batch = mrun.max_micro_batch
    for k in STAGE_MEMORY_PARTS:  # the memory parts the breakdown lists come from the physics' run
        if k in mrun.out:
            run.out[k] = mrun.out[k]
    return run, run.arrays, run.out, mrun.out


def run_stage(est, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, seq_len: int,
              samples_per_epoch: float, search_max_mb: bool = True) -> StageRun:
    """The stage's step and memory; `search_max_mb` False skips the largest-micro-batch search (plan)."""
    if jspec.stage in PREFERENCE_STAGES:
        return preference_stage(est, mspec, gspec, jspec, seq_len, samples_per_epoch, search_max_mb)
    from tuneplan.estimators.rl_stages import rl_stage

    return rl_stage(est, mspec, gspec, jspec, seq_len, search_max_mb)


def preference_stage(est, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, seq_len: int,
                     samples_per_epoch: float, search_max_mb: bool = True) -> StageRun:
    """DPO / ORPO / KTO / SimPO / CPO: the policy's pass over every trained sequence of a micro-batch
    at once (TRL concatenates chosen and rejected), the reference's and KTO's no-grad forwards, the
    reference copy and the losses' buffers."""
    from tuneplan.physics.terms import build_arrays

    c = getattr(est, "constants", None) or DEFAULT_CONSTANTS
    shape = ps.stage_shape(jspec.stage)
    ref_pass = shape.reference > 0 and not jspec.precompute_ref
    ref_weights = ps.reference_weights_needed(shape.reference > 0, jspec.is_lora_family, jspec.precompute_ref)
    pol_job = jspec.updated(micro_batch=int(jspec.micro_batch * shape.trained))
    a = build_arrays([(mspec, gspec, pol_job, seq_len)], c)
    out = dict(est.predict_arrays(a))
    fwd = _forward_only(out, a) / shape.trained  # one sequence per sample, all micro-steps
    t_ref = fwd * shape.reference if ref_pass else np.zeros_like(fwd)
    t_nograd = fwd * shape.policy_nograd
    if ref_pass:
        out["reference_forward_s"] = t_ref
    if shape.policy_nograd:
        out["policy_nograd_s"] = t_nograd
    out["step_s"] = out["step_s"] + t_ref + t_nograd
    passes = shape.policy_nograd + (shape.reference if ref_pass else 0.0)
    out["compute_s"] = out.get("compute_s", 0.0) + out.get("forward_s", 0.0) / shape.trained * passes

    def extras(arr, o):
        tokens = arr["micro_batch"] * arr["seq_len"] / arr["cp"]
        b = {"loss_buffers_gib": ps.logp_buffer_bytes(tokens)}
        if ref_pass:
            b["loss_buffers_gib"] = b["loss_buffers_gib"] + ps.reference_logits_bytes(
                tokens / shape.trained * shape.reference, arr["vocab"], arr["tp"])
        if ref_weights:
            b["reference_model_gib"] = _reference_bytes(arr)
        return b, 0.0

    if "allocated_gib" in out:
        b, e = extras(a, out)
        add_memory(out, b, e, c)
    max_mb = _search_micro_batch(est, a, shape.trained, extras) if search_max_mb and "allocated_gib" in out else 0
    one_time = 0.0
    if jspec.precompute_ref and shape.reference > 0:
        micro_steps = math.ceil(samples_per_epoch / (jspec.micro_batch * jspec.dp))
        one_time = _v(fwd) * shape.reference / jspec.grad_accum * micro_steps
    assumptions = preference_assumptions(jspec, shape, ref_pass, ref_weights, one_time)
    return StageRun(arrays=a, out=out, totals_job=jspec, samples_scale=1.0, samples_per_step=jspec.global_batch,
                    gpu_factor=1.0, one_time_s=one_time, max_micro_batch=max_mb, assumptions=assumptions)


def preference_assumptions(jspec: JobSpec, shape: ps.StageShape, ref_pass: bool, ref_weights: bool,
                           one_time: float) -> list[str]:
    st = jspec.stage.upper()
    seqs = ("chosen + rejected: 2 sequences per pair, concatenated into one batch of "
            f"{int(jspec.micro_batch * shape.trained)} sequences per micro-step (TRL)") if shape.trained == 2 else (
        "unpaired: 1 sequence per sample through the policy, plus its KL completion (a mismatched pair) "
        "through the policy with no grad (TRL KTOConfig calculate_kl=True)")
    out = [f"{st}: {seqs}; --tokens-per-example and --seq-len are per sequence (prompt + one completion); "
           "samples and micro-batches count pairs (KTO: examples)."]
    if shape.reference == 0:
        out.append(f"{st} is reference-free: no reference model, no reference forward.")
    elif not ref_pass:
        out.append(f"Reference log-probs precomputed (--precompute-ref): one no-grad pass over the data "
                   f"before training ({one_time:.0f} s, in the wall clock), no reference model during training.")
    else:
        where = ("the LoRA adapter disabled (no second copy of the weights)" if not ref_weights else
                 "a second, frozen copy of the weights at the compute precision, sharded like the policy")
        out.append(f"Reference forward on {shape.reference:.0f} sequences per sample, no grad, costed as the "
                   f"policy's forward (its matmuls, {ps.FORWARD_SHARE:.2f} of the element-wise work and launch "
                   f"overhead); the reference is {where}.")
        out.append(f"The reference's logits and log-softmax ({ps.REFERENCE_LOGITS_BYTES_PER_ELEMENT:g} bytes per "
                   "token x vocabulary) are held beside the policy's activations (TRL < 1.0, LLaMA-Factory); "
                   "TRL >= 1.0's fused LM head materialises none, so this part is then an upper bound.")
    if not jspec.grad_ckpt:
        out.append("Gradient checkpointing off (tuneplan's default); TRL's configs default to "
                   "gradient_checkpointing=True: pass --grad-ckpt to match them.")
    out.append(f"Loss buffers: {ps.LOGP_BUFFER_BYTES_PER_TOKEN:g} bytes per token (fp32 log-probs of policy and "
               "reference, mask, labels); the policy's own logits are costed as in SFT.")
    return out


TRAIN_GROUPS = {"generation": ("rollout_prefill_s", "rollout_decode_s", "rollout_weight_sync_s"),
                "scoring": ("reward_s",), "reference": ("reference_forward_s",),
                "policy_update": POLICY_PARTS + ("policy_nograd_s", "value_model_s")}
"""How the wall clock's training time splits by stage part."""


def stage_run_totals(run: StageRun, wl, rate: float | None, c=DEFAULT_CONSTANTS):
    """(RunTotals, extra) of a stage's one row: `physics.run.run_totals` over the stage's own job
    (`run.totals_job`: its batch, GPUs and accumulation), then `stage_totals`."""
    from tuneplan.physics.run import RunTotals, run_totals

    tj = run.totals_job
    rows = {**run.arrays, **{k: np.array([float(getattr(tj, k))]) for k in ("micro_batch", "grad_accum", "dp", "gpus")}}
    return stage_totals(run, RunTotals.row(run_totals(tj, run.workload(wl), rows, run.out, rate, c=c)))


def stage_totals(run: StageRun, totals):
    """The run totals of a stage: rollout GPUs counted in device-hours, cost and energy; precomputed
    reference log-probs added to the wall clock; the training time split into generation, scoring,
    reference and policy update. `totals` is the RunTotals of `run.totals_job`."""
    from dataclasses import replace

    f = run.gpu_factor
    pre = run.one_time_s
    wall = totals.wall_clock_s + pre
    busy = totals.energy_kwh / max(totals.train_s + totals.eval_s, 1e-30) * pre if pre else 0.0
    dev_h = wall * run.totals_job.gpus * f / 3600.0
    out = replace(totals, wall_clock_s=wall, device_hours=dev_h,
                  cost_usd=None if totals.cost_usd is None else totals.cost_usd * dev_h / max(totals.device_hours,
                                                                                              1e-30),
                  energy_kwh=(totals.energy_kwh + busy) * f, co2_kg=totals.co2_kg * f * (
                      1.0 + busy / max(totals.energy_kwh, 1e-30)))
    step = _v(run.out["step_s"])
    parts = {g: sum(_v(run.out[k]) for k in ks if k in run.out) for g, ks in TRAIN_GROUPS.items()}
    train_parts = {g: totals.train_s * v / step for g, v in parts.items() if v or g == "policy_update"}
    wcb = {"load": totals.load_s, "train": totals.train_s, "eval": totals.eval_s,
           "checkpoint": totals.checkpoint_s}
    if pre:
        wcb["reference_precompute"] = pre
    extra = {"stage": run.extra.get("stage", {"stage": run.totals_job.stage}), "wall_clock_breakdown_s": wcb,
             # what the GPUs compute on: both sequences of a pair, prompt + completion of every completion
             "tokens_total": _v(run.out["tokens_per_step"]) * totals.steps}
    extra["stage"] = {**extra["stage"], "train_parts_s": train_parts}
    return out, extra
