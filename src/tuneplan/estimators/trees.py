"""Gradient-boosted trees as plain data: export a fitted scikit-learn HistGradientBoostingRegressor
to JSON-able lists and predict with numpy alone, so a calibration file is one versioned JSON and
`tuneplan estimate` never imports scikit-learn."""

from __future__ import annotations

from functools import cached_property

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
    return {"kind": "hgb-regressor", "baseline": float(np.asarray(model._baseline_prediction).ravel()[0]),
            "features": list(feature_names), "trees": trees}


class Forest:
    """All trees stacked into flat node arrays, traversed together: one pass of depth steps."""

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

    def predict(self, X: np.ndarray) -> np.ndarray:
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


def predict_trees(model: dict, X: np.ndarray) -> np.ndarray:
    """Sum of tree outputs plus the baseline (builds a Forest; keep one for repeated use)."""
    return Forest(model).predict(X)
