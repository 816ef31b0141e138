"""Preference and RL stages on top of any estimator's SFT step: the policy's trained pass is an SFT
step of the effective batch (DPO: chosen + rejected; GRPO: prompt + completion for every completion),
and the stage's own terms (`tuneplan.physics.stages`) are added: reference and no-grad forwards,
rollout generation, scoring, value model, and their memory."""

from __future__ import annotations

import math

import numpy as np

from tuneplan.errors import InputError
from tuneplan.estimators.rl_stages import gkd_stage, mean_spread, rl_stage
from tuneplan.estimators.stage_run import (
    TRAIN_GROUPS,
    StageRun,
    add_memory,
    first_value,
    forward_only,
    reference_bytes,
    search_micro_batch,
)
from tuneplan.physics import stages as ps
from tuneplan.physics.constants import DEFAULT_CONSTANTS
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import PREFERENCE_STAGES, JobSpec
from tuneplan.specs.model import ModelSpec


def stage_for_estimate(est, estimator: str, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, wl) -> StageRun:
    """The stage run of `api.estimate`: its arrays, built once, and the estimator's output on them
    (step and memory: the estimators that take a stage all report memory)."""
    if estimator == "planner":
        raise InputError("stage", "the Run Planner seed has no stage model: use --estimator tuneplan (default), "
                         "kavier, xia or slst with --stage")
    run = run_stage(est, mspec, gspec, jspec, wl.seq_len, wl.samples_per_epoch)
    spread = mean_spread(est, mspec, gspec, jspec, wl.seq_len, run)
    if spread:  # the interval spans it (learn.intervals.attach_interval)
        run.extra["stage"]["completion_len_spread"] = spread
        run.assumptions.append(
            f"The interval spans the mean completion length from {spread['mean_low']} token (all but the longest "
            f"ending at once; the step still decodes the longest to the cap) to {spread['mean_high']} (every "
            f"completion at the cap): step time x{spread['step_s'][0]:.3g}-x{spread['step_s'][1]:.3g} of this "
            "estimate's, the same stage evaluated at each.")
    if "forward_s" not in run.out:
        run.assumptions.append(f"{estimator} has no forward part: each no-grad forward (reference, KL, old "
                               f"log-probs) is taken as {ps.FORWARD_SHARE:.2f} of its training step.")
    return run


def run_stage(est, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, seq_len: int,
              samples_per_epoch: float, search_max_mb: bool = True) -> StageRun:
    """The stage's step and memory; `search_max_mb` False skips the largest-micro-batch search (plan)."""
    if jspec.stage in PREFERENCE_STAGES:
        return preference_stage(est, mspec, gspec, jspec, seq_len, samples_per_epoch, search_max_mb)
    if jspec.stage == "gkd":
        return gkd_stage(est, mspec, gspec, jspec, seq_len, search_max_mb)
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
    if jspec.stage == "rm":  # a scalar score head (num_labels 1) instead of the vocabulary-wide LM head
        a["vocab"] = np.ones_like(np.asarray(a["vocab"], dtype=float))
        a["head_flops"] = 2.0 * np.asarray(a["hidden"], dtype=float)
    out = dict(est.predict_arrays(a))
    fwd = forward_only(out, a) / shape.trained  # one sequence per sample, all micro-steps
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
            b["reference_model_gib"] = reference_bytes(arr)
        return b, 0.0

    if "allocated_gib" in out:
        b, e = extras(a, out)
        add_memory(out, b, e, c)
    max_mb = search_micro_batch(est, a, shape.trained, extras) if search_max_mb and "allocated_gib" in out else 0
    one_time = 0.0
    if jspec.precompute_ref and shape.reference > 0:
        micro_steps = math.ceil(samples_per_epoch / (jspec.micro_batch * jspec.dp))
        one_time = first_value(fwd) * shape.reference / jspec.grad_accum * micro_steps
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
    if jspec.stage == "rm":
        seqs += ("; a sequence classifier (AutoModelForSequenceClassification, num_labels 1): its score head is a "
                 "hidden x 1 GEMM with 1 logit per token (the LM head's weights still counted in memory)")
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
    step = first_value(run.out["step_s"])
    parts = {g: sum(first_value(run.out[k]) for k in ks if k in run.out) for g, ks in TRAIN_GROUPS.items()}
    train_parts = {g: totals.train_s * v / step for g, v in parts.items() if v or g == "policy_update"}
    wcb = {"load": totals.load_s, "train": totals.train_s, "eval": totals.eval_s,
           "checkpoint": totals.checkpoint_s}
    if pre:
        wcb["reference_precompute"] = pre
    extra = {"stage": run.extra.get("stage", {"stage": run.totals_job.stage}), "wall_clock_breakdown_s": wcb,
             # what the GPUs compute on: both sequences of a pair, prompt + completion of every completion
             "tokens_total": first_value(run.out["tokens_per_step"]) * totals.steps}
    extra["stage"] = {**extra["stage"], "train_parts_s": train_parts}
    return out, extra
