"""Gradient-boosted trees as plain data: export a fitted scikit-learn HistGradientBoostingRegressor
to JSON-able lists and predict with numpy alone (or, for one estimate's few rows, plain Python), so a
calibration file is one versioned JSON and `tuneplan estimate` never imports scikit-learn."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from tuneplan.physics import xp

if TYPE_CHECKING:
    import numpy as np


def export_hgb(model, feature_names: list[str]) -> dict:
    """Numerical-feature HGB regressor (squared error) -> dict of trees."""
    trees = []
    for it in model._predictors:
        nodes = it[0].nodes
        trees.append({
            "value": [float(v) for v in nodes["value"]],
            "feature": [int(v) for v in nodes["feature_idx"]],
            "threshold": [float(v) for v in nodes["num_threshold"]],
            "missing_left": [int(v) for v in nodes["missing_go_to_left"]],
            "left": [int(v) for v in nodes["left"]],
            "right": [int(v) for v in nodes["right"]],
            "leaf": [int(v) for v in nodes["is_leaf"]],
        })
    import numpy as np

    return {"kind": "hgb-regressor", "baseline": float(np.asarray(model._baseline_prediction).ravel()[0]),
            "features": list(feature_names), "trees": trees}


class Forest:
    """All trees stacked into flat node arrays, traversed together: one pass of depth steps (numpy),
    or tree by tree for the rows of a pure-Python `xp.Mat` (one estimate)."""

    def __init__(self, model: dict) -> None:
        self.baseline = float(model["baseline"])
        self.trees: list[dict] = model["trees"]
        """The trees as exported (per tree: node lists, children numbered within the tree)."""

    @cached_property
    def nodes(self) -> dict[str, list]:
        """The trees' node lists end to end, children renumbered (the numpy arrays below are built from them)."""
        value, feature, thr, miss, left, right, leaf, roots = [], [], [], [], [], [], [], []
        off = 0
        for t in self.trees:
            n = len(t["value"])
            roots.append(off)
            value += t["value"]
            feature += t["feature"]
            thr += t["threshold"]
            miss += t["missing_left"]
            leaf += t["leaf"]
            left += [x + off for x in t["left"]]
            right += [x + off for x in t["right"]]
            off += n
        return {"value": value, "feature": feature, "threshold": thr, "missing_left": miss, "left": left,
                "right": right, "leaf": leaf, "roots": roots}

    def _array(self, key: str, dtype: type) -> np.ndarray:
        import numpy as np

        return np.asarray(self.nodes[key], dtype=dtype)

    @cached_property
    def value(self) -> np.ndarray:
        return self._array("value", float)

    @cached_property
    def feature(self) -> np.ndarray:
        return self._array("feature", int)

    @cached_property
    def threshold(self) -> np.ndarray:
        return self._array("threshold", float)

    @cached_property
    def missing_left(self) -> np.ndarray:
        return self._array("missing_left", bool)

    @cached_property
    def left(self) -> np.ndarray:
        return self._array("left", int)

    @cached_property
    def right(self) -> np.ndarray:
        return self._array("right", int)

    @cached_property
    def leaf(self) -> np.ndarray:
        return self._array("leaf", bool)

    @cached_property
    def roots(self) -> np.ndarray:
        return self._array("roots", int)

    def predict(self, X: xp.Array) -> xp.Array:
        if xp.is_vec(X):
            return self._predict_rows(X)
        import numpy as np

        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        if len(self.roots) == 0:
            return np.full(n, self.baseline)
        node = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
        rows = np.arange(n)[:, None]
        for _ in range(64):
            active = ~self.leaf[node]
            if not active.any():
                break
            x = X[rows, self.feature[node]]
            go_left = np.where(np.isnan(x), self.missing_left[node], x <= self.threshold[node])
            node = np.where(active, np.where(go_left, self.left[node], self.right[node]), node)
        return self.baseline + self.value[node].sum(axis=1)

    def _predict_rows(self, X: xp.Mat) -> xp.Vec:
        """`predict` of a pure-Python matrix: each row down each tree, the leaves summed in numpy's
        order (`xp.pairwise_sum`, as `value[node].sum(axis=1)`)."""
        out = []
        for row in X.rows:
            leaves = []
            for t in self.trees:
                feature, thr, miss, left, right, leaf = (t["feature"], t["threshold"], t["missing_left"], t["left"],
                                                         t["right"], t["leaf"])
                node = 0
                for _ in range(64):
                    if leaf[node]:
                        break
                    x = row[feature[node]]
                    node = left[node] if (miss[node] if x != x else x <= thr[node]) else right[node]
                leaves.append(t["value"][node])
            out.append(self.baseline + xp.pairwise_sum(leaves))
        return xp.Vec(out)


def predict_trees(model: dict, X: np.ndarray) -> np.ndarray:
    """Sum of tree outputs plus the baseline (builds a Forest; keep one for repeated use)."""
    return Forest(model).predict(X)
