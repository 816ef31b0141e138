"""Applying a fitted residual model (numpy only, no scikit-learn): the boosted correction on
log-residuals, shrunk back toward the physics outside the range it was trained on."""

from __future__ import annotations

import numpy as np

from tuneplan.learn.features import MEMORY_FEATURES, THROUGHPUT_FEATURES, feature_matrix
from tuneplan.learn.trees import Forest

EXTRAPOLATION_DECAY = 4.0
"""How fast the correction fades outside the training range: weight = exp(-4 x summed excess,
each feature's excess measured in units of its training span)."""


class Residual:
    """A boosted correction on log-residuals, shrunk toward 0 outside the training range."""

    def __init__(self, model: dict, lo: list[float], hi: list[float], shrink: float = 1.0) -> None:
        self.model = model
        self.forest = Forest(model)
        self.lo = np.asarray(lo, dtype=float)
        self.hi = np.asarray(hi, dtype=float)
        self.shrink = float(shrink)  # share of the correction that transfers to unseen sources (fitted)

    def __call__(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.shrink == 0.0:  # the correction does not transfer: nothing to evaluate
            return np.zeros(len(X)), np.zeros(len(X))
        raw = self.forest.predict(X)
        span = np.maximum(self.hi - self.lo, 1e-9)
        excess = (np.maximum(self.lo - X, 0.0) + np.maximum(X - self.hi, 0.0)) / span
        weight = np.exp(-np.nansum(excess, axis=1) * EXTRAPOLATION_DECAY) * self.shrink
        return raw * weight, weight

    def to_dict(self) -> dict:
        return {"model": self.model, "lo": self.lo.tolist(), "hi": self.hi.tolist(), "shrink": self.shrink}

    @classmethod
    def from_dict(cls, d: dict) -> Residual:
        return cls(d["model"], d["lo"], d["hi"], d.get("shrink", 1.0))


class TuneplanCorrection:
    """What TuneplanEstimator calls: throughput and memory factors from the residual models."""

    def __init__(self, thr: Residual | None, mem: Residual | None) -> None:
        self.thr = thr
        self.mem = mem

    def correct(self, a: dict, out: dict):
        n = len(out["step_s"])
        thr_f = np.ones(n)
        mem_f = np.ones(n)
        info: dict = {}
        if self.thr is not None:
            r, w = self.thr(feature_matrix(a, out, THROUGHPUT_FEATURES))
            thr_f = np.exp(r)
            info["residual_weight"] = w
            info["extrapolated"] = w < 0.5
        if self.mem is not None:
            r, w = self.mem(feature_matrix(a, out, MEMORY_FEATURES))
            mem_f = np.exp(r)
            info["memory_residual_weight"] = w
        return thr_f, mem_f, info


def tuneplan_estimator_from_payload(payload: dict, name: str):
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
    from tuneplan.physics.constants import PhysicsConstants

    thr = Residual.from_dict(payload["throughput_residual"]) if payload.get("throughput_residual") else None
    mem = Residual.from_dict(payload["memory_residual"]) if payload.get("memory_residual") else None
    corr = TuneplanCorrection(thr, mem) if (thr or mem) else None
    return TuneplanEstimator(PhysicsConstants.from_dict(payload["constants"]), corr, calibration_name=name)
