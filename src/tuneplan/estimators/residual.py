"""Applying a fitted residual model (no scikit-learn): the boosted correction on log-residuals,
shrunk back toward the physics outside the range it was trained on, over numpy feature matrices."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from tuneplan.estimators.features import MEMORY_FEATURES, THROUGHPUT_FEATURES, feature_matrix
from tuneplan.estimators.trees import Forest

EXTRAPOLATION_DECAY = 4.0
"""How fast the correction fades outside the training range: weight = exp(-4 x summed excess,
each feature's excess measured in units of its training span)."""

NEAREST_CANDIDATES = 16
"""Neighbours asked of the KD-tree per row: among those at the nearest distance, the first training row
is taken (a training set repeats configurations; exact copies are merged before the search)."""
TIE_TOLERANCE = 1e-12
"""Relative difference under which two distances are a tie (the same sum, rounded in another order)."""


FINITE, MISSING, PLUS_INF, MINUS_INF = 0, 1, 2, 3
"""Each feature's state in a row (`_patterns`)."""


def _patterns(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which features each row has finite, lacks (NaN) or has infinite: the distinct state rows and each
    row's index into them."""
    state = np.select([np.isnan(a), a == np.inf, a == -np.inf], [MISSING, PLUS_INF, MINUS_INF], FINITE)
    codes = np.zeros(len(a), dtype=object if a.shape[1] > 31 else np.int64)
    for j in range(a.shape[1]):
        codes = codes * 4 + state[:, j]
    _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    return state[first], np.asarray(inv).reshape(-1)


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of `a` (in order of first appearance), the row each first appears at, and each
    row's index into them (a plan's grid, a training set repeat many)."""
    c = np.ascontiguousarray(a)
    rows = c.view(np.dtype((np.void, c.dtype.itemsize * c.shape[1]))).ravel()
    _, first, inv = np.unique(rows, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return c[first[order]], first[order], rank[np.asarray(inv).reshape(-1)]


def nearest(X: np.ndarray, points: np.ndarray, span: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest training point: (distance, index). The distance is L1 over the features in
    units of each one's training span, a feature missing (NaN) on either side counting 0 and an
    infinite one 0 against the same infinity, else making the distance infinite; of equally near points
    the first. scipy's cKDTree (p=1), exact: rows and points are grouped by which features they have
    finite, each pair of groups searched over the features finite in both."""
    from scipy.spatial import cKDTree

    span = np.asarray(span, dtype=float)
    Xs = np.asarray(X, dtype=float).reshape(len(X), len(span)) / span
    Ps = np.asarray(points, dtype=float).reshape(len(points), len(span)) / span
    Xu, _, back = _distinct_rows(Xs)
    Pu, p_first, _ = _distinct_rows(Ps)
    dist = np.full(len(Xu), np.inf)
    index = np.zeros(len(Xu), dtype=np.intp)
    if len(Pu) == 0:
        return dist[back], index[back]
    p_keys, p_inv = _patterns(Pu)
    x_keys, x_inv = _patterns(Xu)
    for pi, pk in enumerate(p_keys):
        in_group = np.flatnonzero(p_inv == pi)  # ascending: the group's points in training order
        for xi, xk in enumerate(x_keys):
            dims = (pk == FINITE) & (xk == FINITE)
            rows = np.flatnonzero(x_inv == xi)
            compared = (pk != MISSING) & (xk != MISSING)
            if (compared & ~dims & (pk != xk)).any():  # an infinity against anything else: infinitely far
                d, j = np.full(len(rows), np.inf), np.zeros(len(rows), dtype=np.intp)
            elif not dims.any():  # nothing to compare: every point at distance 0, the group's first taken
                d, j = np.zeros(len(rows)), np.zeros(len(rows), dtype=np.intp)
            else:
                k = min(NEAREST_CANDIDATES, len(in_group))
                d, j = cKDTree(Pu[in_group][:, dims]).query(Xu[rows][:, dims], k=k, p=1)
                d, j = d.reshape(len(rows), k), j.reshape(len(rows), k)
                # of the candidates at the nearest distance, the first point (points are in training order)
                j = np.where(d <= d[:, :1] * (1.0 + TIE_TOLERANCE), j, len(in_group)).min(axis=1)
                d = d[:, 0]
            i = p_first[in_group[j]]
            best = dist[rows]
            better = (d < best * (1.0 - TIE_TOLERANCE)) | ((d <= best * (1.0 + TIE_TOLERANCE)) & (i < index[rows]))
            dist[rows] = np.minimum(best, d)
            index[rows] = np.where(better, i, index[rows])
    return dist[back], index[back]


def nearest_distance(X: np.ndarray, points: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Each row's distance to the nearest of `points` (`nearest`); inf when there are none."""
    return nearest(X, points, span)[0]


def nearest_values(X: np.ndarray, points: np.ndarray, values, span: np.ndarray) -> np.ndarray:
    """Each row's `values` entry of its nearest point (`nearest`)."""
    return np.asarray(values, dtype=float)[nearest(X, points, span)[1]]


class Residual:
    """A boosted correction on log-residuals: the `near` share of it next to measured configurations, the
    `far` share away from all, fading with the distance to the nearest training row (scale `tau`), and to
    nothing outside the training range. The far share may come from trees on a subset of the features
    (`far_model`: the work's shape only, so a new machine is not given a measured one's offset)."""

    def __init__(self, model: dict, lo: list[float], hi: list[float], shrink: float = 1.0,
                 near: float | None = None, tau: float = 1.0, boxes: list | None = None,
                 capacity: dict | None = None, points: list | None = None, far_model: dict | None = None,
                 values: list | None = None, value_share: float = 0.0) -> None:
        self.model = model
        self.forest = Forest(model)
        # trees on a subset of the features for the far share (None: the same trees near and far)
        self.far_model = far_model
        self.far_forest = Forest(far_model) if far_model else None
        names = list(model.get("features") or [])
        self.far_columns = ([names.index(n) for n in far_model["features"]] if far_model else None)
        self.lo, self.hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
        self.shrink = float(shrink)  # share kept far from every measured configuration
        self.near = float(shrink if near is None else near)  # share kept next to measured configurations
        self.tau = float(tau)
        # earlier calibration files stored one feature box per source instead of the training rows
        self.boxes = [(np.asarray(b[0], dtype=float), np.asarray(b[1], dtype=float)) for b in (boxes or [])]
        self.capacity = dict(capacity or {})  # the boosting rounds and smallest leaf chosen for it
        self._points = points  # the training rows (rows x features; numpy's or lists), read lazily
        # the training rows' residuals, and the share of the correction that is the nearest row's one
        # (the rest: the trees); a user's own stack only (`fit_residual`'s neighbour_share)
        self.values = None if values is None else [float(v) for v in values]
        self.value_share = float(value_share) if self.values else 0.0

    @cached_property
    def points(self) -> np.ndarray:
        """The training rows as a numpy matrix (read lazily)."""
        if self._points is None:
            return np.empty((0, len(self.lo)))
        return np.asarray(self._points, dtype=float).reshape(-1, len(self.lo))

    def _bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, span) of the training range."""
        return self.lo, self.hi, np.maximum(self.hi - self.lo, 1e-9)

    def distance(self, X: np.ndarray) -> np.ndarray:
        """Distance to the nearest training row (older files: to the nearest source box), summed over
        the features in units of each one's training span."""
        _, _, span = self._bounds()
        if self._points is not None and len(self.points):
            return nearest_distance(X, self.points, span)
        d = np.full(len(X), math.inf)
        for lo, hi in self.boxes:
            ex = (np.maximum(lo - X, 0.0) + np.maximum(X - hi, 0.0)) / span
            d = np.minimum(d, np.nansum(ex, axis=1))
        return d

    def features(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """The feature names the trees were fitted on (a file written before a feature was added keeps
        its own list)."""
        return tuple(self.model.get("features") or default)

    def gate(self, X: np.ndarray) -> np.ndarray:
        """1 on a measured configuration, fading to 0 with the distance to the nearest one."""
        return np.exp(-self.distance(X) / max(self.tau, 1e-9))

    def share(self, X: np.ndarray) -> np.ndarray:
        return self.shrink + (self.near - self.shrink) * self.gate(X)

    def __call__(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.shrink == 0.0 and self.near == 0.0:  # the correction does not transfer: nothing to do
            return np.zeros(len(X)), np.zeros(len(X))
        lo, hi, span = self._bounds()
        excess = (np.maximum(lo - X, 0.0) + np.maximum(X - hi, 0.0)) / span
        inside = np.exp(-np.nansum(excess, axis=1) * EXTRAPOLATION_DECAY)
        g = self.gate(X)
        weight = inside * (self.shrink + (self.near - self.shrink) * g)
        if not np.any(weight > 0):
            return np.zeros(len(X)), weight
        near_corr = self.forest.predict(X)
        if self.value_share > 0.0:
            nearest = nearest_values(X, self.points, self.values, span)
            near_corr = near_corr * (1.0 - self.value_share) + nearest * self.value_share
        # a far share of 0 keeps nothing of the far trees (finite sums): they are not evaluated
        far_corr = (near_corr if self.far_forest is None or self.shrink == 0.0
                    else self.far_forest.predict(X[:, self.far_columns]))
        return inside * (g * self.near * near_corr + (1.0 - g) * self.shrink * far_corr), weight

    def to_dict(self) -> dict:
        return {"model": self.model, "lo": self.lo.tolist(), "hi": self.hi.tolist(), "shrink": self.shrink,
                "near": self.near, "tau": self.tau, "boxes": [[b[0].tolist(), b[1].tolist()] for b in self.boxes],
                "capacity": self.capacity, "far_model": self.far_model,
                **({"values": [round(v, 6) for v in self.values], "value_share": self.value_share}
                   if self.value_share > 0.0 else {}),
                "points": [[None if not np.isfinite(v) else round(float(v), 6) for v in p] for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict) -> Residual:
        return cls(d["model"], d["lo"], d["hi"], d.get("shrink", 1.0), d.get("near"), d.get("tau", 1.0),
                   d.get("boxes"), d.get("capacity"),
                   None if d.get("points") is None else [[math.nan if v is None else v for v in p]
                                                          for p in d["points"]],
                   d.get("far_model"), d.get("values"), d.get("value_share", 0.0))


class TuneplanCorrection:
    """What TuneplanEstimator calls: throughput and memory factors from the residual models."""

    def __init__(self, thr: Residual | None, mem: Residual | None) -> None:
        self.thr = thr
        self.mem = mem

    def correct(self, a: dict, out: dict):
        """(throughput factor, memory factor, info)."""
        n = len(out["step_s"])
        thr_f = np.ones(n)
        mem_f = np.ones(n)
        info: dict = {}
        if self.thr is not None:
            r, w = self.thr(feature_matrix(a, out, self.thr.features(THROUGHPUT_FEATURES)))
            thr_f = np.exp(r)
            info["residual_weight"] = w
            info["extrapolated"] = w < 0.5
        if self.mem is not None:
            r, w = self.mem(feature_matrix(a, out, self.mem.features(MEMORY_FEATURES)))
            mem_f = np.exp(r)
            info["memory_residual_weight"] = w
        return thr_f, mem_f, info

    @property
    def memory_reads_step(self) -> bool:
        """Whether `memory_factor` reads the physics' step-time outputs (its features do, when there is
        a memory correction); without one the largest-micro-batch search evaluates memory alone."""
        return self.mem is not None

    def memory_factor(self, a: dict, out: dict) -> np.ndarray:
        """`correct`'s memory factor alone (what the largest-micro-batch search needs)."""
        if self.mem is None:
            return np.ones(len(out["fits"]))
        return np.exp(self.mem(feature_matrix(a, out, self.mem.features(MEMORY_FEATURES)))[0])
