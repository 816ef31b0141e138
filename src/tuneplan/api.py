"""The Python API: `estimate(...)` returns a typed `EstimateResult` (with `.to_dict()`), the same
figures `tuneplan estimate` prints."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tuneplan.errors import InputError
from tuneplan.estimators.contract import STEP_PARTS
from tuneplan.physics.job_assumptions import job_assumptions
from tuneplan.physics.peft_methods import peft_assumptions
from tuneplan.physics.run import (
    RunTotals,
    Workload,
    run_totals,
    seq_len_warning,
    workload,
    workload_assumptions,
)
from tuneplan.physics.stack import stack_assumptions
from tuneplan.specs.gpu import GPUSpec, gpu_assumptions
from tuneplan.specs.job import JobSpec, make_job
from tuneplan.specs.model import ModelSpec
from tuneplan.specs.resolve import resolve_gpu_arg, resolve_model_arg, resolve_rate


@dataclass
class EstimateResult:
    """One estimate. Units are in the names; `to_dict()` gives the stable JSON keys."""

    estimator: str
    model: str
    gpu: str
    job: JobSpec
    workload: Workload
    totals: RunTotals
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    mfu: float
    step_breakdown_s: dict[str, float]
    memory_per_gpu_gib: float
    memory_breakdown_gib: dict[str, float]
    memory_capacity_gib: float
    fits: bool
    max_micro_batch: int | None
    rate_usd_per_gpu_hour: float | None
    rate_source: str
    assumptions: list[str]
    warnings: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    interval: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    data_size_given: bool = True
    """False when the job gives no data size (no --examples, no --tokens): the figures of one step
    (memory, fit, step time, throughput) stand; the run totals (wall clock, cost, energy) are None."""
    memory_allocated_gib: float | None = None
    """The peak torch's allocator hands out (`torch.cuda.max_memory_allocated`'s kind); None when the
    estimator has no memory model."""
    memory_reserved_gib: float | None = None
    """The peak it reserves from the driver (`torch.cuda.max_memory_reserved`'s kind: the allocated peak
    plus the caching allocator's fragmentation and the blocks cached for other batch shapes); nvidia-smi's
    peak (`memory_per_gpu_gib`) adds the CUDA context on top. None without a memory model."""

    # the run totals, None without a data size
    wall_clock_s = property(lambda self: self.totals.wall_clock_s if self.data_size_given else None)
    device_hours = property(lambda self: self.totals.device_hours if self.data_size_given else None)
    cost_usd = property(lambda self: self.totals.cost_usd if self.data_size_given else None)
    energy_kwh = property(lambda self: self.totals.energy_kwh if self.data_size_given else None)

    def to_dict(self) -> dict[str, Any]:
        t = self.totals
        d: dict[str, Any] = {
            "estimator": self.estimator, "model": self.model, "gpu": self.gpu, "method": self.job.method,
            "gpus": self.job.gpus, "nodes": self.job.nodes, "wall_clock_s": t.wall_clock_s,
            "wall_clock_h": t.wall_clock_s / 3600.0, "device_hours": t.device_hours, "cost_usd": t.cost_usd,
            "rate_usd_per_gpu_hour": self.rate_usd_per_gpu_hour, "rate_source": self.rate_source,
            "energy_kwh": t.energy_kwh, "co2_kg": t.co2_kg, "tokens_per_s": self.tokens_per_s,
            "samples_per_s": self.samples_per_s, "step_time_s": self.step_time_s, "steps": t.steps,
            "tokens_total": self.workload.processed_tokens_per_epoch * self.workload.epochs,
            **{k: getattr(self, k) for k in (
                "mfu", "memory_per_gpu_gib", "memory_allocated_gib", "memory_reserved_gib", "memory_capacity_gib",
                "fits", "max_micro_batch", "step_breakdown_s", "memory_breakdown_gib")},
            "wall_clock_breakdown_s": {"load": t.load_s, "train": t.train_s, "eval": t.eval_s,
                                       "checkpoint": t.checkpoint_s},
            "workload": self.workload.to_dict(), "job": asdict(self.job), "weights_scheme": weights_scheme(self.job),
            "step_part_labels": {"tensor_parallel": parallel_label(self.job)},
            "assumptions": self.assumptions, "warnings": self.warnings, "suggestions": self.suggestions,
        }
        if iv := self.interval:
            lo, hi = iv["wall_clock_s_low"], iv["wall_clock_s_high"]
            d.update(interval=iv, wall_clock_s_low=lo, wall_clock_s_high=hi, low=lo, high=hi)
        d.update(self.extra)
        if not self.data_size_given:
            _drop_run_totals(d)
        return d


def parallel_label(job: JobSpec) -> str:
    """What the `tensor_parallel` step part holds for this job: the communication of every model-parallel
    dimension in use (tensor, context, expert, pipeline point-to-point), named by those in use."""
    used = [n for n, deg in (("tensor", job.tp), ("context", job.cp), ("expert", job.ep), ("pipeline", job.pp))
            if deg > 1]
    return " + ".join(used) + " parallel" if used else "tensor parallel"


def weights_scheme(job: JobSpec) -> str | None:
    """How a full (or freeze) fine-tuning in 16 bits holds its trained weights, for the summary line:
    mixed precision over an fp32 master copy, or the 16-bit weights trained in place."""
    if job.method not in ("full", "freeze") or job.precision not in ("bf16", "fp16"):
        return None
    adam = job.optimizer == "adamw"
    if job.fp32_master():
        return (f"mixed precision: {job.precision} compute over fp32 master weights"
                + (" (16 bytes/param with AdamW)" if adam else ""))
    return f"{job.precision} weights trained in place, no fp32 master" + (" (8 bytes/param with AdamW)" if adam else "")


NO_DATA_SIZE = ("wall clock, device-hours, cost and energy need a data size: --examples N with "
                "--tokens-per-example T, or --tokens T")
"""What an estimate without a data size says in place of its run totals."""

RUN_TOTAL_KEYS = ("wall_clock_s", "wall_clock_h", "device_hours", "cost_usd", "energy_kwh", "co2_kg", "steps",
                  "tokens_total", "wall_clock_breakdown_s", "wall_clock_s_low", "wall_clock_s_high", "low", "high")
INTERVAL_RUN_KEYS = ("wall_clock_s_low", "wall_clock_s_high", "cost_usd_low", "cost_usd_high")


def _drop_run_totals(d: dict[str, Any]) -> None:
    """An estimate without a data size: the run totals as None (not a made-up dataset's), said why."""
    d.update({k: None for k in RUN_TOTAL_KEYS if k in d})
    if d.get("interval"):
        d["interval"] = {k: v for k, v in d["interval"].items() if k not in INTERVAL_RUN_KEYS}
    d["needs_data_size"] = NO_DATA_SIZE


def step_workload(job: JobSpec) -> Workload:
    """The work of one optimizer step, for a job without a data size ("does it fit?"): the figures of
    a step need only its shape (sequence length, micro-batch, accumulation, data parallel)."""
    if job.seq_len is None and job.tokens_per_example is None:
        raise InputError("seq-len", "is needed (or --tokens-per-example): memory and step time depend on it")
    seq = int(job.seq_len if job.seq_len is not None else math.ceil(job.tokens_per_example))
    samples = float(job.global_batch)
    return Workload(seq_len=seq, samples_per_epoch=samples, real_tokens_per_epoch=samples * seq,
                    processed_tokens_per_epoch=samples * seq, epochs=1.0,
                    seq_len_source="--seq-len" if job.seq_len is not None else "mean tokens per example")


def _scalar(out: dict, key: str, default: float = 0.0) -> float:
    v = out.get(key)
    return default if v is None else float(np.ravel(v)[0])


def estimate(model: str | ModelSpec, gpu: str | GPUSpec | None = None, *, estimator: str = "tuneplan",
             calibration=None, gpu_file: str | None = None, peak_tflops: float | None = None,
             memory_gib: float | None = None, bandwidth_gbs: float | None = None,
             provider: str | None = None, prices: str | None = None, rate: float | None = None,
             interval: float | None = 0.8, job: JobSpec | None = None, strict: bool = False,
             **job_kwargs: Any) -> EstimateResult:
    """Estimate a fine-tuning run. Job fields are JobSpec's (method, gpus, micro_batch, examples,
    tokens_per_example, epochs, seq_len, ...). `strict`: refuse a GPU family name (A100-80GB) instead of
    reading it as the catalog's default variant (said in the assumptions). Raises InputError for bad input.

    The pipeline is the planner's on one row: `build_arrays` -> the estimator's `predict_arrays` ->
    `run_totals`; each part states its own assumptions, collected here."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.physics.terms import build_arrays

    mspec = resolve_model_arg(model)
    gspec = resolve_gpu_arg(gpu, gpu_file, peak_tflops, memory_gib, bandwidth_gbs, strict=strict)
    if rate is not None:
        job_kwargs["rate_usd_per_gpu_hour"] = rate
    jspec = job or make_job(**job_kwargs)
    sized = jspec.examples is not None or jspec.tokens is not None  # the job says how much data it trains on
    wl = workload(jspec) if sized else step_workload(jspec)
    warnings = job_model_warnings(mspec, jspec, wl) + seq_len_warning(mspec.max_position_embeddings, mspec.name, wl)
    est = get_estimator(estimator, calibration)
    stage = None
    if jspec.stage != "sft":  # preference / RL stages: tuneplan.estimators.stages, docs/stages.md
        from tuneplan.estimators.stages import stage_for_estimate

        stage = stage_for_estimate(est, estimator, mspec, gspec, jspec, wl)
        a, out = stage.arrays, stage.out
    else:
        a = build_arrays([(mspec, gspec, jspec, wl.seq_len)], est.constants)
        out = est.predict_arrays(a)
    flip = [] if stage else checkpointing_flip(mspec, gspec, jspec, wl.seq_len, est, out)
    rate_v, rate_src = resolve_rate(gspec, jspec.rate_usd_per_gpu_hour, provider, prices)
    if stage is None:
        totals, extra = RunTotals.row(run_totals(jspec, wl, a, out, rate_v, c=est.constants)), {}
    else:  # a stage's totals are counted over its own job (rollout GPUs, reference precompute)
        from tuneplan.estimators.stages import stage_run_totals

        totals, extra = stage_run_totals(stage, wl, rate_v, est.constants)
    run_lines = (totals.assumptions(jspec, float(a["tdp_w"][0]), rate_src) if sized
                 else [f"No data size given: {NO_DATA_SIZE}."])
    assumptions = (est.assumptions(jspec) + model_assumptions(mspec, jspec) + workload_assumptions(jspec, wl, est.constants)
                   + job_assumptions(jspec) + peft_assumptions(mspec, jspec) + run_lines
                   + gpu_assumptions(gspec, jspec.precision, jspec.nodes) + stack_assumptions(mspec, gspec, jspec)
                   + (stage.assumptions if stage else []) + flip)
    res = _result(est, stage, mspec, gspec, jspec, wl, a, out, totals, rate_v, rate_src, assumptions,
                  warnings + (price_warnings(gspec, jspec, rate_v, provider, prices) if sized else []))
    res.extra.update(extra)
    res.data_size_given = sized
    if interval:
        from tuneplan.learn.intervals import attach_interval

        attach_interval(res, estimator, interval, calibration, mspec, gspec)
    return res


CKPT_DEFAULT_FRAMEWORKS = "TRL, LLaMA-Factory, ms-swift, unsloth and verl turn it on by default"
"""Who checkpoints activations unless told otherwise (data/frameworks.yaml grad_ckpt), for the flip line."""


def checkpointing_flip(mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, seq_len: int, est, out: dict) -> list[str]:
    """When the job's checkpointing was not given as a mode and the other setting (on <-> off) would
    change the fit verdict, one line saying so, with the other peak: the common setting a user leaves
    unstated (the framework's default) must not hide a verdict that turns on it."""
    from tuneplan.physics.terms import build_arrays, usable_memory_gib
    from tuneplan.specs.framework import get_framework

    if jspec.ckpt_mode != "auto" or getattr(est, "memory_model", None) is None:
        return []
    other = jspec.updated(grad_ckpt=not jspec.grad_ckpt)
    o2 = est.predict_arrays(build_arrays([(mspec, gspec, other, seq_len)], est.constants))
    fits, fits2 = bool(_scalar(out, "fits")), bool(_scalar(o2, "fits"))
    if fits == fits2:
        return []
    fw = get_framework(jspec.framework)
    whose = (f"{fw.label}'s default" if fw.grad_ckpt is not None and fw.grad_ckpt == jspec.grad_ckpt
             else "as given" if fw.grad_ckpt is not None else "not set, off")
    # the figure the fit is judged on: blocks cached for other batch shapes are freed before an OOM
    other_gib = _scalar(o2, "memory_gib") - _scalar(o2, "variable_shape_gib", 0.0)
    cap = float(usable_memory_gib(gspec))
    if jspec.grad_ckpt:
        return [f"Fits with activation checkpointing ({whose}); without it {other_gib:.1f} GiB per GPU, which "
                f"does not fit in {cap:g} GiB."]
    return [f"Does not fit without activation checkpointing ({whose}); with it (--grad-ckpt; "
            f"{CKPT_DEFAULT_FRAMEWORKS}) {other_gib:.1f} GiB per GPU, which fits in {cap:g} GiB."]


def model_assumptions(mspec: ModelSpec, jspec: JobSpec) -> list[str]:
    """Where the model's figures come from (when not the embedded catalog), and what its architecture
    (local attention, MLA, Mamba, a vision tower) implies for this job."""
    from tuneplan.physics.architecture import architecture_assumptions
    from tuneplan.physics.moe_lora import moe_experts_assumptions

    hub = ([f"Model {mspec.name}: {mspec.extra.get('resolved_via', 'config.json from the Hub')}."]
           if mspec.source.startswith("hub:") else [])
    return hub + architecture_assumptions(mspec, jspec.images_per_example, jspec.train_vision_tower,
                                          jspec.image_size) + moe_experts_assumptions(mspec, jspec)


def job_model_warnings(mspec: ModelSpec, jspec: JobSpec, wl: Workload) -> list[str]:
    """InputError for a job the model cannot run (tp over its heads, pp over its layers, cp over the
    sequence, unknown LoRA targets, --tokens with --examples); warnings for legal but odd ones."""
    from tuneplan.physics.targets import TARGET_ALIASES, TARGET_GROUPS
    from tuneplan.specs.job import ALL_LINEAR
    from tuneplan.specs.limits import check_grad_accum_vs_data, check_job_for_model

    known = sorted({*ALL_LINEAR, *TARGET_ALIASES, *TARGET_GROUPS, "gate_up"})
    lowered = jspec.updated(lora_targets=tuple(t.strip().lower() for t in jspec.lora_targets))
    return (check_job_for_model(mspec, lowered, wl.seq_len, known)
            + check_grad_accum_vs_data(wl.samples_per_epoch, jspec.global_batch))


def price_warnings(gspec: GPUSpec, jspec: JobSpec, rate_v: float | None, provider, prices) -> list[str]:
    """A warning when the price-file rate used is old."""
    if jspec.rate_usd_per_gpu_hour is not None or rate_v is None:
        return []
    from tuneplan.specs.prices import price_for, stale_price_warning

    old = stale_price_warning(price_for(gspec.name, provider=provider, path=prices))
    return [old] if old else []


def _result(est, stage, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, wl: Workload, a: dict, out: dict,
            totals: RunTotals, rate_v: float | None, rate_src: str, assumptions: list[str],
            warnings: list[str]) -> EstimateResult:
    """One row of the estimator's output as an EstimateResult, with its warnings and fixes."""
    step_s = _scalar(out, "step_s")
    peak = float(a["peak_flops"][0])
    parts = STEP_PARTS + (stage.step_parts() if stage else ())
    breakdown = {k.removesuffix("_s"): _scalar(out, k) for k in parts
                 if k in out and (k != "vision_tower_s" or _scalar(out, k) > 0)}
    breakdown["total"] = step_s
    from tuneplan.physics.comm_domains import by_domain
    from tuneplan.physics.terms import usable_memory_gib

    mem_total = _scalar(out, "memory_gib")
    cap = float(usable_memory_gib(gspec))  # less inline ECC on GDDR parts (physics/terms.py)
    fits = bool(np.ravel(out["fits"])[0])
    memory_model = est.memory_model
    max_mb = (stage.max_micro_batch if stage else None if memory_model is None
              else int(memory_model.max_micro_batch(a)[0]))
    cached = _scalar(out, "variable_shape_gib", 0.0)
    if fits and mem_total > cap and cached > 0:
        warnings.append(f"the {mem_total:.1f} GiB peak includes {cached:.1f} GiB of blocks cached for other batch "
                        f"shapes; torch frees them before it runs out, so the run fits in {cap:g} GiB "
                        "(slower when it must)")
    warnings += stage.warnings if stage else []
    suggestions: list[str] = []
    no_fit = no_fit_at_one(memory_model, a, cap) if max_mb == 0 and not stage else None
    if not fits:
        warnings.append(no_fit or (f"does not fit: {mem_total:.1f} GiB per GPU needed, {cap:g} GiB "
                                   "available" + (f"; largest micro-batch that fits: {max_mb}" if max_mb else "")))
        if memory_model is not None and not stage:
            from tuneplan.plan.fixes import suggest_fixes

            suggestions = suggest_fixes(mspec, gspec, jspec, wl.seq_len, memory_model)
    return EstimateResult(
        estimator=est.name, model=mspec.name, gpu=gspec.name, job=jspec, workload=wl, totals=totals,
        step_time_s=step_s, tokens_per_s=_scalar(out, "tokens_per_step") / step_s,
        samples_per_s=(stage.samples_per_step if stage else jspec.global_batch) / step_s,
        mfu=_scalar(out, "model_flops_per_step", 0.0) / (step_s * jspec.gpus * peak) if peak else 0.0,
        step_breakdown_s=breakdown, memory_per_gpu_gib=mem_total,
        memory_breakdown_gib=fold_learned_correction(step_peak_said({k.removesuffix("_gib"): _scalar(out, k)
                                                                     for k in est.memory_parts
                                                                     + (stage.memory_parts() if stage else ())},
                                                                    assumptions), assumptions),
        memory_capacity_gib=cap, fits=fits, max_micro_batch=max_mb, rate_usd_per_gpu_hour=rate_v,
        rate_source=rate_src, assumptions=assumptions, warnings=warnings, suggestions=suggestions,
        memory_allocated_gib=_scalar(out, "allocated_gib") if "allocated_gib" in out else None,
        memory_reserved_gib=_scalar(out, "reserved_gib") if "reserved_gib" in out else None,
        extra={**({"max_micro_batch_note": no_fit} if no_fit else {}),
               # each parallel dimension's collectives inside / across the fast-link domain (physics/comm_domains.py)
               **({"communication_by_domain": comm} if (comm := by_domain(out)) else {}),
               # the peak without the blocks cached for other batch shapes: what the fit is judged on
               **({"memory_fit_gib": mem_total - cached} if cached > 0 else {})},
    )


STATIC_MEMORY_PARTS = ("weights", "gradients", "gradient_buckets", "master_weights", "optimizer", "gathered_params", "optimizer_step",
                       "eval_pass", "workspace")
"""Memory parts counted byte by byte (the learned correction never changes them)."""
AFTER_ALLOCATION_PARTS = ("allocator", "cuda_context", "variable_shape")
"""Memory on top of what tensors hold (the allocator's reserve, the CUDA context)."""


def step_peak_said(parts: dict[str, float], assumptions: list[str]) -> dict[str, float]:
    """The memory parts unchanged; where the optimizer step's peak is above the backward's, the
    assumptions say so."""
    if parts.get("optimizer_step", 0.0) > 0:
        assumptions.append(f"Memory: the peak is the optimizer step's, {parts['optimizer_step']:.2f} GiB above the "
                           "backward's: every gradient and the states, plus torch's foreach AdamW temporary (one "
                           "second moment for all trained weights) where the step is foreach (--optimizer-impl).")
    if parts.get("eval_pass", 0.0) > 0:
        assumptions.append(f"Memory: the peak is the evaluation pass's, {parts['eval_pass']:.2f} GiB above the "
                           "training step's: the evaluation batch's logits at the loss beside the weights and optimizer "
                           "states (--eval-batch-size).")
    return parts


def fold_learned_correction(parts: dict[str, float], assumptions: list[str]) -> dict[str, float]:
    """The calibration's learned memory correction folded into the parts it corrects: the estimator
    scales the allocated memory, floored at the byte-counted states, so the correction falls on the
    per-token parts (activations, logits, a stage's extra buffers), scaled in proportion; the parts
    still add up to the peak, and the assumptions say by how much they were corrected. A correction
    larger than those parts stays its own part, labelled `learned_correction`."""
    corr = parts.pop("calibration", 0.0)
    if not corr:
        return parts
    dynamic = [k for k, v in parts.items() if v > 0 and k not in STATIC_MEMORY_PARTS + AFTER_ALLOCATION_PARTS]
    base = sum(parts[k] for k in dynamic)
    if base <= 0 or base + corr <= 0:
        parts["learned_correction"] = corr
        assumptions.append(f"Memory: the calibration's learned correction ({corr:+.2f} GiB) is shown as its own part.")
        return parts
    factor = (base + corr) / base
    for k in dynamic:
        parts[k] *= factor
    assumptions.append(f"Memory: {', '.join(k.replace('_', ' ') for k in dynamic)} include the calibration's learned "
                       f"correction ({corr:+.2f} GiB, x{factor:.2f} on the per-token parts; the byte-counted weights, "
                       "gradients and optimizer states are not corrected).")
    return parts


def no_fit_at_one(memory_model, a: dict, capacity_gib: float) -> str | None:
    """Why not even micro-batch 1 fits: its peak, and how much of it the batch size does not shrink."""
    if memory_model is None:
        return None
    m = memory_model.predict_arrays({**a, "micro_batch": np.ones_like(a["micro_batch"])})
    static = sum(_scalar(m, k + "_gib") for k in STATIC_MEMORY_PARTS[:-1] if k + "_gib" in m)
    return (f"does not fit even at micro-batch 1: {_scalar(m, 'memory_gib'):.1f} GiB per GPU needed, "
            f"{capacity_gib:g} GiB available; {static:.1f} GiB of it are weights, gradients and optimizer states, "
            "which a smaller batch does not shrink")
