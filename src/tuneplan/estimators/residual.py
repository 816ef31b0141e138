"""Applying a fitted residual model (no scikit-learn): the boosted correction on log-residuals,
shrunk back toward the physics outside the range it was trained on. Written against `physics.xp`:
numpy feature matrices (predict, plan) or the pure-Python `Mat` of one estimate (numpy not imported)."""

from __future__ import annotations

import _thread
import math
import sys
from functools import cached_property
from typing import TYPE_CHECKING

from tuneplan.estimators.features import MEMORY_FEATURES, THROUGHPUT_FEATURES, feature_matrix
from tuneplan.estimators.trees import Forest
from tuneplan.physics import xp

if TYPE_CHECKING:
    import numpy as np

EXTRAPOLATION_DECAY = 4.0
"""How fast the correction fades outside the training range: weight = exp(-4 x summed excess,
each feature's excess measured in units of its training span)."""


NEAREST_CHUNK = 256
"""Configurations per block when measuring distances to the training rows by brute force (bounds the
memory used)."""
TREE_MIN_WORK = 2_000_000
"""Configurations x training rows above which distances are found with KD-trees (scipy's cKDTree,
exact L1 nearest neighbours) instead of brute force: below it, importing scipy and
building the tree cost more than they save."""


def _block_distances(X: np.ndarray, points: np.ndarray, span: np.ndarray):
    """(first row, distances of a block of rows to every point), by brute force in blocks of
    NEAREST_CHUNK rows (NaN counts 0)."""
    import numpy as np

    for i in range(0, len(X), NEAREST_CHUNK):
        yield i, np.nansum(np.abs(X[i:i + NEAREST_CHUNK, None, :] - points[None, :, :]) / span, axis=2)


def _numpy_nearest(X: np.ndarray, points: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Exact, by brute force in blocks (NaN counts 0)."""
    import numpy as np

    out = np.empty(len(X))
    for i, d in _block_distances(X, points, span):
        out[i:i + len(d)] = d.min(axis=1)
    return out


def _python_nearest_point(x: list[float], points: list[list[float]], s: list[float]) -> tuple[float, int]:
    """(distance, index) of the nearest of `points` to `x` on the pure-Python backend: the sums of
    `_block_distances`, in numpy's order (NaN counts 0); the first of equally near points."""
    best, index = math.inf, 0
    for j, p in enumerate(points):
        d = xp.pairwise_sum([abs(u - w) / z for u, w, z in zip(x, p, s, strict=False)])
        if d != d:  # a feature missing on either side: counted 0
            d = xp.pairwise_sum([0.0 if e != e else e for e in (abs(u - w) / z for u, w, z in zip(x, p, s, strict=False))])
        if d < best:
            best, index = d, j
    return best, index


def _python_nearest(X: xp.Mat, points: list[list[float]], span: xp.Vec) -> xp.Vec:
    """`_numpy_nearest` on the pure-Python backend."""
    return xp.Vec([_python_nearest_point(x, points, span.v)[0] for x in X.rows])


def nearest_values(X: xp.Array, points, values: list[float], span: xp.Array) -> xp.Array:
    """Each row's `values` entry of its nearest point (the distance of `nearest_distance`, by brute force:
    the first of equally near points, the same on both backends)."""
    if xp.is_vec(X):
        return xp.Vec([values[_python_nearest_point(x, points, span.v)[1]] for x in X.rows])
    import numpy as np

    vals = np.asarray(values, dtype=float)
    out = np.empty(len(X))
    for i, d in _block_distances(X, points, span):
        out[i:i + len(d)] = vals[d.argmin(axis=1)]
    return out


def _patterns(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which features each row lacks: the distinct NaN masks and each row's index into them."""
    import numpy as np

    nan = np.isnan(a)
    codes = np.zeros(len(a), dtype=object if a.shape[1] > 62 else np.int64)
    for j in range(a.shape[1]):
        codes = codes * 2 + nan[:, j]
    _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    return nan[first], np.asarray(inv).reshape(-1)


def _distinct_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of `a` and each row's index into them (a plan's grid repeats many)."""
    import numpy as np

    c = np.ascontiguousarray(a)
    rows = c.view(np.dtype((np.void, c.dtype.itemsize * c.shape[1]))).ravel()
    _, first, inv = np.unique(rows, return_index=True, return_inverse=True)
    return c[first], np.asarray(inv).reshape(-1)


_KD_TREE_LOCK = _thread.allocate_lock()  # _thread: builtin, already loaded (threading is not, on estimate's path)


def _kd_tree_class() -> type:
    """scipy's cKDTree. `import scipy.spatial` also loads its Delaunay / Voronoi, distance and rotation
    modules (scipy.constants among them): ~0.35 s of CPU here, against ~0.12 s for the KD-tree's own
    extension module, which is loaded alone (registered under its own name, as the import system
    does, so a later `import scipy.spatial` takes the same module) while scipy.spatial is not imported
    yet; one thread at a time (`_KD_TREE_LOCK`). Any surprise (another layout of scipy, a loader error)
    falls back to `from scipy.spatial import cKDTree`: the same class either way."""
    name = "scipy.spatial._ckdtree"
    with _KD_TREE_LOCK:
        mod = sys.modules.get(name)
        if mod is None and "scipy.spatial" not in sys.modules:
            mod = _load_alone(name)
    tree = getattr(mod, "cKDTree", None)
    if tree is None:
        from scipy.spatial import cKDTree as tree
    return tree


def _load_alone(name: str):
    """The extension module `name` of scipy.spatial, loaded without its package's `__init__` (None when
    it cannot be; ImportError when scipy is not installed)."""
    import importlib.machinery
    import importlib.util
    import os

    import scipy  # no scipy: ImportError, as `from scipy.spatial import cKDTree` gives

    try:
        spec = importlib.machinery.PathFinder.find_spec(name, [os.path.join(scipy.__path__[0], "spatial")])
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[name]
            raise
        return loaded
    except Exception:  # noqa: BLE001 - any surprise: scipy's own import (the caller)
        return None


def _tree_nearest(Xs: np.ndarray, Ps: np.ndarray) -> np.ndarray:
    """Exact L1 nearest distances with KD-trees: rows and points grouped by which features they lack,
    each pair of groups searched over the features both have (a missing feature counts 0)."""
    import numpy as np

    cKDTree = _kd_tree_class()  # noqa: N806 - scipy's class name

    Xu, back = _distinct_rows(Xs)
    out = np.full(len(Xu), np.inf)
    p_keys, p_inv = _patterns(Ps)
    x_keys, x_inv = _patterns(Xu)
    for pi, pk in enumerate(p_keys):
        P = Ps[p_inv == pi]
        for xi, xk in enumerate(x_keys):
            dims = ~(pk | xk)
            rows = np.flatnonzero(x_inv == xi)
            if not dims.any():
                out[rows] = 0.0
                continue
            d, _ = cKDTree(P[:, dims]).query(Xu[rows][:, dims], k=1, p=1)
            out[rows] = np.minimum(out[rows], d)
    return out[back]


def nearest_distance(X: np.ndarray, points: np.ndarray, span: np.ndarray, rows: int | None = None) -> np.ndarray:
    """Each row's distance to the nearest of `points`: summed absolute feature differences, each in
    units of its training span (features missing on either side count 0). Exact either way: numpy
    for small problems, KD-trees for large ones (a plan over 100k candidates). `rows`: the rows `X`
    stands for (its distinct configurations' table), which the choice follows (default len(X)). A
    pure-Python `Mat` X (one estimate) is measured by brute force on that backend."""
    if len(points) == 0:
        return xp.full(len(X), math.inf, like=X)
    if xp.is_vec(X):
        return _python_nearest(X, points.tolist() if hasattr(points, "tolist") else points, span)
    import numpy as np

    if (len(X) if rows is None else rows) * len(points) >= TREE_MIN_WORK:
        Xs = np.asarray(X, dtype=float) / span
        Ps = np.asarray(points, dtype=float) / span
        if not np.isinf(Xs).any() and not np.isinf(Ps).any():
            try:
                return _tree_nearest(Xs, Ps)
            except ImportError:  # no scipy: brute force, as exact
                pass
    return _numpy_nearest(X, points, span)


class Residual:
    """A boosted correction on log-residuals. How much of it applies depends on where a configuration
    lies: next to measured configurations (a sibling of a training row: the same source, one setting
    changed) the `near` share, far from all of them the `far` share, fading between them with the
    distance to the nearest training row (scale `tau`); the shares, `tau` and the trees' size are chosen
    on held-out folds and sources. The far share may come from trees of its own on a subset of the
    features (`far_model`: the throughput correction's are fitted on the work's shape only, so a new
    machine is not given a measured one's offset). Outside the whole training range the correction
    fades to nothing."""

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
        self.lo_list = [float(v) for v in lo]
        self.hi_list = [float(v) for v in hi]
        self.shrink = float(shrink)  # share kept far from every measured configuration
        self.near = float(shrink if near is None else near)  # share kept next to measured configurations
        self.tau = float(tau)
        # earlier calibration files stored one feature box per source instead of the training rows
        self.box_lists = [([float(v) for v in b[0]], [float(v) for v in b[1]]) for b in (boxes or [])]
        self.capacity = dict(capacity or {})  # the boosting rounds and smallest leaf chosen for it
        self._points = points  # the training rows (rows x features; numpy's or lists), read lazily
        # the training rows' residuals, and the share of the correction that is the nearest row's one
        # (the rest: the trees); a user's own stack only (`fit_residual`'s neighbour_share)
        self.values = None if values is None else [float(v) for v in values]
        self.value_share = float(value_share) if self.values else 0.0

    # numpy views of the bounds and training rows (predict, plan, fitting); one estimate reads the lists
    @cached_property
    def lo(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self.lo_list, dtype=float)

    @cached_property
    def hi(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self.hi_list, dtype=float)

    @cached_property
    def boxes(self) -> list[tuple[np.ndarray, np.ndarray]]:
        import numpy as np

        return [(np.asarray(b[0], dtype=float), np.asarray(b[1], dtype=float)) for b in self.box_lists]

    @cached_property
    def points(self) -> np.ndarray:
        import numpy as np

        if self._points is None:
            return np.empty((0, len(self.lo_list)))
        return np.asarray(self._points, dtype=float).reshape(-1, len(self.lo_list))

    @cached_property
    def point_rows(self) -> list[list[float]]:
        """The training rows as lists of floats (the pure-Python backend's)."""
        if self._points is None:
            return []
        if hasattr(self._points, "tolist"):
            return self.points.tolist()
        return self._points if isinstance(self._points, list) else [list(p) for p in self._points]

    def _bounds(self, X) -> tuple:
        """(lo, hi, span) on X's backend."""
        lo, hi = (xp.Vec(self.lo_list), xp.Vec(self.hi_list)) if xp.is_vec(X) else (self.lo, self.hi)
        return lo, hi, xp.maximum(hi - lo, 1e-9)

    def distance(self, X: xp.Array, rows: int | None = None) -> xp.Array:
        """Distance to the nearest training row (older files: to the nearest source box), summed over
        the features in units of each one's training span."""
        _, _, span = self._bounds(X)
        pure = xp.is_vec(X)
        if (self._points is not None) and len(self.point_rows if pure else self.points):
            return nearest_distance(X, self.point_rows if pure else self.points, span, rows)
        if not self.box_lists:
            return xp.full(len(X), math.inf, like=X)
        d = xp.full(len(X), math.inf, like=X)
        for lo, hi in ([(xp.Vec(a), xp.Vec(b)) for a, b in self.box_lists] if pure else self.boxes):
            ex = (xp.maximum(lo - X, 0.0) + xp.maximum(X - hi, 0.0)) / span
            d = xp.minimum(d, xp.nansum(ex, axis=1))
        return d

    def features(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """The feature names the trees were fitted on (a file written before a feature was added keeps
        its own list)."""
        return tuple(self.model.get("features") or default)

    def gate(self, X: xp.Array, rows: int | None = None) -> xp.Array:
        """1 on a measured configuration, fading to 0 with the distance to the nearest one."""
        return xp.exp(-self.distance(X, rows) / max(self.tau, 1e-9))

    def share(self, X: xp.Array) -> xp.Array:
        return self.shrink + (self.near - self.shrink) * self.gate(X)

    def __call__(self, X: xp.Array, rows: int | None = None) -> tuple[xp.Array, xp.Array]:
        if self.shrink == 0.0 and self.near == 0.0:  # the correction does not transfer: nothing to do
            return xp.zeros(len(X), like=X), xp.zeros(len(X), like=X)
        lo, hi, span = self._bounds(X)
        excess = (xp.maximum(lo - X, 0.0) + xp.maximum(X - hi, 0.0)) / span
        inside = xp.exp(-xp.nansum(excess, axis=1) * EXTRAPOLATION_DECAY)
        g = self.gate(X, rows)
        weight = inside * (self.shrink + (self.near - self.shrink) * g)
        if not xp.any(weight > 0):
            return xp.zeros(len(X), like=X), weight
        near_corr = self.forest.predict(X)
        if self.value_share > 0.0:
            _, _, span = self._bounds(X)
            nearest = nearest_values(X, self.point_rows if xp.is_vec(X) else self.points, self.values, span)
            near_corr = near_corr * (1.0 - self.value_share) + nearest * self.value_share
        # a far share of 0 keeps nothing of the far trees (finite sums): they are not evaluated
        far_corr = (near_corr if self.far_forest is None or self.shrink == 0.0
                    else self.far_forest.predict(X[:, self.far_columns]))
        return inside * (g * self.near * near_corr + (1.0 - g) * self.shrink * far_corr), weight

    def to_dict(self) -> dict:
        import numpy as np

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

    def correct(self, a: dict, out: dict, rows: int | None = None):
        """(throughput factor, memory factor, info); `rows`: the rows `a` stands for (`nearest_distance`)."""
        n = len(out["step_s"])
        thr_f = xp.ones(n, like=out["step_s"])
        mem_f = xp.ones(n, like=out["step_s"])
        info: dict = {}
        if self.thr is not None:
            r, w = self.thr(feature_matrix(a, out, self.thr.features(THROUGHPUT_FEATURES)), rows)
            thr_f = xp.exp(r)
            info["residual_weight"] = w
            info["extrapolated"] = w < 0.5
        if self.mem is not None:
            r, w = self.mem(feature_matrix(a, out, self.mem.features(MEMORY_FEATURES)), rows)
            mem_f = xp.exp(r)
            info["memory_residual_weight"] = w
        return thr_f, mem_f, info

    @property
    def memory_reads_step(self) -> bool:
        """Whether `memory_factor` reads the physics' step-time outputs (its features do, when there is
        a memory correction); without one the largest-micro-batch search evaluates memory alone."""
        return self.mem is not None

    def memory_factor(self, a: dict, out: dict, rows: int | None = None) -> xp.Array:
        """`correct`'s memory factor alone (what the largest-micro-batch search needs); `rows`: the
        rows `a` stands for (`nearest_distance`)."""
        if self.mem is None:
            return xp.ones(len(out["fits"]), like=out["fits"])
        return xp.exp(self.mem(feature_matrix(a, out, self.mem.features(MEMORY_FEATURES)), rows)[0])
