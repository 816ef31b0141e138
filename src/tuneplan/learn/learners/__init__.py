"""The learners, one fit/predict contract (scikit-learn style): `fit(training_set)`, then
`estimator()` gives an estimator with `predict_arrays`; `payload()` is what a calibration file
stores, read back by the estimator's own `from_payload` (so estimating never imports this module).

- `tuneplan`: fit the physics' named constants (efficiency curve, overheads, communication,
  dequantisation; memory overheads) on log-error with an L2 pull to their priors, then a
  gradient-boosted correction on the log-residuals over physical features, shrunk back toward the
  physics outside the range it was trained on.
- `kavier`: the Kavier seed's two tiers — global scales by Powell with an L2 pull toward 1 (weight
  chosen on a validation split), then per (model, method, GPU, count) median ratios.
- `xia`: Eq. (2) fitted per (model, GPU, dataset) with scipy.
- `slst`: a scaling law in parameters, tokens and the other size variables, then gradient boosting
  on its log-residuals (the SLST seed).
"""

from tuneplan.learn.learners.kavier import KavierLearner
from tuneplan.learn.learners.residual_fit import (
    CAPACITY_GRID,
    MIN_ROWS,
    NotEnoughData,
    fit_residual,
    group_out_predictions,
    source_weights,
    weighted_median,
)
from tuneplan.learn.learners.slst import SLSTLearner
from tuneplan.learn.learners.tuneplan import TuneplanLearner
from tuneplan.learn.learners.xia import XiaLearner

LEARNERS = {"tuneplan": TuneplanLearner, "kavier": KavierLearner, "xia": XiaLearner, "slst": SLSTLearner}

__all__ = ["CAPACITY_GRID", "LEARNERS", "MIN_ROWS", "KavierLearner", "NotEnoughData", "SLSTLearner", "TuneplanLearner",
           "XiaLearner", "fit_residual", "group_out_predictions", "source_weights", "weighted_median"]
