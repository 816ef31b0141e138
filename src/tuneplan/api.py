"""The Python API: `estimate(...)` returns a typed `EstimateResult` (with `.to_dict()`), the same
figures `tuneplan estimate` prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneplan.physics.run import RunTotals, Workload, run_totals, workload
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import LORA_FAMILY, JobSpec, make_job
from tuneplan.specs.model import ModelSpec
from tuneplan.specs.resolve import resolve_gpu_arg, resolve_model_arg, resolve_rate

STEP_PARTS = ("forward_s", "backward_s", "recompute_s", "dequant_s", "elementwise_s", "overhead_s", "tensor_parallel_s",
              "pipeline_bubble_s", "optimizer_s", "communication_s")
MEMORY_PARTS = ("weights_gib", "gradients_gib", "master_weights_gib", "optimizer_gib", "gathered_params_gib",
                "activations_gib", "logits_gib", "workspace_gib", "calibration_gib", "allocator_gib",
                "cuda_context_gib")


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

    @property
    def wall_clock_s(self) -> float:
        return self.totals.wall_clock_s

    @property
    def device_hours(self) -> float:
        return self.totals.device_hours

    @property
    def cost_usd(self) -> float | None:
        return self.totals.cost_usd

    @property
    def energy_kwh(self) -> float:
        return self.totals.energy_kwh

    def to_dict(self) -> dict[str, Any]:
        t = self.totals
        d: dict[str, Any] = {
            "estimator": self.estimator,
            "model": self.model,
            "gpu": self.gpu,
            "method": self.job.method,
            "gpus": self.job.gpus,
            "nodes": self.job.nodes,
            "wall_clock_s": t.wall_clock_s,
            "wall_clock_h": t.wall_clock_s / 3600.0,
            "device_hours": t.device_hours,
            "cost_usd": t.cost_usd,
            "rate_usd_per_gpu_hour": self.rate_usd_per_gpu_hour,
            "rate_source": self.rate_source,
            "energy_kwh": t.energy_kwh,
            "co2_kg": t.co2_kg,
            "tokens_per_s": self.tokens_per_s,
            "samples_per_s": self.samples_per_s,
            "step_time_s": self.step_time_s,
            "steps": t.steps,
            "tokens_total": self.workload.processed_tokens_per_epoch * self.workload.epochs,
            "mfu": self.mfu,
            "memory_per_gpu_gib": self.memory_per_gpu_gib,
            "memory_capacity_gib": self.memory_capacity_gib,
            "fits": self.fits,
            "max_micro_batch": self.max_micro_batch,
            "step_breakdown_s": self.step_breakdown_s,
            "memory_breakdown_gib": self.memory_breakdown_gib,
            "wall_clock_breakdown_s": {"load": t.load_s, "train": t.train_s, "eval": t.eval_s,
                                       "checkpoint": t.checkpoint_s},
            "workload": self.workload.to_dict(),
            "job": self.job.model_dump(),
            "assumptions": self.assumptions,
            "warnings": self.warnings,
            "suggestions": self.suggestions,
        }
        if self.interval:
            d["interval"] = self.interval
            d["wall_clock_s_low"] = self.interval["wall_clock_s_low"]
            d["wall_clock_s_high"] = self.interval["wall_clock_s_high"]
            d["low"] = self.interval["wall_clock_s_low"]
            d["high"] = self.interval["wall_clock_s_high"]
        d.update(self.extra)
        return d


def _scalar(out: dict, key: str, default: float = 0.0) -> float:
    v = out.get(key)
    return default if v is None else float(np.asarray(v)[0])


def estimate(model: str | ModelSpec, gpu: str | GPUSpec | None = None, *, estimator: str = "tuneplan",
             calibration=None, gpu_file: str | None = None, peak_tflops: float | None = None,
             memory_gib: float | None = None, bandwidth_gbs: float | None = None,
             provider: str | None = None, prices: str | None = None, rate: float | None = None,
             interval: float | None = 0.8, job: JobSpec | None = None, **job_kwargs: Any) -> EstimateResult:
    """Estimate a fine-tuning run. Job fields are JobSpec's (method, gpus, micro_batch, examples,
    tokens_per_example, epochs, seq_len, ...). Raises InputError for bad input."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.physics.terms import build_arrays

    mspec = resolve_model_arg(model)
    gspec = resolve_gpu_arg(gpu, gpu_file, peak_tflops, memory_gib, bandwidth_gbs)
    if rate is not None:
        job_kwargs["rate_usd_per_gpu_hour"] = rate
    jspec = job or make_job(**job_kwargs)
    wl = workload(jspec)
    warnings: list[str] = []
    if mspec.max_position_embeddings and wl.seq_len > mspec.max_position_embeddings:
        warnings.append(f"seq_len {wl.seq_len} is above {mspec.name}'s max_position_embeddings "
                        f"({mspec.max_position_embeddings}): fine with RoPE scaling, otherwise truncate")
    est = get_estimator(estimator, calibration)
    phys_name = "tuneplan"
    phys = get_estimator(phys_name, calibration if estimator == "tuneplan" else "none")
    a = build_arrays([(mspec, gspec, jspec, wl.seq_len)], getattr(phys, "constants", None))
    out = est.predict_arrays(a)
    mem_out = out if "weights_gib" in out else phys.predict_arrays(a)
    if estimator == "planner":
        mem_out = {**mem_out, "memory_gib": out["memory_gib"], "fits": out["fits"]}
    step_s = _scalar(out, "step_s")
    tokens_step = _scalar(out, "tokens_per_step")
    samples_step = jspec.global_batch
    tps = tokens_step / step_s
    peak = float(a["peak_flops"][0])
    mfu = _scalar(out, "model_flops_per_step", 0.0) / (step_s * jspec.gpus * peak) if peak else 0.0
    breakdown = {k.removesuffix("_s"): _scalar(out, k) for k in STEP_PARTS if k in out}
    breakdown["total"] = step_s
    if estimator == "planner":
        mem_bd = {"weights_and_optimizer_state": _scalar(out, "memory_gib")}
        mem_total = _scalar(out, "memory_gib")
        fits = bool(np.asarray(out["fits"])[0])
        max_mb = None
    else:
        mem_bd = {k.removesuffix("_gib"): _scalar(mem_out, k) for k in MEMORY_PARTS}
        mem_total = _scalar(mem_out, "memory_gib")
        fits = bool(np.asarray(mem_out["fits"])[0])
        max_mb = int(phys.max_micro_batch(a)[0])
    rate_v, rate_src = resolve_rate(gspec, jspec.rate_usd_per_gpu_hour, provider, prices)
    fwd_micro = _scalar(out, "forward_s") / jspec.grad_accum
    compute_share = _scalar(out, "compute_s", step_s) / step_s if step_s else 0.0
    trainable = float(a["params_trainable"][0])
    ckpt_bytes = trainable * (2.0 if jspec.method in ("full", "freeze") else 4.0)
    weight_bytes = float(a["params_frozen_linear"][0] * a["frozen_linear_bytes"][0]
                         + a["params_frozen_other"][0] * a["frozen_other_bytes"][0]
                         + trainable * a["weight_bytes_compute"][0])
    totals = run_totals(jspec, wl, step_s, fwd_micro, compute_share, mspec.params_total, weight_bytes,
                        ckpt_bytes, gspec.tdp_w or 300.0, rate_v, getattr(phys, "constants", None) or
                        __import__("tuneplan.physics.constants", fromlist=["x"]).DEFAULT_CONSTANTS)
    assumptions = list(est.assumptions())
    assumptions += [
        f"Sequence length {wl.seq_len} tokens per sample ({wl.seq_len_source}); "
        + ("samples packed to it." if jspec.packing else
           "each example padded to it." if jspec.padding == "max" else
           "each batch padded to its longest example: compute assumes seq_len, the upper bound; batch "
           "shapes vary, so reserved memory (the allocator part) holds "
           f"{getattr(getattr(phys, 'constants', None), 'variable_shape_reserve', 1.0):.2f}x the per-token "
           "activations and loss buffers more (freed blocks of shorter batches stay cached); torch frees "
           "them before it runs out, so they do not count against the fit."),
    ]
    if jspec.is_lora_family:
        assumptions.append(
            "Adapters in fp32 (peft >= 0.12's default): over 16-bit weights each adapted module keeps an fp32 "
            "copy of its input for backward (--adapter-dtype compute: adapters in the compute dtype, as older "
            "peft, litgpt and Megatron)." if jspec.adapter_dtype == "fp32" else
            "Adapters in the compute dtype (--adapter-dtype compute): no fp32 copies of their inputs.")
    assumptions += [
        f"Wall clock includes model load ({totals.load_s:.0f} s), evaluation ({totals.eval_s:.0f} s) and "
        f"checkpoint saves ({totals.checkpoint_s:.0f} s) at {jspec.disk_gbs:g} GB/s disk.",
        f"Energy: GPU power {gspec.tdp_w or 300:.0f} W TDP scaled by busy share; "
        f"CO2 at {jspec.grid_gco2_kwh if jspec.grid_gco2_kwh is not None else 480:g} g/kWh.",
        f"Price: {rate_src}." if rate_v is not None else f"Cost not computed: {rate_src}.",
    ]
    consts = getattr(phys, "constants", None)
    if estimator == "tuneplan" and consts is not None and jspec.method in LORA_FAMILY:
        kernels = consts.dora_kernels_per_module if jspec.method == "dora" else consts.lora_kernels_per_module
        assumptions.append(
            f"Adapters: {kernels:.0f} small kernels per adapted module per micro-step at "
            f"{consts.kernel_launch_s * 1e6:.1f} us each, and {consts.adapter_passes:.1f} element-wise passes "
            "over each adapted module's input and output per token.")
    if jspec.method in ("full", "freeze") and jspec.precision in ("bf16", "fp16"):
        assumptions.append(
            f"{jspec.precision} weights with an fp32 master copy and fp32 optimizer moments (--master-weights fp32)."
            if jspec.fp32_master() else
            f"{jspec.precision} weights trained in place: no fp32 master copy, 16-bit optimizer moments "
            "(--master-weights fp32 for mixed precision over fp32 weights).")
    if estimator != "tuneplan" and estimator != "planner":
        assumptions.append("Memory figures from tuneplan's uncalibrated memory model (this estimator has none).")
    suggestions: list[str] = []
    cached = _scalar(mem_out, "variable_shape_gib", 0.0) if estimator != "planner" else 0.0
    if fits and mem_total > gspec.memory_gib and cached > 0:
        warnings.append(f"the {mem_total:.1f} GiB peak includes {cached:.1f} GiB of blocks cached for other batch "
                        f"shapes; torch frees them before it runs out, so the run fits in {gspec.memory_gib:g} GiB "
                        "(slower when it must)")
    if not fits:
        warnings.append(f"does not fit: {mem_total:.1f} GiB per GPU needed, {gspec.memory_gib:g} GiB available"
                        + (f"; largest micro-batch that fits: {max_mb}" if max_mb else ""))
        if estimator != "planner":
            from tuneplan.plan.fixes import suggest_fixes

            suggestions = suggest_fixes(mspec, gspec, jspec, wl.seq_len, phys)
    res = EstimateResult(
        estimator=estimator, model=mspec.name, gpu=gspec.name, job=jspec, workload=wl, totals=totals,
        step_time_s=step_s, tokens_per_s=tps, samples_per_s=samples_step / step_s, mfu=mfu,
        step_breakdown_s=breakdown, memory_per_gpu_gib=mem_total, memory_breakdown_gib=mem_bd,
        memory_capacity_gib=gspec.memory_gib, fits=fits, max_micro_batch=max_mb, rate_usd_per_gpu_hour=rate_v,
        rate_source=rate_src, assumptions=assumptions, warnings=warnings, suggestions=suggestions,
    )
    if interval:
        from tuneplan.learn.intervals import attach_interval

        attach_interval(res, estimator, interval, calibration)
    return res
