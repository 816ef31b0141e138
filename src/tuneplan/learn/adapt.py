"""The few-runs loop: a calibration fitted elsewhere (the shipped default) adapted to a user's first
runs on a new stack. What the runs can support is fitted, in this order, each with its own row minimum:
an overall throughput scale (1 run), per-method scales on top (2 runs of a method, 2 methods), a
memory offset (1 memory run). More runs unlock a fit of the physics' constants on the user's rows alone,
chosen over the adapter only when it predicts the user's rows better out of sample (see `calibrate`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tuneplan.estimators.stack_adapter import StackAdapter
from tuneplan.learn.measured import TrainingSet, numeric_column

METHOD_MIN_ROWS = 2
"""Throughput runs of one method before it gets a scale of its own (and at least two methods measured)."""
METHOD_PRIOR_ROWS = 2.0
"""Shrinkage of a method's scale toward the overall one: its mean log-ratio times n / (n + this), the
posterior mean of a normal mean under a prior worth this many rows (empirical-Bayes style: two runs of a
method move its scale two thirds of the way they point, one run is not enough to split it off)."""
NOISY_SPREAD = 0.10
"""A measured row whose step times spread more than this (p90/p10 - 1) is noisy: it weighs NOISY_WEIGHT."""
NOISY_WEIGHT = 0.25
"""Weight of a noisy row in the adapter's fit (a busy machine is not a slow GPU)."""
DEFAULT_SPREAD = 0.10
"""Measurement spread assumed for rows that record none (published benchmark figures): run-to-run
variation of a training step time is a few percent; 10% with the data-loading and logging noise."""
MEMORY_OFFSET_MIN_ROWS = 8
"""Memory runs before the memory offset is applied. Held out by source, an offset from 3 or 5 runs made
peak memory worse (benchmarks/learning_by_source.py; docs/learning.md): a stack's memory error is not
one number the way its throughput error is (what a peak counts differs with the configuration). With
fewer runs the offset is reported, not applied."""
EDGE_NOTE = ("predicted not to fit in the GPU's memory, left out of the throughput scale: a run at the memory "
             "limit is slowed by the allocator's frees and retries, which is the memory model's error, not the stack's "
             "speed")
"""Why runs the base predicts not to fit do not set the throughput scale (when runs that fit are there)."""
MAX_LOG_SCALE = 3.0
"""The adapter refuses scales beyond e^3 (20x): a run that far off is a different job, not a new stack."""


def row_spread(ts: TrainingSet) -> np.ndarray:
    """Each row's measured relative spread (p90/p10 of its step times - 1; NaN when not recorded)."""
    p10, p90 = numeric_column(ts.df, "step_time_s_p10"), numeric_column(ts.df, "step_time_s_p90")
    with np.errstate(divide="ignore", invalid="ignore"):
        s = p90 / p10 - 1.0
    return np.where(np.isfinite(s) & (s >= 0), s, np.nan)


def row_weights(ts: TrainingSet) -> np.ndarray:
    """Rows' weights in an adapter fit: noisy rows (spread over NOISY_SPREAD, or flagged) count less."""
    spread = row_spread(ts)
    noisy = np.nan_to_num(spread, nan=0.0) > NOISY_SPREAD
    if "noisy" in ts.df.columns:
        noisy |= ts.df["noisy"].astype(str).str.lower().isin(("true", "1", "yes")).to_numpy()
    return np.where(noisy, NOISY_WEIGHT, 1.0)


def median_or_mean(x: np.ndarray, w: np.ndarray) -> float:
    """Weighted mean for one or two rows, weighted median from three (robust to one far-off run): the
    value where the cumulative weight reaches half, the mean of the two values around it when it falls
    exactly between them (the usual median of an even count of equal weights)."""
    if len(x) < 3:
        return float(np.average(x, weights=w))
    order = np.argsort(x)
    xs, cw = np.asarray(x, dtype=float)[order], np.cumsum(np.asarray(w, dtype=float)[order])
    half = 0.5 * cw[-1]
    i = int(np.searchsorted(cw, half))
    if i + 1 < len(xs) and np.isclose(cw[i], half, rtol=1e-12, atol=0.0):
        return float(0.5 * (xs[i] + xs[i + 1]))
    return float(xs[i])


@dataclass
class AdapterFit:
    adapter: StackAdapter
    in_sample_mdape: float | None  # throughput, on the rows it was fitted on
    memory_in_sample_mdape: float | None
    warnings: list[str] = field(default_factory=list)
    not_fitted: list[str] = field(default_factory=list)


def _predict(est, ts: TrainingSet) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tokens/s, peak memory as each row measures it, memory slope, predicted to fit) of each row."""
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs

    p = predict_configs(ts.configs, est, with_max_batch=False)
    slope = np.array([1.0 if k == "allocated" else 1.0 + est.constants.allocator_overhead for k in ts.mem_kind])
    return (np.asarray(p["tokens_per_s"], dtype=float), memory_for_kind(p, ts.mem_kind), slope,
            np.asarray(p["fits"], dtype=bool))


def _method_scales(r: np.ndarray, w: np.ndarray, methods: np.ndarray, overall: float) -> dict[str, float]:
    """Each method's log-scale on top of the overall one, shrunk toward it, when two or more methods
    have METHOD_MIN_ROWS runs."""
    uniq, counts = np.unique(methods, return_counts=True)
    eligible = {str(m): float(n) for m, n in zip(uniq, counts, strict=True) if n >= METHOD_MIN_ROWS}
    if len(eligible) < 2:
        return {}
    return {m: (n / (n + METHOD_PRIOR_ROWS)) * (median_or_mean(r[methods == m], w[methods == m]) - overall)
            for m, n in eligible.items()}


def shrinkage(n: float, between: float | None, within: float | None) -> float:
    """Share of the runs' mean log-ratio an adapter keeps: n tau^2 / (n tau^2 + sigma^2), the posterior
    mean of a stack's offset under a normal prior of variance tau^2 (how far stacks sit from the base:
    the spread of its held-out sources' median residuals) with runs of noise sigma^2 (the spread of a
    source's rows around its median). 1 when the base stored no per-source residuals to tell."""
    if not between or not within or n <= 0:
        return 1.0
    return float(n * between / (n * between + within))


def offset_variances(by_source: dict[str, list[float]] | None) -> tuple[float | None, float | None]:
    """(between, within): robust variances of the held-out sources' median log-ratios and of the rows
    around their source's median (MAD x 1.4826, squared), from a calibration's per-source residuals."""
    if not by_source:
        return None, None
    groups = [np.asarray(v, dtype=float) for v in by_source.values() if len(v) >= 3]
    if len(groups) < 3:
        return None, None
    med = np.array([np.median(g) for g in groups])
    dev = np.concatenate([g - np.median(g) for g in groups])

    def mad2(x: np.ndarray) -> float:
        return float((1.4826 * np.median(np.abs(x - np.median(x)))) ** 2)

    return mad2(med), mad2(dev)


def fit_adapter(base, ts: TrainingSet, prior: tuple[float | None, float | None] = (None, None)) -> AdapterFit:
    """Fit a stack adapter for estimator `base` (a TuneplanEstimator) on a user's runs; `prior` is
    (between, within) of `offset_variances` for the base (None: the runs' offset kept whole)."""
    w_all = row_weights(ts)
    pred_t, pred_m, slope, fits = _predict(base, ts)
    t = ts.has_throughput & np.isfinite(pred_t) & (pred_t > 0)
    m = ts.has_memory & np.isfinite(pred_m)
    fitted: list[str] = []
    not_fitted: list[str] = []
    edge_only = t.any() and not (t & fits).any()
    if (t & ~fits).any() and (t & fits).any():
        not_fitted.append(f"{int((t & ~fits).sum())} run(s) {EDGE_NOTE}")
        t = t & fits
    elif edge_only:  # nothing else to go by: they count as noisy runs (less of their offset is kept)
        w_all = np.where(fits, w_all, np.minimum(w_all, NOISY_WEIGHT))
    adapter = StackAdapter(n_rows={"throughput": int(t.sum()), "memory": int(m.sum())})
    if t.any():
        r = np.log(ts.tokens_per_s[t] / pred_t[t])
        w = w_all[t]
        keep = shrinkage(float(w.sum()), *prior)
        overall = float(np.clip(keep * median_or_mean(r, w), -MAX_LOG_SCALE, MAX_LOG_SCALE))
        adapter.throughput_log_scale = overall
        fitted.append(f"throughput x{np.exp(overall):.3g} from {int(t.sum())} run(s)"
                      + (f" ({keep:.0%} of their offset: the rest is run-to-run noise)" if keep < 0.995 else "")
                      + (": all of them predicted not to fit, so each counts as a noisy run (the scale may carry "
                         "the allocator's slowdown at the memory limit); check what the runs file says of checkpointing, sharding and precision, "
                         "or add a run that fits" if edge_only else ""))
        methods = np.array([c.job.method for c in (ts.configs[i] for i in np.flatnonzero(t))])
        adapter.method_log_scales = _method_scales(r, w, methods, overall)
        if adapter.method_log_scales:
            fitted.append("per method " + ", ".join(f"{k} x{np.exp(v):.3g}"
                                                    for k, v in sorted(adapter.method_log_scales.items())))
        else:
            not_fitted.append(f"per-method scales (need {METHOD_MIN_ROWS} runs of each of 2 methods)")
    else:
        not_fitted.append("throughput scale (no run with a measured throughput)")
    if m.any():
        gap = float(median_or_mean((ts.peak_mem_gib[m] - pred_m[m]) / slope[m], w_all[m]))
        if m.sum() >= MEMORY_OFFSET_MIN_ROWS:
            adapter.memory_offset_gib = gap
            fitted.append(f"memory {gap:+.2f} GiB from {int(m.sum())} run(s)")
        else:
            not_fitted.append(f"memory offset ({gap:+.2f} GiB over your {int(m.sum())} run(s); applied from "
                              f"{MEMORY_OFFSET_MIN_ROWS} memory runs)")
    else:
        not_fitted.append("memory offset (no run with a measured peak memory)")
    adapter.fitted = fitted
    return _checked(base, ts, adapter, not_fitted)


def _checked(base, ts: TrainingSet, adapter: StackAdapter, not_fitted: list[str]) -> AdapterFit:
    """In-sample errors of the adapted estimator, and a warning for each of its own rows it misses by more
    than the row's measured spread (DEFAULT_SPREAD where none is recorded)."""
    est = base.with_stack(adapter)
    pred_t, pred_m, _, _ = _predict(est, ts)
    spread = np.nan_to_num(row_spread(ts), nan=DEFAULT_SPREAD)
    warnings = []
    t = ts.has_throughput & np.isfinite(pred_t) & (pred_t > 0)
    thr_err = np.abs(pred_t[t] / ts.tokens_per_s[t] - 1.0)
    for i, e, s in zip(np.flatnonzero(t), thr_err, spread[t], strict=True):
        if e > max(s, DEFAULT_SPREAD):
            rid = ts.df["id"].iloc[i] if "id" in ts.df.columns else i
            warnings.append(f"run {rid}: predicted {pred_t[i]:,.0f} tokens/s against {ts.tokens_per_s[i]:,.0f} "
                            f"measured ({e:.0%} off, more than its measured spread {max(s, DEFAULT_SPREAD):.0%}): "
                            "what differs in this run (method, sequence length, GPU count) the adapter cannot "
                            "fit from these runs; more runs unlock more")
    m = ts.has_memory & np.isfinite(pred_m)
    mem_err = np.abs(pred_m[m] / ts.peak_mem_gib[m] - 1.0)
    return AdapterFit(adapter, float(np.median(thr_err)) if len(thr_err) else None,
                      float(np.median(mem_err)) if len(mem_err) else None, warnings, not_fitted)
