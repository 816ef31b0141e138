"""Gradient-boosted trees as plain data: export a fitted scikit-learn HistGradientBoostingRegressor
to JSON-able lists and predict with numpy alone, so a calibration file is one versioned JSON and
`tuneplan estimate` never imports scikit-learn."""

from __future__ import annotations

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
        value, feature, thr, miss, left, right, leaf, roots = [], [], [], [], [], [], [], []
        off = 0
        for t in model["trees"]:
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
        self.value = np.asarray(value, dtype=float)
        self.feature = np.asarray(feature, dtype=int)
        self.threshold = np.asarray(thr, dtype=float)
        self.missing_left = np.asarray(miss, dtype=bool)
        self.left = np.asarray(left, dtype=int)
        self.right = np.asarray(right, dtype=int)
        self.leaf = np.asarray(leaf, dtype=bool)
        self.roots = np.asarray(roots, dtype=int)

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
