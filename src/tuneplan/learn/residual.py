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
    """A boosted correction on log-residuals. How much of it applies depends on where a configuration
    lies: near the measurements of a source it was trained on (inside a source's feature box) the
    `near` share, far from all of them the `far` share, fading between them with the distance to the
    nearest box (scale `tau`); both shares and `tau` are chosen on held-out sources and folds. Outside
    the whole training range the correction fades to nothing."""

    def __init__(self, model: dict, lo: list[float], hi: list[float], shrink: float = 1.0,
                 near: float | None = None, tau: float = 1.0, boxes: list | None = None) -> None:
        self.model = model
        self.forest = Forest(model)
        self.lo = np.asarray(lo, dtype=float)
        self.hi = np.asarray(hi, dtype=float)
        self.shrink = float(shrink)  # share kept far from every source's measurements
        self.near = float(shrink if near is None else near)  # share kept among a source's measurements
        self.tau = float(tau)
        self.boxes = [(np.asarray(b[0], dtype=float), np.asarray(b[1], dtype=float)) for b in (boxes or [])]

    def box_distance(self, X: np.ndarray) -> np.ndarray:
        """Distance to the nearest source box: summed excess per feature, in units of the training span."""
        if not self.boxes:
            return np.full(len(X), np.inf)
        span = np.maximum(self.hi - self.lo, 1e-9)
        d = np.full(len(X), np.inf)
        for lo, hi in self.boxes:
            ex = (np.maximum(lo - X, 0.0) + np.maximum(X - hi, 0.0)) / span
            d = np.minimum(d, np.nansum(ex, axis=1))
        return d

    def share(self, X: np.ndarray) -> np.ndarray:
        gate = np.exp(-self.box_distance(X) / max(self.tau, 1e-9))
        return self.shrink + (self.near - self.shrink) * gate

    def __call__(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.shrink == 0.0 and self.near == 0.0:  # the correction does not transfer: nothing to do
            return np.zeros(len(X)), np.zeros(len(X))
        span = np.maximum(self.hi - self.lo, 1e-9)
        excess = (np.maximum(self.lo - X, 0.0) + np.maximum(X - self.hi, 0.0)) / span
        weight = np.exp(-np.nansum(excess, axis=1) * EXTRAPOLATION_DECAY) * self.share(X)
        if not np.any(weight > 0):
            return np.zeros(len(X)), weight
        return self.forest.predict(X) * weight, weight

    def to_dict(self) -> dict:
        return {"model": self.model, "lo": self.lo.tolist(), "hi": self.hi.tolist(), "shrink": self.shrink,
                "near": self.near, "tau": self.tau, "boxes": [[b[0].tolist(), b[1].tolist()] for b in self.boxes]}

    @classmethod
    def from_dict(cls, d: dict) -> Residual:
        return cls(d["model"], d["lo"], d["hi"], d.get("shrink", 1.0), d.get("near"), d.get("tau", 1.0),
                   d.get("boxes"))


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
