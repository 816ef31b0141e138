"""The few-runs loop: a calibration fitted elsewhere (the shipped default) adapted to a user's first
runs on a new stack. What the runs can support is fitted, in this order, each with its own row minimum:
an overall throughput scale (1 run), per-method scales on top (2 runs of a method, 2 methods), a scale
per model and method measured (as far as configurations' offsets carried over), a memory offset (1 memory
run). More runs unlock a fit of the physics' constants on the user's rows alone, chosen over the adapter
only when it predicts the user's rows better out of sample (see `calibrate`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tuneplan.estimators.stack_adapter import StackAdapter, config_key
from tuneplan.learn.measured import TrainingSet, numeric_column

METHOD_MIN_ROWS = 2
"""Throughput runs of one method before it gets a scale of its own (and at least two methods measured)."""
NOISY_SPREAD = 0.10
"""A measured row whose step times spread more than this (p90/p10 - 1) is noisy: it weighs NOISY_WEIGHT."""
NOISY_WEIGHT = 0.25  # Weight of a noisy row in the adapter's fit (a busy machine is not a slow GPU).
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
"""Why runs the base predicts not to fit never set the throughput scale, even where no run that fits is there."""
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


def _method_scales(r: np.ndarray, w: np.ndarray, methods: np.ndarray, overall: float, by_source) -> dict[str, float]:
    """Each method's log-scale on top of the overall one when two or more methods have METHOD_MIN_ROWS
    runs: its own runs' offset, kept as a source's that many runs are (`kept_share`)."""
    uniq, counts = np.unique(methods, return_counts=True)
    eligible = [str(m) for m, n in zip(uniq, counts, strict=True) if n >= METHOD_MIN_ROWS]
    if len(eligible) < 2:
        return {}
    return {m: kept_share(by_source, w[methods == m].sum()) * median_or_mean(r[methods == m], w[methods == m])
            - overall for m in eligible}


KEEP_GRID = np.linspace(0.0, 1.0, 21)
"""Shares of k runs' offset an adapter may keep (kept_share chooses one)."""
REVEAL_DRAWS = 20  # Random reveals per held-out source when simulating what k runs of a new stack teach.


def simulated_reveals(by_source: dict[str, list[float]], k: int, seed: int = 0):
    """(source, its other rows, the revealed rows' median or mean) for each of REVEAL_DRAWS random reveals
    of k rows of each source with more than k (held-out log-ratios: what k runs of a new stack show)."""
    rng = np.random.default_rng(seed)
    for src, v in sorted(by_source.items()):
        g = np.asarray(v, dtype=float)
        for _ in range(REVEAL_DRAWS if len(g) > k else 0):
            sel = np.zeros(len(g), dtype=bool)
            sel[rng.choice(len(g), size=k, replace=False)] = True
            yield src, g[~sel], median_or_mean(g[sel], np.ones(k))


def kept_share(by_source: dict[str, list[float]] | None, k: float, seed: int = 0) -> float:
    """Share of k runs' (median or mean) log-ratio an adapter keeps (k: their weight, rounded, at least 1):
    the one that, with k rows of each of the base's held-out sources revealed (`simulated_reveals`),
    predicts their other rows best (the median absolute error over the sources' stored rows). Chosen on
    the base's training sources alone, so nested; 1 when the base stored too few per-source residuals
    to tell. Sources whose rows scatter more than their offsets differ keep little: the offset of a few
    rows is then mostly their noise."""
    k = max(1, int(round(k)))
    if sum(len(v) > k for v in (by_source or {}).values()) < 3:
        return 1.0
    errs = np.concatenate([np.abs(np.expm1(KEEP_GRID[:, None] * off - rest[None, :]))
                           for _, rest, off in simulated_reveals(by_source, k, seed)], axis=1)
    return float(KEEP_GRID[int(np.argmin(np.median(errs, axis=1)))])


def kept_shares(by_config: dict[str, dict[str, list[float]]] | None, k: float, seed: int = 0) -> tuple[float, float]:
    """(overall, configuration) shares for k runs (their weight, rounded, at least 1): the overall one of the
    runs' median log-ratio, and the one of each configuration's own median's difference from it, applied to
    that configuration's other rows (a source's offset and its configurations' offsets pooled as far as
    they carry over: partial pooling). Chosen together, on a grid, as the pair that predicts the other rows
    of the base's held-out sources best (median absolute error) with k of each source's rows revealed
    (`by_config`: each source's held-out log-ratios by `config_key`), so nested; (kept_share's, 0) when
    fewer than 3 sources have more than k rows."""
    k = max(1, int(round(k)))
    groups = {s: (np.concatenate([np.asarray(v, dtype=float) for v in g.values()]),
                  np.repeat(np.array(list(g), dtype=object), [len(v) for v in g.values()]))
              for s, g in (by_config or {}).items()}
    if sum(len(v) > k for v, _ in groups.values()) < 3:
        return kept_share({s: list(v) for s, (v, _) in groups.items()} or None, k, seed), 0.0
    rng = np.random.default_rng(seed)
    med, own, rest = [], [], []
    for v, keys in (groups[s] for s in sorted(groups)):
        for _ in range(REVEAL_DRAWS if len(v) > k else 0):
            sel = np.zeros(len(v), dtype=bool)
            sel[rng.choice(len(v), size=k, replace=False)] = True
            by_key = {c: float(np.median(v[sel][keys[sel] == c])) for c in set(keys[sel])}
            med += [median_or_mean(v[sel], np.ones(k))] * int((~sel).sum())
            own += [by_key.get(c, np.nan) for c in keys[~sel]]
            rest += v[~sel].tolist()
    m, o, x = np.array(med), np.array(own), np.array(rest)
    errs = [[np.median(np.abs(np.expm1(np.where(np.isnan(o), a * m, a * m + g * (np.nan_to_num(o) - a * m)) - x)))
             for g in KEEP_GRID] for a in KEEP_GRID]
    a, g = np.unravel_index(int(np.argmin(errs)), (len(KEEP_GRID), len(KEEP_GRID)))
    return float(KEEP_GRID[a]), float(KEEP_GRID[g])


def fit_adapter(base, ts: TrainingSet, by_source: dict[str, list[float]] | None = None,
                by_config: dict[str, dict[str, list[float]]] | None = None) -> AdapterFit:
    """Fit a stack adapter for estimator `base` (a TuneplanEstimator) on a user's runs; `by_source`: the
    base's held-out residuals per source, which set the share of the runs' offset kept (`kept_share`;
    None: kept whole); `by_config`: the same by configuration, which set it together with the share of
    each measured configuration's own offset kept for its other rows (`kept_shares`)."""
    w_all = row_weights(ts)
    pred_t, pred_m, slope, fits = _predict(base, ts)
    t = ts.has_throughput & np.isfinite(pred_t) & (pred_t > 0)
    m = ts.has_memory & np.isfinite(pred_m)
    fitted: list[str] = []
    not_fitted: list[str] = []
    edge = t & ~fits
    if edge.any():
        not_fitted.append(f"{int(edge.sum())} run(s) {EDGE_NOTE}" if (t & fits).any() else
                          f"throughput scale: all {int(t.sum())} run(s) {EDGE_NOTE}; check what the runs file says "
                          "of checkpointing, sharding and precision, or add a run that fits")
        t = t & fits
    adapter = StackAdapter(n_rows={"throughput": int(t.sum()), "memory": int(m.sum())})
    if t.any():
        r = np.log(ts.tokens_per_s[t] / pred_t[t])
        w = w_all[t]
        keep, share = kept_shares(by_config, w.sum()) if by_config else (kept_share(by_source, w.sum()), 0.0)
        overall = float(np.clip(keep * median_or_mean(r, w), -MAX_LOG_SCALE, MAX_LOG_SCALE))
        adapter.throughput_log_scale = overall
        fitted.append(f"throughput x{np.exp(overall):.3g} from {int(t.sum())} run(s)"
                      + (f" ({keep:.0%} of their offset: held out, the share that many runs of a source predicted "
                         "its other runs best with)" if keep < 0.995 else ""))
        methods = np.array([c.job.method for c in (ts.configs[i] for i in np.flatnonzero(t))])
        adapter.method_log_scales = _method_scales(r, w, methods, overall, by_source)
        if adapter.method_log_scales:
            fitted.append("per method " + ", ".join(f"{k} x{np.exp(v):.3g}"
                                                    for k, v in sorted(adapter.method_log_scales.items())))
        else:
            not_fitted.append(f"per-method scales (need {METHOD_MIN_ROWS} runs of each of 2 methods)")
        keys = np.array([config_key(c.model.name, c.job.method) for c in (ts.configs[i] for i in np.flatnonzero(t))])
        adapter.config_log_scales = {
            c: share * (median_or_mean(r[keys == c], w[keys == c]) - overall - adapter.method_log_scales.get(me, 0.0))
            for c, me in dict(zip(keys.tolist(), methods.tolist(), strict=True)).items()} if share > 0 else {}
        if adapter.config_log_scales:
            fitted.append(f"per model and method ({share:.0%} of each one's own offset) " + ", ".join(
                f"{k} x{np.exp(v):.3g}" for k, v in sorted(adapter.config_log_scales.items())))
    elif not edge.any():
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
