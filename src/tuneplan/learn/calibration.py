"""Fitting calibration files: a learner fitted on measured runs, with held-out residuals for the
intervals. The file format itself (and reading it back) is `tuneplan.estimators.calibration`."""

from __future__ import annotations

import numpy as np

from tuneplan.errors import InputError
from tuneplan.estimators.calibration import Calibration

CV_FOLDS = 5
"""Out-of-fold residuals for intervals: each row predicted by a learner fitted without its fold."""


# ---- fitting -----------------------------------------------------------------------------------

def _estimator_log_ratios(est, ts) -> dict[str, np.ndarray]:
    """log(measured / predicted) for throughput and memory on a training set."""
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs

    pred = predict_configs(ts.configs, est, with_max_batch=False)
    out: dict[str, np.ndarray] = {}
    t = ts.has_throughput
    out["throughput"] = np.log(ts.tokens_per_s[t] / pred["tokens_per_s"][t])
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
    fits reuse its residual shares and a smaller least-squares budget."""
    from tuneplan.learn.learners import LEARNERS, NotEnoughData, TuneplanLearner

    n = len(ts)
    sources = sorted(set(ts.source.tolist()))
    if len(sources) >= 3:
        keys = np.array([sources.index(s) for s in ts.source])
    else:
        keys = np.random.default_rng(seed).permutation(n) % folds
    thr: dict[str, list[float]] = {}
    mem: dict[str, list[float]] = {}
    if throughput_only and learner_name == "tuneplan":
        ts = ts.subset(ts.has_throughput)
        sources = sorted(set(ts.source.tolist()))
        keys = (np.array([sources.index(s) for s in ts.source]) if len(sources) >= 3
                else np.random.default_rng(seed).permutation(len(ts)) % folds)
    for k in sorted(set(keys.tolist())):
        train, test = ts.subset(keys != k), ts.subset(keys == k)
        try:
            if learner_name == "tuneplan" and isinstance(fitted, TuneplanLearner):
                learner = TuneplanLearner(max_nfev=40, shrink=fitted.shrinks(), memory=not throughput_only)
            else:
                learner = LEARNERS[learner_name]()
            est = learner.fit(train).estimator()
        except NotEnoughData:
            continue
        r = _estimator_log_ratios(est, test)
        thr.setdefault(str(k), []).extend(r["throughput"].tolist())
        if "memory" in r:
            mem.setdefault(str(k), []).extend(r["memory"].tolist())
    balanced = len(sources) >= 3
    out = {"throughput": balanced_residuals(thr, balanced)}
    m = balanced_residuals(mem, balanced)
    if m:
        out["memory"] = m
    return out


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
    out: list[float] = []
    for g in groups:
        k = min(len(g), BALANCED_POINTS)
        out.extend(float(x) for x in np.quantile(g, (np.arange(k) + 0.5) / k))
    return sorted(out)


def fit_calibration(df, learner: str = "tuneplan", name: str = "") -> tuple[Calibration, list[str]]:
    """Fit a learner on every usable row of a runs table; returns the calibration and messages."""
    from tuneplan import __version__
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.learners import LEARNERS
    from tuneplan.learn.measured import training_set

    if learner not in LEARNERS:
        raise InputError("learner", f"unknown learner '{learner}'", sorted(LEARNERS))
    ts = training_set(df)
    obj = LEARNERS[learner]().fit(ts)  # NotEnoughData propagates: the caller says so and keeps the physics
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
        name=name or learner, notes=list(getattr(obj, "notes", [])),
    )
    return cal, ([f"skipped {len(ts.skipped)} rows that cannot be configured"] if ts.skipped else []) + ts.notes
