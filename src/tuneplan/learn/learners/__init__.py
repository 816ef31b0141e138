"""The learners by name, fitted on a training set of measured runs: this module builds each one's X and
y from the runs (the physics' arrays of the rows that have a throughput, and that throughput) and fits.

- `tuneplan`: the physics' named constants fitted on log-error with an L2 pull to their priors, then a
  gradient-boosted correction on the log-residuals (`TuneplanLearner`, which builds the estimator).
- `kavier`, `xia`, `slst`: the estimators themselves fit (`tuneplan.estimators.kavier`, `.xia`, `.slst`:
  scikit-learn's contract, `fit(X, y) -> self` with fitted attributes ending in `_`).
"""

from __future__ import annotations

import numpy as np

from tuneplan.estimators.residual_fit import (
    CAPACITY_GRID,
    MIN_ROWS,
    NotEnoughData,
    fit_residual,
    group_out_predictions,
    source_weights,
    weighted_median,
)
from tuneplan.learn.learners.tuneplan import TuneplanLearner

LEARNER_NAMES = ("tuneplan", "kavier", "xia", "slst")


def throughput_rows(ts, xia: bool = False) -> tuple[dict, np.ndarray]:
    """(X, y) of a training set's rows with a measured throughput: the physics' arrays of the rows (with
    their datasets as `_datasets` for xia, whose coefficients are per dataset) and their tokens/s."""
    from tuneplan.learn.dataset import arrays_for

    idx = np.flatnonzero(ts.has_throughput)
    if len(idx) < MIN_ROWS:  # the estimator's fit says so, without arrays of too few rows
        return {}, ts.tokens_per_s[idx]
    X = arrays_for([ts.configs[i] for i in idx])
    if xia:
        ds = ts.df["dataset"].iloc[idx] if "dataset" in ts.df.columns else [None] * len(idx)
        X["_datasets"] = np.array(["*" if (s := str(d or "*")) == "nan" else s for d in ds], dtype=object)
    return X, ts.tokens_per_s[idx]


def fit_learner(name: str, ts, label: str = "fitted"):
    """(fitted, estimator): the learner `name` fitted on a training set (what its calibration file stores,
    `fitted.payload()`) and the estimator it predicts with (named `label`); the same object but for tuneplan."""
    if name == "tuneplan":
        learner = TuneplanLearner().fit(ts)
        return learner, learner.estimator(label)
    from tuneplan.estimators.registry import estimator_class

    X, y = throughput_rows(ts, xia=name == "xia")
    est = estimator_class(name)(calibration_name=label)
    if name == "slst":  # its residual's shares are chosen on held-out sources
        est.fit(X, y, groups=ts.source[ts.has_throughput])
    else:
        est.fit(X, y)
    return est, est


__all__ = ["CAPACITY_GRID", "LEARNER_NAMES", "MIN_ROWS", "NotEnoughData", "TuneplanLearner", "fit_learner",
           "fit_residual", "group_out_predictions", "source_weights", "weighted_median", "throughput_rows"]
