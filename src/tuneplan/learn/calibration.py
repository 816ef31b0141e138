"""Fitting calibration files: a learner fitted on measured runs, with held-out residuals for the
intervals. The file format itself (and reading it back) is `tuneplan.estimators.calibration`."""

from __future__ import annotations

import numpy as np

from tuneplan.errors import InputError
from tuneplan.estimators.calibration import Calibration
from tuneplan.estimators.stack_adapter import config_key
from tuneplan.learn.intervals import (
    COMM_BOUND,
    THROUGHPUT_ONLY,
    _width,
    coverage_keys,
    covered_values,
    filled_in,
    interval_flags,
)

CV_FOLDS = 5
"""Out-of-fold residuals for intervals: each row predicted by a learner fitted without its fold."""


# ---- fitting -----------------------------------------------------------------------------------

def _estimator_log_ratios(est, ts) -> dict[str, np.ndarray]:
    """log(measured / predicted) for throughput and memory on a training set (and the step's
    communication share of the throughput rows, "comm_share")."""
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs

    pred = predict_configs(ts.configs, est, with_max_batch=False)
    out: dict[str, np.ndarray] = {}
    t = ts.has_throughput
    out["throughput"] = np.log(ts.tokens_per_s[t] / pred["tokens_per_s"][t])
    out["comm_share"] = pred["comm_share"][t]
    if est.memory_model is est:  # an estimator with a memory model of its own
        m = ts.has_memory
        pm = memory_for_kind(pred, ts.mem_kind)
        out["memory"] = np.log(ts.peak_mem_gib[m] / pm[m])
    return out


def out_of_fold_residuals(learner_name: str, ts, folds: int = CV_FOLDS, seed: int = 0,
                          fitted=None, throughput_only: bool = False) -> dict[str, list[float]]:
    """Held-out residuals for intervals: each row predicted by the learner fitted without the row's
    whole source (a user's own runs are a source the calibration never saw); random folds when the
    rows come from fewer than 3 sources. With `fitted` (the learner fitted on all rows), the inner
    fits reuse its residual shares and a smaller least-squares budget; `throughput_only`: the inner fits
    leave the memory constants at their priors (memory residuals are still those of every held-out row)."""
    from tuneplan.learn.learners import NotEnoughData, fit_learner

    n = len(ts)
    sources = sorted(set(ts.source.tolist()))
    if len(sources) >= 3:
        keys = np.array([sources.index(s) for s in ts.source])
    else:
        keys = np.random.default_rng(seed).permutation(n) % folds
    thr: dict[str, list[float]] = {}
    mem: dict[str, list[float]] = {}
    thr_seen: dict[str, list[float]] = {}  # rows whose framework another training source ran
    thr_unseen: dict[str, list[float]] = {}
    rows_t: list[tuple] = []  # (log-ratio, interval_flags keys, source) of each held-out row
    rows_m: list[tuple] = []
    by_config: dict[str, dict[str, list[float]]] = {}  # each held-out source's log-ratios by configuration
    shared = None  # throughput only: the one fit of every fold whose held-out source has no throughput row
    for k in sorted(set(keys.tolist())):
        train, test = ts.subset(keys != k), ts.subset(keys == k)
        reuse = throughput_only and len(sources) >= 3 and not test.has_throughput.any()
        try:
            if reuse and shared is not None:  # a fit of throughput alone is the same without such a source
                est = shared
            elif learner_name == "tuneplan" and fitted is not None:
                est = fit_learner("tuneplan", train, max_nfev=40, shrink=fitted.shrinks(), memory=not throughput_only,
                                  pull=fitted.thr_pull_)
            else:
                est = fit_learner(learner_name, train)
        except NotEnoughData:
            continue
        shared = est if reuse else shared
        r = _estimator_log_ratios(est, test)
        thr.setdefault(str(k), []).extend(r["throughput"].tolist())
        if len(sources) >= 3:  # each held-out row's contributions to the width, against the fold's training rows
            flags = row_flags(test, covered_values(train.configs))
            t, m = np.flatnonzero(test.has_throughput), np.flatnonzero(test.has_memory)
            rows_t += [(v, set(flags[i]) | ({"comm"} if cs > COMM_BOUND else set()), test.source[i])
                       for i, v, cs in zip(t, r["throughput"], r["comm_share"], strict=True)]
            rows_m += [(v, set(flags[i]) - set(THROUGHPUT_ONLY), test.source[i]) for i, v in zip(m, r.get("memory", ()), strict=False)]
            for i, v in zip(t, r["throughput"], strict=True):
                c = test.configs[i]
                by_config.setdefault(str(test.source[i]), {}).setdefault(config_key(c.model.name, c.job.method),
                                                                         []).append(float(v))
        seen_fw = known_frameworks(train)
        seen = np.array([c.job.framework.partition("@")[0] in seen_fw for c in test.configs],
                        dtype=bool)[test.has_throughput]
        thr_seen.setdefault(str(k), []).extend(r["throughput"][seen].tolist())
        thr_unseen.setdefault(str(k), []).extend(r["throughput"][~seen].tolist())
        if "memory" in r:
            mem.setdefault(str(k), []).extend(r["memory"].tolist())
    balanced = len(sources) >= 3
    out: dict = {"throughput": balanced_residuals(thr, balanced)}
    m = balanced_residuals(mem, balanced)
    if m:
        out["memory"] = m
    if balanced:
        # a framework the calibration has seen predicts closer than one it has not (or one not said)
        out["frameworks"] = sorted(known_frameworks(ts))
        out["throughput_framework_seen"] = balanced_residuals(thr_seen, True)
        out["throughput_framework_unseen"] = balanced_residuals(thr_unseen, True)
        # each held-out source's own residuals: what an adapter to a new stack leaves (adapted_residuals)
        out["throughput_by_source"] = {sources[int(k)]: _spaced(v) for k, v in sorted(thr.items()) if v}
        out["throughput_by_config"] = by_config
        if mem:
            out["memory_by_source"] = {sources[int(k)]: _spaced(v) for k, v in sorted(mem.items()) if v}
        out["width"] = {"covered": covered_values(ts.configs),
                        **{name: fit_width(*zip(*rows, strict=True)) for name, rows in
                           (("throughput", rows_t), ("memory", rows_m)) if len(rows) >= MIN_GROUP_ROWS}}
    return out


def row_flags(ts, covered: dict) -> list[dict[str, str]]:
    """Each row's contributions to its interval's width (learn.intervals.interval_flags) but the
    communication-bound one: the settings its source left to defaults (the row's and the table's
    defaults_used), and what no training source ran (`covered`)."""
    table = ts.df["defaults_used"].astype(str).tolist() if "defaults_used" in ts.df.columns else [""] * len(ts)
    return [interval_flags(filled_in(defaults_used=[*c.defaults_used, *t.split(";")]),
                           coverage_keys(c.job, c.model, c.gpu, c.seq_len), c.job.framework, 0.0, covered)
            for c, t in zip(ts.configs, table, strict=True)]


def known_frameworks(ts) -> set[str]:
    """The frameworks a training set's rows ran, by profile name (hf-trainer@4.46 is hf-trainer; the
    generic stack is no framework)."""
    return {c.job.framework.partition("@")[0] for c in ts.configs} - {"generic"}


def _spaced(v) -> list[float]:
    """At most BALANCED_POINTS evenly spaced quantiles of a source's residuals (all of them when fewer)."""
    g = np.sort(np.asarray(v, dtype=float))
    k = min(len(g), BALANCED_POINTS)
    return [float(x) for x in (g if k == len(g) else np.quantile(g, (np.arange(k) + 0.5) / k))]


def residuals_after_reveal(by_source: dict[str, list[float]], k: int, seed: int = 0) -> list[float]:
    """The log-ratios an adapter fitted on k runs of a new stack leaves, simulated on the held-out
    sources' own residuals (adapt.simulated_reveals): the share of the revealed rows' offset an adapter
    keeps (adapt.kept_share) removed from the others. A source gives as many evenly spaced quantiles of
    its draws as it has other rows (at most BALANCED_POINTS), as balanced_residuals weighs its rows."""
    from tuneplan.learn.adapt import kept_share, simulated_reveals

    keep = kept_share(by_source, k, seed)
    groups: dict[str, list[float]] = {}
    for src, rest, off in simulated_reveals(by_source, k, seed):
        groups.setdefault(src, []).extend((rest - keep * off).tolist())
    sizes = {src: min(len(by_source[src]) - k, BALANCED_POINTS) for src in groups}
    return sorted(float(x) for src, g in groups.items()
                  for x in np.quantile(g, (np.arange(sizes[src]) + 0.5) / sizes[src]))


def adapted_residuals(tp: dict, n_rows: dict[str, int], seed: int = 0) -> dict:
    """The tuneplan interval residuals of a calibration adapted on a new stack's runs (n_rows: the
    adapter's throughput and memory runs; memory ones only once the offset is applied): each metric's
    pool is what those runs leave (residuals_after_reveal) and its width model is centred on it and
    scaled by how much narrower it spreads than the held-out sources' own residuals (median absolute
    deviations); the base's framework pools are dropped. Metrics without per-source residuals stay."""
    from tuneplan.learn.adapt import MEMORY_OFFSET_MIN_ROWS

    tp = dict(tp)
    for metric in ("throughput", "memory"):
        by = tp.get(f"{metric}_by_source")
        k = int(n_rows.get(metric, 0))
        applied = k >= (1 if metric == "throughput" else MEMORY_OFFSET_MIN_ROWS)
        r = residuals_after_reveal(by, k, seed) if by and applied else []
        if len(r) < 10:
            continue
        tp[metric] = r
        width = tp.get("width") or {}
        if metric in width:
            s, m = _mad(r) / max(_mad(balanced_residuals(by, True)), 1e-9), width[metric]
            tp["width"] = {**width, metric: {**m, "centre": float(np.median(r)), "base": m["base"] * s,
                                             "unfitted": m.get("unfitted", 0.0) * s,
                                             "contributions": {c: v * s for c, v in m["contributions"].items()}}}
        for pool in ("framework_seen", "framework_unseen"):  # the base's pools: not what the runs leave
            tp.pop(f"{metric}_{pool}", None)
    return tp


def _mad(x) -> float:
    return float(np.median(np.abs(np.asarray(x) - np.median(x))))


BALANCED_POINTS = 50
"""Most residuals a held-out source gives a calibration's interval sample."""


def balanced_residuals(by_group: dict[str, list[float]], balanced: bool) -> list[float]:
    """The interval sample: with held-out sources, every source gives at most BALANCED_POINTS
    residuals, evenly spaced quantiles of its own when it has more (a new user's machine is one more
    source, not one more row of the source that published most), and its rows as they are when it has
    fewer (five rows are five measurements, not fifty: repeated, a small source's few far-off rows
    would set the interval's tails); with random folds, all residuals as they are."""
    groups = [np.asarray(v, dtype=float) for v in by_group.values() if len(v)]
    if not groups:
        return []
    if not balanced:
        return sorted(float(x) for g in groups for x in g)
    return sorted(x for g in groups for x in _spaced(g))


MIN_GROUP_ROWS = 10
"""Held-out rows (from at least 2 sources) a contribution to the interval's width needs to be fitted."""
MIN_WIDTH = 0.01
"""Smallest log-width a configuration with no contribution is given (a base fitted to nothing)."""


def fit_width(residuals, flags, sources, honest: bool = True) -> dict:
    """The interval's log-width as named contributions, fitted on held-out rows (their log-ratios, each
    row's interval_flags keys and source): a centre (the median), and squared widths that add up,
    (r - centre)^2 ~ base^2 + the sum of the row's contributions^2, fitted by non-negative least
    squares, every source weighing the same; a contribution needs MIN_GROUP_ROWS rows from two sources.
    One the rows cannot fit that way ("unfitted": a setting only one source left to defaults, a GPU
    family no two sources ran) counts as the mean of the positive ones fitted: that an assumption made
    a difference nowhere else is not known, so it is as uncertain as the typical one that did.
    The standardised residuals (r - centre) / width, at most BALANCED_POINTS per source, give the
    interval's quantiles at any coverage (conformal, learn.intervals.width_bounds); `honest`: each
    source's standardised by the model fitted on the other sources' rows (unfitted contributions and
    all), as a source the model never saw is, so the quantiles hold out of sample, not only on the
    rows the widths were fitted to (there they over-cover: a held-out source's rows gain contributions
    the fitted rows did not have)."""
    from scipy.optimize import nnls

    from tuneplan.estimators.residual_fit import weighted_median

    r, src = np.asarray(residuals, dtype=float), np.asarray(sources)
    _, inv, counts = np.unique(src, return_inverse=True, return_counts=True)
    w = 1.0 / counts[inv]
    centre = weighted_median(r, w)
    keys = [k for k in sorted(set().union(*flags)) if
            len(set(src[[k in f for f in flags]])) >= 2 and sum(k in f for f in flags) >= MIN_GROUP_ROWS]
    F = np.array([[1.0] + [float(k in f) for k in keys] for f in flags])
    sq, _ = nnls(F * np.sqrt(w)[:, None], (r - centre) ** 2 * np.sqrt(w))
    sq[0] = max(sq[0], MIN_WIDTH ** 2)
    fitted = {k: float(np.sqrt(v)) for k, v in zip(keys, sq[1:], strict=True)}
    model = {"centre": centre, "base": float(np.sqrt(sq[0])), "contributions": fitted,
             "unfitted": float(np.mean([v for v in fitted.values() if v > 0] or [0.0]))}
    if not honest:
        return model
    by: dict[str, list[float]] = {}  # each source's rows standardised by the model fitted without it
    for s_ in np.unique(src):
        out = src != s_
        m = fit_width(r[out], [f for f, o in zip(flags, out, strict=True) if o], src[out], False) if out.any() else model
        by[str(s_)] = [float((v - m["centre"]) / _width(m, f)) for v, f, o in zip(r, flags, out, strict=True) if not o]
    return {**model, "z": balanced_residuals(by, True)}


def fit_calibration(df, learner: str = "tuneplan", name: str = "", base: Calibration | None = None
                    ) -> tuple[Calibration, list[str]]:
    """Fit a learner on every usable row of a runs table; returns the calibration and messages."""
    from tuneplan import __version__
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.learners import LEARNER_NAMES, fit_learner
    from tuneplan.learn.measured import training_set

    if learner not in LEARNER_NAMES:
        raise InputError("learner", f"unknown learner '{learner}'", sorted(LEARNER_NAMES))
    ts = training_set(df)
    if base is not None:
        return adapt_calibration(ts, base, learner, name)
    obj = fit_learner(learner, ts)  # NotEnoughData propagates: the caller says so and keeps the physics
    intervals = {learner: out_of_fold_residuals(learner, ts, fitted=obj)}
    for raw in ("planner", "kavier", "xia"):
        if raw != learner:
            r = _estimator_log_ratios(get_estimator(raw), ts)
            intervals[raw] = {"throughput": sorted(r["throughput"].tolist())}
    cal = Calibration(
        learner=learner, payload=obj.payload(), fingerprint=ts.fingerprint(),
        n_rows={"configured": len(ts), "throughput": int(ts.has_throughput.sum()),
                "memory": int(ts.has_memory.sum()), "oom": int(ts.is_oom.sum())},
        sources=sorted(set(ts.source.tolist())), intervals=intervals, tuneplan_version=__version__,
        name=name or learner, notes=list(getattr(obj, "notes_", [])),
    )
    return cal, ([f"skipped {len(ts.skipped)} rows that cannot be configured"] if ts.skipped else []) + ts.notes


FULL_FIT_MIN_ROWS = 8
"""A user's throughput runs before a fit of the physics' constants on them alone is tried against the
adapted shipped calibration (the adapter is kept unless the fit predicts held-out runs better)."""
CHOICE_FOLDS = 5
"""Folds of the user's rows on which the adapter and a fit from scratch are compared."""


def _fold_mdape(ts, folds: np.ndarray, make_estimator) -> float:
    """Median throughput error of rows predicted by estimators fitted without their fold."""
    from tuneplan.learn.predict_table import predict_configs

    errs: list[float] = []
    for k in sorted(set(folds.tolist())):
        train, test = ts.subset(folds != k), ts.subset(folds == k)
        try:
            est = make_estimator(train)
        except Exception as exc:  # noqa: BLE001 - a fold too small for the fit: that candidate loses it
            from tuneplan.learn.learners import NotEnoughData

            if not isinstance(exc, NotEnoughData):
                raise
            return float("inf")
        p = predict_configs(test.configs, est, with_max_batch=False)["tokens_per_s"]
        ok = test.has_throughput
        errs.extend(np.abs(p[ok] / test.tokens_per_s[ok] - 1.0).tolist())
    return float(np.median(errs)) if errs else float("inf")


def adapt_calibration(ts, base: Calibration, learner: str = "tuneplan", name: str = ""
                      ) -> tuple[Calibration, list[str]]:
    """A user's runs on top of a calibration fitted elsewhere (`base`, the shipped default): the stack
    adapter of `tuneplan.learn.adapt`, or, from FULL_FIT_MIN_ROWS throughput runs, a fit of the learner on
    the user's rows alone when that predicts the user's own held-out rows better (chosen on folds of the
    user's rows; the figures are reported either way)."""
    from tuneplan import __version__
    from tuneplan.learn.adapt import fit_adapter
    from tuneplan.learn.learners import fit_learner

    if base.learner != "tuneplan" or learner != "tuneplan":
        raise InputError("learner", f"only the tuneplan learner adapts a calibration (base: {base.learner}, "
                         f"learner: {learner}); pass --from-scratch to fit {learner} on your runs alone", ["tuneplan"])
    n_thr = int(ts.has_throughput.sum())
    if n_thr + int(ts.has_memory.sum()) == 0:
        from tuneplan.learn.learners import NotEnoughData

        raise NotEnoughData("no row with a measured throughput or peak memory")
    base_est = base.estimator()
    prior, by_config = (base.intervals.get("tuneplan", {}).get(f"throughput_by_{k}") for k in ("source", "config"))
    messages: list[str] = []
    if n_thr >= FULL_FIT_MIN_ROWS:
        folds = np.random.default_rng(0).permutation(len(ts)) % CHOICE_FOLDS
        e_adapt = _fold_mdape(ts, folds, lambda tr: base_est.with_stack(fit_adapter(base_est, tr, prior,
                                                                                    by_config).adapter))
        e_full = _fold_mdape(ts, folds, lambda tr: fit_learner("tuneplan", tr))
        messages.append(f"held-out error on your runs ({CHOICE_FOLDS} folds): {base.name or 'shipped'} calibration "
                        f"adapted {e_adapt:.1%}, fitted on your runs alone {e_full:.1%}")
        if e_full < e_adapt:
            cal, more = fit_calibration(ts.df, learner, name)
            cal.notes.append(f"fitted on your runs alone: held-out {e_full:.1%} against {e_adapt:.1%} adapted")
            return cal, messages + more
    fit = fit_adapter(base_est, ts, prior, by_config)
    payload = {**base.payload, "stack": fit.adapter.to_dict()}
    if fit.in_sample_mdape is not None:
        messages.append(f"adapted {base.name or 'shipped'} calibration: {fit.adapter.describe()}; in-sample "
                        f"throughput error {fit.in_sample_mdape:.1%} (median over {n_thr} runs)"
                        + (f", memory {fit.memory_in_sample_mdape:.1%}" if fit.memory_in_sample_mdape is not None
                           else ""))
    if fit.not_fitted:
        messages.append("not fitted: " + "; ".join(fit.not_fitted))
    messages.extend(f"warning: {w}" for w in fit.warnings)
    own_sources = sorted(set(ts.source.tolist()))
    cal = Calibration(
        learner="tuneplan", payload=payload, fingerprint=ts.fingerprint(),
        n_rows={"configured": len(ts), "throughput": n_thr, "memory": int(ts.has_memory.sum()),
                "oom": int(ts.is_oom.sum())},
        sources=own_sources,
        intervals={**base.intervals, "tuneplan": adapted_residuals(base.intervals.get("tuneplan", {}), fit.adapter.n_rows)},
        tuneplan_version=__version__, name=name or "adapted",
        notes=[*base.notes, f"adapted from '{base.name}' ({base.fingerprint[:12]}) on {len(ts)} runs: "
               f"{fit.adapter.describe()}", *(f"warning: {w}" for w in fit.warnings)],
    )
    return cal, messages + ([f"skipped {len(ts.skipped)} rows that cannot be configured"] if ts.skipped else []) \
        + ts.notes
