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


def predict_trees(model: dict, X: np.ndarray) -> np.ndarray:
    """Sum of tree outputs plus the baseline, vectorised over rows (iterative descent)."""
    X = np.asarray(X, dtype=float)
    n = X.shape[0]
    out = np.full(n, model["baseline"], dtype=float)
    rows = np.arange(n)
    for t in model["trees"]:
        value = np.asarray(t["value"])
        feature = np.asarray(t["feature"])
        thr = np.asarray(t["threshold"])
        miss = np.asarray(t["missing_left"], dtype=bool)
        left = np.asarray(t["left"])
        right = np.asarray(t["right"])
        leaf = np.asarray(t["leaf"], dtype=bool)
        node = np.zeros(n, dtype=int)
        for _ in range(64):
            active = ~leaf[node]
            if not active.any():
                break
            f = feature[node]
            x = X[rows, np.where(active, f, 0)]
            go_left = np.where(np.isnan(x), miss[node], x <= thr[node])
            node = np.where(active, np.where(go_left, left[node], right[node]), node)
        out += value[node]
    return out
