"""Held-out validation: fit every learner on a training part, report on the rows held out from it,
side by side with the uncalibrated estimators. No learner ever sees a row it is evaluated on."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

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
    train: TrainingSet
    test: TrainingSet


def _row_keys(ts: TrainingSet) -> set[str]:
    if "id" in ts.df.columns:
        return set(ts.df["id"].astype(str))
    return {str(i) for i in range(len(ts))}


def _revealed(ts: TrainingSet, held: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k rows of a held-out source moved to training (rows with measured throughput first: they are
    what a user's first runs give), at most all but one of its rows."""
    idx = np.flatnonzero(held)
    k = min(k, max(len(idx) - 1, 0))
    if k <= 0:
        return np.zeros(len(held), dtype=bool)
    measured = idx[ts.has_throughput[idx]]
    pool = measured if len(measured) > k else idx
    out = np.zeros(len(held), dtype=bool)
    out[rng.choice(pool, size=k, replace=False)] = True
    return out


def check_reveal(split: str, reveal: int) -> None:
    """`reveal` is a count of rows >= 0, and only means something with the by-source split."""
    if reveal < 0 or (reveal and split != "by-source"):
        from tuneplan.errors import InputError

        raise InputError("reveal", f"a count of rows >= 0, and only with --split by-source (got {reveal} "
                                   f"with --split {split})")


def make_folds(ts: TrainingSet, split: str, seed: int = 0, reveal: int = 0) -> list[Fold]:
    """Training and test parts. `reveal` (by-source only): that many rows of each held-out source
    join its training part (a user's first runs on a new machine) and leave its test part."""
    n = len(ts)
    rng = np.random.default_rng(seed)
    check_reveal(split, reveal)
    if split == "random":
        perm = rng.permutation(n)
        k = max(1, int(round(TEST_FRACTION * n)))
        test = np.zeros(n, dtype=bool)
        test[perm[:k]] = True
        folds = [Fold("random", ts.subset(~test), ts.subset(test))]
    elif split == "by-source":
        folds = []
        for s in sorted(set(ts.source.tolist())):
            held = ts.source == s
            moved = _revealed(ts, held, reveal, rng) if reveal else np.zeros(n, dtype=bool)
            name = f"source={s}" + (f" ({int(moved.sum())} revealed)" if reveal else "")
            folds.append(Fold(name, ts.subset(~held | moved), ts.subset(held & ~moved)))
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
            "fits": p["fits"] if memory else None}


@dataclass
class ValidationReport:
    split: str
    seed: int
    rows: pd.DataFrame  # one row per (estimator, test row): source, measured, predicted
    coverage: dict[str, float] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    interval: float = 0.8
    reveal: int = 0  # by-source: rows of each held-out source moved to its training part

    def metrics(self) -> pd.DataFrame:
        out = []
        for (est, src), g in list(self.rows.groupby(["estimator", "source"])) + [
                ((e, "ALL"), g) for e, g in self.rows.groupby("estimator")]:
            t = g.dropna(subset=["measured_tokens_per_s", "pred_tokens_per_s"])
            ape = (t["pred_tokens_per_s"] / t["measured_tokens_per_s"] - 1).abs()
            m = g.dropna(subset=["measured_mem_gib", "pred_mem_gib"])
            mape = (m["pred_mem_gib"] / m["measured_mem_gib"] - 1).abs()
            f = g.dropna(subset=["pred_fits", "measured_fits"])
            out.append({
                "estimator": est, "source": src, "n_throughput": len(t),
                "throughput_mdape": float(ape.median()) if len(t) else np.nan,
                "throughput_mape": float(ape.mean()) if len(t) else np.nan,
                "within_10": float((ape <= 0.10).mean()) if len(t) else np.nan,
                "within_25": float((ape <= 0.25).mean()) if len(t) else np.nan,
                "n_memory": len(m), "memory_mdape": float(mape.median()) if len(m) else np.nan,
                "memory_mape": float(mape.mean()) if len(m) else np.nan,
                "n_fit": len(f),
                # confusion of predicted fits versus measured (OOM rows are the measured "does not fit")
                "fit_tp": int((f["pred_fits"].astype(bool) & f["measured_fits"].astype(bool)).sum()),
                "fit_fp": int((f["pred_fits"].astype(bool) & ~f["measured_fits"].astype(bool)).sum()),
                "fit_fn": int((~f["pred_fits"].astype(bool) & f["measured_fits"].astype(bool)).sum()),
                "fit_tn": int((~f["pred_fits"].astype(bool) & ~f["measured_fits"].astype(bool)).sum()),
                "fit_accuracy": float((f["pred_fits"].astype(bool) == f["measured_fits"].astype(bool)).mean())
                if len(f) else np.nan,
            })
        return pd.DataFrame(out)

    def to_dict(self) -> dict:
        m = self.metrics()
        return {"split": self.split, "seed": self.seed, "reveal": self.reveal, "interval": self.interval,
                "coverage": self.coverage,
                "messages": self.messages,
                "metrics": [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
                            for r in m.to_dict("records")]}


def validate(df: pd.DataFrame, split: str = "random", seed: int = 0, learners=LEARNER_NAMES,
             interval: float = 0.8, progress=None, reveal: int = 0) -> ValidationReport:
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.calibration import out_of_fold_residuals
    from tuneplan.learn.intervals import conformal_bounds
    from tuneplan.learn.learners import LEARNERS, NotEnoughData

    ts = training_set(df)
    folds = make_folds(ts, split, seed, reveal)
    records: list[dict] = []
    messages: list[str] = []
    cover_hits: dict[str, list[bool]] = {}
    raw = {"tuneplan-physics": get_estimator("tuneplan", "none"), "kavier-uncalibrated": get_estimator("kavier"),
           "xia-uncalibrated": get_estimator("xia"), "planner": get_estimator("planner")}
    for fold in folds:
        if progress:
            progress(fold.name)
        test = fold.test
        if len(test) == 0:
            continue
        ests = dict(raw)
        learner_objs: dict = {}
        for name in learners:
            try:
                learner_objs[name] = LEARNERS[name]().fit(fold.train)
                ests[name] = learner_objs[name].estimator(f"{name} ({fold.name} training part)")
            except NotEnoughData as exc:
                messages.append(f"{fold.name}: {exc}; physics result used")
                ests[name] = raw["tuneplan-physics"]
        for name, est in ests.items():
            memory = name in ("tuneplan", "tuneplan-physics", "planner")
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
        # interval coverage for the default learner: conformal bounds from cross-fitted training residuals
        if "tuneplan" in learners and fold.train.has_throughput.sum() >= 20:
            fitted = learner_objs.get("tuneplan")
            res = out_of_fold_residuals("tuneplan", fold.train, seed=seed, fitted=fitted, throughput_only=True)
            if len(res["throughput"]) >= 10:
                lo, hi = conformal_bounds(np.asarray(res["throughput"]), interval)
                p = _predictions(ests["tuneplan"], test, False)["tokens_per_s"]
                ok = test.has_throughput
                ratio = test.tokens_per_s[ok] / p[ok]
                cover_hits.setdefault("tuneplan", []).extend(((ratio >= lo) & (ratio <= hi)).tolist())
    rows = pd.DataFrame(records)
    coverage = {k: float(np.mean(v)) for k, v in cover_hits.items() if v}
    if ts.skipped:
        messages.append(f"{len(ts.skipped)} rows could not be configured and were left out")
    messages.extend(ts.notes)
    return ValidationReport(split=split, seed=seed, rows=rows, coverage=coverage, messages=messages,
                            interval=interval, reveal=reveal)
