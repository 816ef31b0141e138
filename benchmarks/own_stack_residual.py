"""How a user's own-stack throughput correction is made: the design comparison behind
`estimators.residual_fit.NEIGHBOUR_SHARE`, on 70/30 random splits of one source (seeds 0-4).

On each split the tuneplan learner's constants are fitted on the training part (its trees left out),
and the residual log-errors of the training rows are corrected by: nothing; the boosted trees alone
(`fit_residual`, their size chosen on random folds of the training rows); the nearest training row's
residual (1 row, or the median of 3); one of those chosen inside the fit on random folds of the training
rows; or the mean of the trees' and the nearest 1 or 3 rows'. Printed: MdAPE of the held-out throughput
per seed and the mean. The rows are the source's rows with a throughput (a harness of the learner's
parts, not `tuneplan validate`, which splits every row).

    python benchmarks/own_stack_residual.py llm-foundry megatron-bridge tuneplan-h200 nemo ms-swift xtuner
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from pathlib import Path

import numpy as np

from tuneplan.estimators import residual_fit as rf
from tuneplan.estimators.features import THROUGHPUT_FEATURES, feature_matrix
from tuneplan.estimators.residual_fit import CAPACITY_GRID, fit_residual, group_out_predictions
from tuneplan.learn.dataset import arrays_for
from tuneplan.learn.learners import fit_learner
from tuneplan.learn.measured import training_set
from tuneplan.learn.validate import make_folds
from tuneplan.runs.io import read_runs

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "reference" / "runs"


def _path(source: str) -> Path:
    own = REPO / "reference" / "runs" / f"{source}.csv"
    return own if own.exists() else SHARED / f"{source}.csv"


def _features(est, t):
    a = arrays_for(t.configs)
    out = est.physics(a)
    return feature_matrix(a, out, THROUGHPUT_FEATURES), out["tokens_per_step"] / out["step_s"]


def _nearest(Xtr, rtr, Xte, k, span):
    d = np.nansum(np.abs(Xte[:, None, :] - Xtr[None, :, :]) / span, axis=2)
    return np.median(rtr[np.argsort(d, axis=1, kind="stable")[:, :k]], axis=1)


def _inner_choice(Xtr, rtr, span) -> tuple:
    """Trees (each size), nearest 1 or 3 rows, or nothing: the lowest median absolute log error on five
    random folds of the training rows."""
    folds = np.random.default_rng(1).permutation(len(rtr)) % 5
    scores = {("trees", i): np.median(np.abs(rtr - group_out_predictions(Xtr, rtr, folds, capacity=c)))
              for i, c in enumerate(CAPACITY_GRID)}
    for k in (1, 3):
        p = np.zeros(len(rtr))
        for g in range(5):
            m = folds == g
            p[m] = _nearest(Xtr[~m], rtr[~m], Xtr[m], k, span)
        scores[("nearest", k)] = np.median(np.abs(rtr - p))
    scores[("none", 0)] = np.median(np.abs(rtr))
    return min(scores, key=scores.get)


def compare(source: str, seeds=range(5)) -> dict[str, list[float]]:
    with contextlib.redirect_stderr(io.StringIO()):
        ts = training_set(read_runs([str(_path(source))]).df)
    ts = ts.subset(ts.has_throughput)
    saved = rf.MIN_RESIDUAL_ROWS
    rf.MIN_RESIDUAL_ROWS = 10**9  # the learner's constants alone; the corrections are made below
    res: dict[str, list[float]] = {}
    try:
        for seed in seeds:
            fold = make_folds(ts, "random", seed=seed, test_fraction=0.3)[0]
            est = fit_learner("tuneplan", fold.train)
            Xtr, ptr = _features(est, fold.train)
            Xte, pte = _features(est, fold.test)
            rtr = np.log(fold.train.tokens_per_s / ptr)
            span = np.maximum(np.nanmax(Xtr, 0) - np.nanmin(Xtr, 0), 1e-9)
            y = fold.test.tokens_per_s

            def score(r, y=y, pte=pte):
                return float(np.median(np.abs(pte * np.exp(r) / y - 1)) * 100)

            trees = fit_residual(Xtr, rtr, THROUGHPUT_FEATURES, fold.train.source)
            rt = trees(Xte)[0]
            near = {k: _nearest(Xtr, rtr, Xte, k, span) for k in (1, 3)}
            kind, arg = _inner_choice(Xtr, rtr, span)
            chosen = (0.0 if kind == "none" else near[arg] if kind == "nearest" else
                      fit_residual(Xtr, rtr, THROUGHPUT_FEATURES, fold.train.source,
                                   fixed=(1.0, 1.0, 1.0, CAPACITY_GRID[arg]))(Xte)[0])
            for name, r in (("none", 0.0), ("trees", rt), ("nearest 1", near[1]), ("nearest 3", near[3]),
                            ("chosen in the fit", chosen), ("mean of trees and nearest 1", 0.5 * rt + 0.5 * near[1]),
                            ("mean of trees and nearest 3", 0.5 * rt + 0.5 * near[3])):
                res.setdefault(name, []).append(score(r))
    finally:
        rf.MIN_RESIDUAL_ROWS = saved
    return res


def main(argv: list[str]) -> None:
    warnings.filterwarnings("ignore")
    missing = [s for s in argv if not _path(s).exists()]
    if missing:
        known = sorted({p.stem for d in (SHARED, REPO / "reference" / "runs") for p in d.glob("*.csv")})
        print(f"error: source: no runs file for {', '.join(missing)}; known: {', '.join(known)}", file=sys.stderr)
        sys.exit(2)
    for source in argv or ["llm-foundry", "megatron-bridge", "tuneplan-h200", "nemo", "ms-swift", "xtuner"]:
        for name, v in compare(source).items():
            print(f"{source:16s} {name:28s} {' '.join(f'{x:5.1f}' for x in v)}  mean {np.mean(v):5.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
