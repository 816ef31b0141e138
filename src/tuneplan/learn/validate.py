"""Held-out validation: fit every learner on a training part, report on the rows held out from it,
side by side with the uncalibrated estimators. No learner ever sees a row it is evaluated on."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tuneplan.learn.intervals import (
    COMM_BOUND,
    SCALE_BUCKETS,
    THROUGHPUT_ONLY,
    conformal_bounds,
    fit_probability,
    gpu_family,
    residual_pool,
    scale_bucket,
    width_bounds,
)
from tuneplan.learn.measured import TrainingSet, training_set

SPLITS = ("random", "by-source", "by-model", "by-gpu")
LEARNER_NAMES = ("tuneplan", "kavier", "xia", "slst")
UNCALIBRATED = ("tuneplan-physics", "kavier-uncalibrated", "xia-uncalibrated", "planner")
TEST_FRACTION = 0.2
GROUP_FOLDS = 5


class LeakError(AssertionError):
    """A row was in both the training and the test part of a fold."""


@dataclass
class Fold:
    name: str
    train: TrainingSet  # everything a learner may see (with reveal: the other sources and the revealed rows)
    test: TrainingSet
    base: TrainingSet | None = None  # with reveal: the other sources only
    revealed: TrainingSet | None = None  # with reveal: the held-out source's revealed rows


def _row_keys(ts: TrainingSet) -> set[str]:
    if "id" in ts.df.columns:
        return set(ts.df["id"].astype(str))
    return {str(i) for i in range(len(ts))}


def _revealed(ts: TrainingSet, held: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k rows of a held-out source moved to training (rows with measured throughput first: they are
    what a user's first runs give), at most all but one of its rows."""
    idx = np.flatnonzero(held)
    out = np.zeros(len(held), dtype=bool)
    if (k := min(k, max(len(idx) - 1, 0))) > 0:
        measured = idx[ts.has_throughput[idx]]
        out[rng.choice(measured if len(measured) > k else idx, size=k, replace=False)] = True
    return out


def check_reveal(split: str, reveal: int) -> None:
    """`reveal` is a count of rows >= 0, and only means something with the by-source split."""
    if reveal < 0 or (reveal and split != "by-source"):
        from tuneplan.errors import InputError

        raise InputError("reveal", f"a count of rows >= 0, and only with --split by-source (got {reveal} "
                                   f"with --split {split})")


def make_folds(ts: TrainingSet, split: str, seed: int = 0, reveal: int = 0,
               test_fraction: float = TEST_FRACTION) -> list[Fold]:
    """Training and test parts. `reveal` (by-source only): that many rows of each held-out source
    join its training part (a user's first runs on a new machine) and leave its test part."""
    n = len(ts)
    rng = np.random.default_rng(seed)
    check_reveal(split, reveal)
    if split == "random":
        perm = rng.permutation(n)
        k = max(1, int(round(test_fraction * n)))
        test = np.zeros(n, dtype=bool)
        test[perm[:k]] = True
        folds = [Fold("random", ts.subset(~test), ts.subset(test))]
    elif split == "by-source":
        folds = []
        for s in sorted(set(ts.source.tolist())):
            held = ts.source == s
            moved = _revealed(ts, held, reveal, rng) if reveal else np.zeros(n, dtype=bool)
            name = f"source={s}" + (f" ({int(moved.sum())} revealed)" if reveal else "")
            folds.append(Fold(name, ts.subset(~held | moved), ts.subset(held & ~moved),
                              ts.subset(~held) if reveal else None, ts.subset(moved) if reveal else None))
    elif split in ("by-model", "by-gpu"):
        keys = np.array([c.model.name if split == "by-model" else c.gpu.name for c in ts.configs])
        groups = sorted(set(keys.tolist()))
        order = rng.permutation(len(groups))
        gfold = {groups[g]: i % GROUP_FOLDS for i, g in enumerate(order)}
        fid = np.array([gfold[k] for k in keys])
        folds = [Fold(f"{split} fold {f}", ts.subset(fid != f), ts.subset(fid == f)) for f in range(GROUP_FOLDS)
                 if (fid == f).any()]
    else:
        from tuneplan.errors import InputError

        raise InputError("split", f"unknown split '{split}'", SPLITS)
    for f in folds:
        if _row_keys(f.train) & _row_keys(f.test):
            raise LeakError(f"fold {f.name}: rows in both training and test parts")
    return folds


def _predictions(est, ts: TrainingSet, memory: bool) -> dict[str, np.ndarray]:
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs

    if len(ts) == 0:
        return {"tokens_per_s": np.array([]), "mem": np.array([]), "fits": np.array([], dtype=bool)}
    p = predict_configs(ts.configs, est, with_max_batch=False)
    return {"tokens_per_s": p["tokens_per_s"], "mem": memory_for_kind(p, ts.mem_kind) if memory else None,
            "fits": p["fits"] if memory else None, "comm_share": p["comm_share"], "fit_gib": p["fit_gib"],
            "capacity": p["capacity_gib"]}


@dataclass
class ValidationReport:
    split: str
    seed: int
    rows: pd.DataFrame  # one row per (estimator, test row): source, measured, predicted
    coverage: dict[str, float] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    interval: float = 0.8
    reveal: int = 0  # by-source: rows of each held-out source moved to its training part
    coverage_groups: list[dict] = field(default_factory=list)  # coverage_by_group of the interval rows
    reliability: list[dict] = field(default_factory=list)  # the fit probability's reliability table
    hits: list[dict] = field(default_factory=list)  # the interval and fit rows (_fold_coverage)

    @classmethod
    def of(cls, split: str, seed: int, records: list[dict], hits: list[dict], messages: list[str], interval: float,
           reveal: int) -> ValidationReport:
        """The report of the judged rows and the interval hits."""
        return cls(split=split, seed=seed, rows=pd.DataFrame(records), coverage=_coverage(hits), messages=messages,
                   interval=interval, reveal=reveal, coverage_groups=coverage_by_group(pd.DataFrame(hits)),
                   reliability=reliability(hits), hits=hits)

    def metrics(self) -> pd.DataFrame:
        out = []
        for (est, src), g in list(self.rows.groupby(["estimator", "source"])) + [
                ((e, "ALL"), g) for e, g in self.rows.groupby("estimator")]:
            t = g.dropna(subset=["measured_tokens_per_s", "pred_tokens_per_s"])
            ape = (t["pred_tokens_per_s"] / t["measured_tokens_per_s"] - 1).abs()
            m = g.dropna(subset=["measured_mem_gib", "pred_mem_gib"])
            mape = (m["pred_mem_gib"] / m["measured_mem_gib"] - 1).abs()
            f = g.dropna(subset=["pred_fits", "measured_fits"])
            pf, mf = f["pred_fits"].astype(bool), f["measured_fits"].astype(bool)
            out.append({
                "estimator": est, "source": src, "n_throughput": len(t), "throughput_mdape": float(ape.median()),
                "throughput_mape": float(ape.mean()), "within_10": float((ape <= 0.10).mean()),
                "within_25": float((ape <= 0.25).mean()), "n_memory": len(m), "memory_mdape": float(mape.median()),
                "memory_mape": float(mape.mean()), "n_fit": len(f),
                # confusion of predicted fits versus measured (OOM rows are the measured "does not fit")
                "fit_tp": int((pf & mf).sum()), "fit_fp": int((pf & ~mf).sum()), "fit_fn": int((~pf & mf).sum()),
                "fit_tn": int((~pf & ~mf).sum()), "fit_accuracy": float((pf == mf).mean()),
            })
        return pd.DataFrame(out)

    def to_dict(self) -> dict:
        m = self.metrics()
        return {"split": self.split, "seed": self.seed, "reveal": self.reveal, "interval": self.interval,
                "coverage": self.coverage, "coverage_by_group": self.coverage_groups,
                "fit_reliability": self.reliability,
                "messages": self.messages,
                "metrics": [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
                            for r in m.to_dict("records")]}


def _fold_estimators(fold: Fold, learners, raw: dict, messages: list[str], seed: int = 0
                     ) -> tuple[dict, dict, dict | None]:
    """The estimators judged on a fold: the uncalibrated ones, and each learner fitted on the fold's
    training part. With revealed rows the tuneplan learner is fitted on the other sources only and
    adapted to the revealed rows (`tuneplan.learn.adapt`: what `calibrate` does with a user's first runs),
    and the physics adapted to them is judged too."""
    from tuneplan.learn.adapt import fit_adapter
    from tuneplan.learn.learners import NotEnoughData, fit_learner

    ests = dict(raw)
    res = None
    fitted: dict = {}
    adapting = fold.revealed is not None and fold.base is not None and len(fold.revealed) > 0
    for name in learners:
        train = fold.base if (adapting and name == "tuneplan") else fold.train
        try:
            fitted[name] = ests[name] = fit_learner(name, train, f"{name} ({fold.name} training part)")
        except NotEnoughData as exc:
            messages.append(f"{fold.name}: {exc}; physics result used")
            ests[name] = raw["tuneplan-physics"]
    if adapting:
        if "tuneplan" in fitted:
            res = _training_residuals(fold, fitted["tuneplan"], seed)
            prior = res.get("throughput_by_source") if res else None
            ests["tuneplan"] = ests["tuneplan"].with_stack(fit_adapter(ests["tuneplan"], fold.revealed, prior,
                                                                       res and res.get("throughput_by_config")).adapter)
        physics = raw["tuneplan-physics"]
        ests["tuneplan-physics+adapter"] = physics.with_stack(fit_adapter(physics, fold.revealed).adapter)
    return ests, fitted, res


def _training_residuals(fold: Fold, fitted, seed: int) -> dict | None:
    """Out-of-source residuals of the tuneplan learner over the fold's training sources (what its
    calibration file would store for intervals)."""
    from tuneplan.learn.calibration import out_of_fold_residuals

    train = fold.base if fold.base is not None else fold.train
    if train.has_throughput.sum() < 20:
        return None
    return out_of_fold_residuals("tuneplan", train, seed=seed, fitted=fitted, throughput_only=True)


MEMORY_ESTIMATORS = ("tuneplan", "tuneplan-physics", "tuneplan-physics+adapter", "planner")
"""Estimators judged on peak memory too (the others borrow tuneplan's uncalibrated memory model)."""


def _fold_records(fold: Fold, ests: dict) -> list[dict]:
    test = fold.test
    records = []
    for name, est in ests.items():
        memory = name in MEMORY_ESTIMATORS
        p = _predictions(est, test, memory)
        for i in range(len(test)):
            records.append({
                "fold": fold.name, "estimator": name, "source": test.source[i],
                "id": str(test.df["id"].iloc[i]) if "id" in test.df.columns else str(i),
                "measured_tokens_per_s": test.tokens_per_s[i],
                "pred_tokens_per_s": p["tokens_per_s"][i],
                "measured_mem_gib": test.peak_mem_gib[i] if memory else np.nan,
                "pred_mem_gib": p["mem"][i] if memory else np.nan,
                "measured_fits": (False if test.is_oom[i] else (True if np.isfinite(test.peak_mem_gib[i])
                                                                 else None)) if memory else None,
                "pred_fits": bool(p["fits"][i]) if memory else None,
            })
    return records


GROUPINGS = ("source", "gpu_family", "scale", "stage", "moe")
"""What `coverage_by_group` breaks coverage down by (with "all" first)."""


def row_groups(c) -> dict[str, str]:
    """A row's coverage groups from its RowConfig: GPU family, scale bucket, stage, MoE or dense."""
    return {"gpu_family": gpu_family(c.gpu), "scale": scale_bucket(int(c.job.gpus)), "stage": str(c.job.stage),
            "moe": "moe" if c.model.is_moe else "dense"}


def _order(value) -> tuple:
    """Scale buckets in size order, other values by name."""
    labels = [label for _, label in SCALE_BUCKETS] + [scale_bucket(SCALE_BUCKETS[-1][0] + 1)]
    return (labels.index(value), "") if value in labels else (len(labels), str(value))


def coverage_by_group(hits: pd.DataFrame) -> list[dict]:
    """Coverage of interval rows (columns metric, measured, low, high and the GROUPINGS), per metric,
    overall ("all") and per value of each grouping: rows, coverage (low <= measured <= high), and the
    share of the rows above the high bound and below the low bound (coverage + above + below = 1).
    For throughput, above the high bound is tuneplan too slow; for memory, a peak underestimated."""
    out: list[dict] = []
    if "metric" in hits.columns:
        hits = hits[hits["metric"] != "fit"]
    if hits.empty:
        return out
    above = hits["measured"] > hits["high"]
    below = hits["measured"] < hits["low"]
    h = hits.assign(_above=above, _below=below, _covered=~above & ~below)
    for metric, m in h.groupby("metric", sort=True):
        for grouping in ("all", *GROUPINGS):
            parts = [("all", m)] if grouping == "all" else sorted(m.groupby(grouping), key=lambda kv: _order(kv[0]))
            for value, g in parts:
                out.append({"metric": str(metric), "group": grouping, "value": str(value), "rows": int(len(g)),
                            "coverage": float(g["_covered"].mean()), "above": float(g["_above"].mean()),
                            "below": float(g["_below"].mean())})
    return out


def _fold_coverage(fold: Fold, est, res: dict | None, interval: float, seed: int, reveal: int
                   ) -> list[dict]:
    """One interval row (metric, measured, low, high, source and row_groups) for each held-out row
    with a throughput: the tuneplan interval a calibration fitted on the fold's training part would
    carry (its width model on the row's contributions against the fold's training rows, else conformal
    from its own out-of-source residuals; with reveal, as adapted_residuals narrows them). Memory rows
    too where those residuals hold memory ones, and a "fit" row (the fit probability, and whether the
    row ran) for each row with a measured peak or OOM where there is a memory width model."""
    from tuneplan.learn.calibration import adapted_residuals, row_flags
    if res is None:
        return []
    res = adapted_residuals(res, {"throughput": reveal}, seed) if reveal else res
    if len(res["throughput"]) < 10:
        return []
    test = fold.test
    width = res.get("width") or {}
    mem = res.get("memory")
    judge_mem = mem is not None and len(mem) >= 5
    p = _predictions(est, test, judge_mem)
    flags = row_flags(test, width.get("covered")) if width else [{}] * len(test)
    mflags = [{k: v for k, v in f.items() if k not in THROUGHPUT_ONLY} for f in flags]

    def bounds(metric: str, i: int, pool) -> tuple[float, float]:
        if metric in width:
            f = {**flags[i], **({"comm": ""} if p["comm_share"][i] > COMM_BOUND else {})} \
                if metric == "throughput" else mflags[i]
            return width_bounds(width[metric], f, interval)[:2]
        return conformal_bounds(pool, interval)

    out = []
    for i in np.flatnonzero(test.has_throughput):
        lo, hi = bounds("throughput", i, residual_pool(res, test.configs[i].job.framework)[0])
        out.append({"metric": "throughput", "source": str(test.source[i]), **row_groups(test.configs[i]),
                    "measured": float(test.tokens_per_s[i]), "low": float(p["tokens_per_s"][i] * lo),
                    "high": float(p["tokens_per_s"][i] * hi)})
    if judge_mem:
        for i in np.flatnonzero(np.isfinite(test.peak_mem_gib) & np.isfinite(p["mem"])):
            lo, hi = bounds("memory", i, mem)
            out.append({"metric": "memory", "source": str(test.source[i]), **row_groups(test.configs[i]),
                        "measured": float(test.peak_mem_gib[i]), "low": float(p["mem"][i] * lo),
                        "high": float(p["mem"][i] * hi)})
    if judge_mem and "memory" in width:
        for i in np.flatnonzero(np.isfinite(test.peak_mem_gib) | test.is_oom):
            out.append({"metric": "fit", "source": str(test.source[i]), "ran": not bool(test.is_oom[i]),
                        "probability": fit_probability(width["memory"], mflags[i], float(p["fit_gib"][i]),
                                                       float(p["capacity"][i]))})
    return out


RELIABILITY_BINS = 10  # Equal-width bins of the fit probability in the reliability table.


def reliability(hits: list[dict]) -> list[dict]:
    """The fit probability's reliability table: per bin of the probability given, the rows, the mean
    probability and the share of them that ran (calibrated: the two agree)."""
    fit = [(h["probability"], h["ran"]) for h in hits if h["metric"] == "fit"]
    out = []
    for b in range(RELIABILITY_BINS):
        lo, hi = b / RELIABILITY_BINS, (b + 1) / RELIABILITY_BINS
        g = [(q, ran) for q, ran in fit if lo <= q < hi or (b == RELIABILITY_BINS - 1 and q == 1.0)]
        if g:
            out.append({"low": lo, "high": hi, "rows": len(g), "probability": float(np.mean([q for q, _ in g])),
                        "ran": float(np.mean([ran for _, ran in g]))})
    return out


def _coverage(hits: list[dict]) -> dict[str, float]:
    """Throughput coverage overall and per source (the keys "tuneplan" and "tuneplan source=S")."""
    t = [(h["source"], h["low"] <= h["measured"] <= h["high"]) for h in hits if h["metric"] == "throughput"]
    coverage: dict[str, float] = {}
    if t:
        coverage["tuneplan"] = float(np.mean([c for _, c in t]))
        for src in sorted({s for s, _ in t}):
            coverage[f"tuneplan source={src}"] = float(np.mean([c for s, c in t if s == src]))
    return coverage


def _memory_note(hits: list[dict], ts: TrainingSet) -> list[str]:
    """Say so when held-out peaks were measured but no memory interval was there to judge them by."""
    if any(h["metric"] == "memory" for h in hits) or not hits:
        return []
    n = int(np.isfinite(ts.peak_mem_gib).sum())
    return [f"memory interval coverage not reported: the intervals fitted inside the folds are throughput "
            f"only (no memory residuals), so the {n} rows with a measured peak have no interval to judge"]


def validate(df: pd.DataFrame, split: str = "random", seed: int = 0, learners=LEARNER_NAMES,
             interval: float = 0.8, progress=None, reveal: int = 0,
             test_fraction: float = TEST_FRACTION) -> ValidationReport:
    """Every learner fitted on each fold's training part and judged on its test part. Nested: every
    choice a learner makes (its constants' pulls, its residual trees' size and shares) is made inside
    its fit, on the training sources alone; nothing is chosen on the test part reported here."""
    from tuneplan.estimators.base import get_estimator

    ts = training_set(df)
    folds = make_folds(ts, split, seed, reveal, test_fraction)
    records: list[dict] = []
    messages: list[str] = []
    hits: list[dict] = []
    raw = {"tuneplan-physics": get_estimator("tuneplan", "none"), "kavier-uncalibrated": get_estimator("kavier"),
           "xia-uncalibrated": get_estimator("xia"), "planner": get_estimator("planner")}
    for fold in folds:
        if progress:
            progress(fold.name)
        if len(fold.test) == 0:
            continue
        ests, fitted, res = _fold_estimators(fold, learners, raw, messages, seed)
        records.extend(_fold_records(fold, ests))
        if "tuneplan" in fitted:
            if res is None:
                res = _training_residuals(fold, fitted["tuneplan"], seed)
            hits.extend(_fold_coverage(fold, ests["tuneplan"], res, interval, seed, reveal))
    if ts.skipped:
        messages.append(f"{len(ts.skipped)} rows could not be configured and were left out")
    messages.extend(ts.notes)
    messages.extend(_memory_note(hits, ts))
    return ValidationReport.of(split, seed, records, hits, messages, interval, reveal)


def by_source_reveals(df: pd.DataFrame, reveals=(0, 3, 5), seed: int = 0, interval: float = 0.8,
                      progress=None) -> dict[int, ValidationReport]:
    """`validate --split by-source --reveal k` for several k at the cost of one: each held-out source's
    tuneplan learner is fitted once on the other sources (its fit never depends on the revealed rows) and
    adapted to k revealed rows for each k (k = 0: the plain by-source validation). The revealed rows are
    the same as `validate`'s for that k and seed."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.adapt import fit_adapter
    from tuneplan.learn.learners import NotEnoughData, fit_learner

    ts = training_set(df)
    physics = get_estimator("tuneplan", "none")
    out: dict[int, tuple[list, list]] = {k: ([], []) for k in reveals}
    folds_by_k = {k: make_folds(ts, "by-source", seed, k) for k in reveals}
    for i, src in enumerate(sorted(set(ts.source.tolist()))):
        if progress:
            progress(f"source={src}")
        base_ts = ts.subset(ts.source != src)
        try:
            learner = fitted = fit_learner("tuneplan", base_ts, f"tuneplan (without {src})")
        except NotEnoughData:
            learner, fitted, res = None, physics, None
        else:
            holder = Fold(f"source={src}", base_ts, ts.subset(ts.source == src), base_ts, None)
            res = _training_residuals(holder, learner, seed)
        prior = res.get("throughput_by_source") if res else None
        for k in reveals:
            fold = folds_by_k[k][i]
            if len(fold.test) == 0:
                continue
            ests = {"tuneplan-physics": physics, "tuneplan": fitted}
            if k and fold.revealed is not None and len(fold.revealed):
                ests["tuneplan"] = fitted.with_stack(fit_adapter(fitted, fold.revealed, prior,
                                                                 res and res.get("throughput_by_config")).adapter)
                ests["tuneplan-physics+adapter"] = physics.with_stack(fit_adapter(physics, fold.revealed).adapter)
            out[k][0].extend(_fold_records(fold, ests))
            out[k][1].extend(_fold_coverage(fold, ests["tuneplan"], res, interval, seed, k))
    return {k: ValidationReport.of("by-source", seed, records, hits, _memory_note(hits, ts), interval, k)
            for k, (records, hits) in out.items()}
