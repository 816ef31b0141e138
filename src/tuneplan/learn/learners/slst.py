"""The SLST seed's learner: a log-linear scaling law (ridge), then boosted trees on its log-residuals."""

from __future__ import annotations

import numpy as np

from tuneplan.estimators.residual import Residual
from tuneplan.estimators.slst import SLST_GB_FEATURES, SLST_LAW_FEATURES, SLSTEstimator, slst_features
from tuneplan.learn.dataset import arrays_for
from tuneplan.learn.learners.residual_fit import (
    MIN_RESIDUAL_ROWS,
    MIN_ROWS,
    NotEnoughData,
    _log,
    fit_residual,
)
from tuneplan.learn.measured import TrainingSet


class SLSTLearner:
    name = "slst"

    def __init__(self) -> None:
        self.coef: np.ndarray | None = None
        self.residual: Residual | None = None

    def fit(self, ts: TrainingSet) -> SLSTLearner:
        mask = ts.has_throughput
        if mask.sum() < MIN_ROWS:
            raise NotEnoughData(f"slst learner: {int(mask.sum())} throughput rows; at least {MIN_ROWS} needed")
        a = arrays_for([ts.configs[i] for i in np.flatnonzero(mask)])
        tokens = a["micro_batch"] * a["seq_len"] * a["grad_accum"] * a["dp"]
        y = _log(tokens / ts.tokens_per_s[mask])  # log step time
        X = slst_features(a, SLST_LAW_FEATURES)
        A = np.column_stack([np.ones(len(y)), X])
        ridge = 1e-3 * np.eye(A.shape[1])
        ridge[0, 0] = 0.0
        self.coef = np.linalg.solve(A.T @ A + ridge, A.T @ y)
        if mask.sum() >= MIN_RESIDUAL_ROWS:
            r = y - A @ self.coef
            self.residual = fit_residual(slst_features(a, SLST_GB_FEATURES), r, SLST_GB_FEATURES,
                                         ts.source[mask])
        return self

    def estimator(self, name: str | None = None):
        return SLSTEstimator(self.coef, self.residual, calibration_name=name or "fitted")

    def payload(self) -> dict:
        return {"law_features": list(SLST_LAW_FEATURES), "coef": [float(c) for c in self.coef],
                "residual": self.residual.to_dict() if self.residual else None}
