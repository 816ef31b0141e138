"""The learners by name, fitted on a training set of measured runs: this module builds each one's X and
y from the runs and the estimator fits itself (scikit-learn's contract, `fit(X, y) -> self`, fitted
attributes ending in `_`; `tuneplan.estimators`):

- `tuneplan`: the physics' named constants fitted on log-error with an L2 pull to their priors, then a
  gradient-boosted correction on the log-residuals (X: the arrays of every row, y: tokens/s and peak
  memory, NaN where not measured).
- `kavier`, `xia`, `slst`: the seeds' own calibrations (X: the arrays of the rows with a throughput, y:
  their tokens/s).
"""

from __future__ import annotations

import numpy as np

from tuneplan.estimators.residual_fit import MIN_ROWS, NotEnoughData

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


def tuneplan_rows(ts) -> tuple[dict, np.ndarray, np.ndarray]:
    """(X, y, groups) of a training set for the tuneplan estimator: the physics' arrays of every row with
    what each measured peak counts (`_mem_kinds`), their (tokens/s, peak GiB) with NaN where not
    measured, and their sources."""
    from tuneplan.learn.dataset import arrays_for

    X = arrays_for(ts.configs) if len(ts) else {}
    X["_mem_kinds"] = list(ts.mem_kind)
    return X, np.column_stack([ts.tokens_per_s, ts.peak_mem_gib]), ts.source


def fit_learner(name: str, ts, label: str = "fitted", **options):
    """The estimator `name` fitted on a training set, named `label` (`options`: the tuneplan estimator's
    fitting options). NotEnoughData when the set has too few rows."""
    from tuneplan.estimators.registry import estimator_class

    est = estimator_class(name)(calibration_name=label, **options)
    if name == "tuneplan":
        return est.fit(*tuneplan_rows(ts))
    X, y = throughput_rows(ts, xia=name == "xia")
    if name == "slst":  # its residual's shares are chosen on held-out sources
        est.fit(X, y, groups=ts.source[ts.has_throughput])
    else:
        est.fit(X, y)
    return est


__all__ = ["LEARNER_NAMES", "NotEnoughData", "fit_learner", "throughput_rows", "tuneplan_rows"]
