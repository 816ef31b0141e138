"""Throughput and memory versus micro-batch for one model, GPU and job (the shape of Xia et al.'s
Fig. 14 and Fig. 13): where throughput saturates, and where memory runs out. Measured runs from a
runs file are overlaid when they match the model, GPU, method and GPU count."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tuneplan.errors import InputError
from tuneplan.specs.limits import MAX_CURVE_POINTS, bound_number

if TYPE_CHECKING:
    import pandas as pd

    from tuneplan.specs.job import JobSpec

CURVE_MAX = 1024
"""Largest micro-batch the curve goes to without an explicit --max-micro-batch."""


@dataclass
class CurveResult:
    model: str
    gpu: str
    method: str
    gpus: int
    seq_len: int
    job: JobSpec
    points: pd.DataFrame  # micro_batch, tokens_per_s, tokens_per_s_per_gpu, step_s, memory_per_gpu_gib, fits, mfu
    max_micro_batch: int  # largest that fits (0: none does)
    memory_capacity_gib: float
    measured: pd.DataFrame | None = None  # micro_batch, tokens_per_s, peak_mem_gib, seq_len, id, source
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from tuneplan.plan.search import records

        return {
            "model": self.model, "gpu": self.gpu, "method": self.method, "gpus": self.gpus,
            "seq_len": self.seq_len, "max_micro_batch": self.max_micro_batch,
            "memory_capacity_gib": self.memory_capacity_gib, "points": records(self.points),
            "measured": records(self.measured) if self.measured is not None else [],
            "job": asdict(self.job), "notes": self.notes,
        }


def curve(model: Any, gpu: Any = None, *, max_micro_batch: int | None = None, runs: Any = None,
          calibration: Any = None, gpu_file: str | None = None, peak_tflops: float | None = None,
          memory_gib: float | None = None, bandwidth_gbs: float | None = None, strict: bool = False,
          **job_fields: Any) -> CurveResult:
    """Throughput (tokens/s, all GPUs) and memory per GPU at micro-batch 1..N for a job (JobSpec
    fields; micro_batch is the swept axis). N: `max_micro_batch`, else twice the largest micro-batch
    that fits (at least 8, at most 1024). `runs`: a runs file (or files) to overlay."""
    import pandas as pd

    from tuneplan.estimators.base import get_estimator
    from tuneplan.physics.run import workload
    from tuneplan.physics.terms import build_arrays
    from tuneplan.specs.job import make_job
    from tuneplan.specs.resolve import resolve_gpu_arg, resolve_model_arg

    mspec = resolve_model_arg(model)
    gspec = resolve_gpu_arg(gpu, gpu_file, peak_tflops, memory_gib, bandwidth_gbs, strict=strict)
    fields = {k: v for k, v in job_fields.items() if v is not None and k not in ("micro_batch", "rate_usd_per_gpu_hour")}
    if "seq_len" not in fields and "tokens_per_example" not in fields:
        raise InputError("seq-len", "is needed for a curve (or --tokens-per-example)")
    if "examples" not in fields and "tokens" not in fields:
        fields["tokens"] = 1.0e6  # the work does not change a step; any amount will do
    job = make_job(**fields)
    seq = workload(job).seq_len
    est = get_estimator("tuneplan", calibration)
    one = build_arrays([(mspec, gspec, job, seq)], est.constants)
    largest = int(est.max_micro_batch(one)[0])
    if max_micro_batch is not None:
        if max_micro_batch < 1:
            raise InputError("max-micro-batch", f"must be a positive integer, got {max_micro_batch}")
        bound_number("max-micro-batch", max_micro_batch, MAX_CURVE_POINTS)
        upper = int(max_micro_batch)
    else:
        upper = int(min(CURVE_MAX, max(8, 2 * largest)))
    mbs = np.arange(1, upper + 1, dtype=float)
    a = {k: (np.repeat(v, len(mbs)) if isinstance(v, np.ndarray) else v) for k, v in one.items()}
    a["micro_batch"] = mbs
    out = est.predict_arrays(a)
    tokens = np.asarray(out["tokens_per_step"], dtype=float)
    tps = tokens / np.asarray(out["step_s"], dtype=float)
    from tuneplan.physics.terms import usable_memory_gib  # the fit's capacity: less inline ECC on GDDR parts

    cap = usable_memory_gib(gspec)
    mem = np.asarray(out["memory_gib"], dtype=float)
    fits = np.asarray(out["fits"], dtype=bool)
    if getattr(est, "residual", None) is not None and hasattr(est, "physics"):
        phys = est.physics(a)  # the physics' own shape, before the learned correction
        tps = keep_physics_shape(tokens / np.asarray(phys["step_s"], dtype=float), tps)
        shaped = keep_physics_shape(np.asarray(phys["memory_gib"], dtype=float), mem)
        vs = np.asarray(out.get("variable_shape_gib", np.zeros_like(mem)), dtype=float)
        fits = np.where(shaped == mem, fits, shaped - vs <= cap)
        mem = shaped
    step = tokens / tps
    peak = np.asarray(a["peak_flops"], dtype=float)
    points = pd.DataFrame({
        "micro_batch": mbs.astype(int), "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / job.gpus, "step_s": step,
        "memory_per_gpu_gib": mem, "fits": fits,
        "mfu": np.asarray(out["model_flops_per_step"], dtype=float) / (step * job.gpus * peak)})
    if len(fits) and fits[0] and not fits.all():
        largest = min(largest, int(np.argmin(fits)))  # the shaped memory's own edge
    res = CurveResult(model=mspec.name, gpu=gspec.name, method=job.method, gpus=job.gpus, seq_len=seq, job=job,
                      points=points, max_micro_batch=largest, memory_capacity_gib=cap)
    from tuneplan.specs.gpu import gpu_assumptions

    res.notes += gpu_assumptions(gspec, job.precision, job.nodes)
    if largest == 0:
        res.notes.append(f"does not fit even at micro-batch 1 on {job.gpus} x {gspec.name}")
    if runs is not None:
        res.measured = measured_points(runs, res, mspec)
    return res


def _monotone(y: np.ndarray, up: bool) -> np.ndarray:
    """The monotone series closest to y in relative terms (isotonic regression on log y)."""
    from scipy.optimize import isotonic_regression

    return np.exp(isotonic_regression(np.log(y), increasing=up).x)


def keep_physics_shape(physics: np.ndarray, corrected: np.ndarray) -> np.ndarray:
    """A calibrated series over the micro-batch kept to the physics' shape: the learned correction is
    fitted row by row, so it can zig-zag where the physics is smooth. Where the physics never falls the
    series is made non-decreasing, where it never rises non-increasing, by isotonic regression on the
    logarithm: points in order are unchanged, the learned level stays, no point leaves the series' range.
    A physics that changes direction is shaped run by run (flat steps join a run); the step from one run
    to the next is left as the correction has it."""
    phys = np.asarray(physics, dtype=float)
    corr = np.asarray(corrected, dtype=float)
    if len(corr) < 2 or not np.all(corr > 0):
        return corr
    d = np.diff(phys)
    if np.all(d >= 0) or np.all(d <= 0):
        return _monotone(corr, bool(np.all(d >= 0)))
    out = corr.copy()
    i, n = 0, len(corr)
    while i < n - 1:
        nonflat = d[i:][d[i:] != 0]
        up = bool(nonflat[0] > 0) if len(nonflat) else True
        j = i
        while j < n - 1 and (d[j] == 0 or (d[j] > 0) == up):
            j += 1
        out[i:j + 1] = _monotone(corr[i:j + 1], up)
        i = j + 1
    return out


def measured_points(runs: Any, res: CurveResult, mspec: Any) -> pd.DataFrame:
    """Rows of a runs file for the curve's model, GPU, method and GPU count (those with a micro-batch
    and a throughput or memory figure)."""
    import pandas as pd

    from tuneplan.runs import read_runs

    table = read_runs(runs)
    df, problems = table.df, [str(p) for p in table.problems]
    if df.empty and problems:  # a mistyped path or a file of no readable run: no overlay of nothing
        raise InputError("runs", f"no runs read: {problems[0]}")
    if problems:
        res.notes.append(f"{len(problems)} problem(s) reading the runs file (rows skipped); first: {problems[0]}")
    cols = ["micro_batch", "tokens_per_s", "peak_mem_gib", "seq_len", "id", "source"]
    if df.empty:
        return pd.DataFrame(columns=cols)

    txt = df.reindex(columns=["model_resolved", "model", "model_hf_id", "gpu_resolved", "gpu", "method", "id",
                              "source"], fill_value="").astype(str)
    num = df.reindex(columns=["gpus", "micro_batch_size", "tokens_per_s", "tokens_per_s_per_gpu", "peak_mem_gib",
                              "seq_len"]).apply(pd.to_numeric, errors="coerce")
    names = {mspec.name.lower(), str(getattr(mspec, "hf_id", "") or "").lower()} - {""}
    model_ok = txt[["model_resolved", "model", "model_hf_id"]].apply(lambda c: c.str.lower().isin(names)).any(axis=1)
    gpu_ok = (txt["gpu_resolved"] == res.gpu) | (txt["gpu"] == res.gpu)
    method_ok = txt["method"].isin([res.method, "", "nan"])
    gpus_ok = num["gpus"].isna() | (num["gpus"] == res.gpus)
    mb, mem = num["micro_batch_size"], num["peak_mem_gib"]
    tps = num["tokens_per_s"].fillna(num["tokens_per_s_per_gpu"] * res.gpus)
    keep = model_ok & gpu_ok & method_ok & gpus_ok & mb.notna() & (tps.notna() | mem.notna())
    n_model_gpu = int((model_ok & gpu_ok).sum())
    out = pd.DataFrame({"micro_batch": mb[keep].astype(int), "tokens_per_s": tps[keep], "peak_mem_gib": mem[keep],
                        "seq_len": num["seq_len"][keep], "id": txt["id"][keep], "source": txt["source"][keep]})
    res.notes.append(f"measured: {len(out)} run(s) of {res.model} on {res.gpu} ({res.method}, {res.gpus} GPU(s)) "
                     f"overlaid; {n_model_gpu - len(out)} other run(s) of this model and GPU differ in method, "
                     "GPU count or lack a micro-batch (measured runs keep their own sequence length and settings)")
    return out.sort_values("micro_batch").reset_index(drop=True)
