"""Gradient-boosted trees as plain data: export a fitted scikit-learn HistGradientBoostingRegressor
to JSON-able lists and predict with numpy alone, so a calibration file is one versioned JSON and
`tuneplan estimate` never imports scikit-learn. One evaluator serves every caller (estimate, predict,
the planner's grids)."""

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
    """All trees stacked into flat node arrays (children numbered after their parent, as scikit-learn
    writes them). `predict` of a numpy matrix evaluates each distinct row once, as the trees see it
    (the same rank among every feature's thresholds), and walks each tree node by node with whole-column
    comparisons, summing a row's leaves in numpy's pairwise order, so one row's figure is the same in any
    batch."""

    CHUNK = 1 << 14
    """Distinct rows evaluated at a time (bounds the rows x trees matrix of leaf values)."""

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

    @cached_property
    def internal(self) -> list[tuple[int, np.ndarray]]:
        """Per tree: its root and its internal nodes in ascending order (a parent before its children,
        so one ascending pass takes every row to its leaf)."""
        bounds = [*self.roots.tolist(), len(self.value)]
        out = []
        for t in range(len(self.roots)):
            lo, hi = bounds[t], bounds[t + 1]
            nodes = lo + np.flatnonzero(~self.leaf[lo:hi])
            if ((self.left[nodes] <= nodes) | (self.right[nodes] <= nodes) | (self.left[nodes] >= hi)
                    | (self.right[nodes] >= hi)).any():
                raise ValueError("tree nodes are not in parent-before-child order")
            out.append((lo, nodes))
        return out

    @cached_property
    def split_thresholds(self) -> dict[int, np.ndarray]:
        """Every threshold the trees split each feature on, sorted and distinct."""
        inner = ~self.leaf
        return {int(j): np.unique(self.threshold[inner & (self.feature == j)]) for j in np.unique(self.feature[inner])}

    def _distinct(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first row of each distinct row as the trees see it, each row's index among them): rows whose
        every feature has the same rank among that feature's thresholds (NaN a rank of its own) reach the
        same leaves."""
        n = X.shape[0]
        key = np.zeros(n, dtype=np.int64)
        span = 1
        for j, thr in self.split_thresholds.items():
            col = X[:, j]
            rank = np.searchsorted(thr, col, side="left")
            rank[np.isnan(col)] = len(thr) + 1
            radix = len(thr) + 2
            if span * radix >= 1 << 62:  # the mixed-radix key would overflow: renumber it densely first
                _, key = np.unique(key, return_inverse=True)
                key = key.reshape(-1).astype(np.int64)
                span = int(key.max()) + 1
            key = key * radix + rank
            span *= radix
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, np.asarray(inverse).reshape(-1)

    def _leaf_values(self, X: np.ndarray) -> np.ndarray:
        """rows x trees: the value of the leaf each row reaches in each tree (node by node, whole columns)."""
        X = np.asfortranarray(X)  # whole columns are read
        n = X.shape[0]
        out = np.empty((n, len(self.roots)))
        nan = np.isnan(X)
        for t, (root, nodes) in enumerate(self.internal):
            cur = np.full(n, root, dtype=np.int64)
            for i in nodes.tolist():
                f = int(self.feature[i])
                go_left = X[:, f] <= self.threshold[i]
                if self.missing_left[i]:
                    go_left |= nan[:, f]
                nxt = np.where(go_left, self.left[i], self.right[i])
                cur = nxt if i == root else np.where(cur == i, nxt, cur)
            out[:, t] = self.value[cur]
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        if len(self.roots) == 0 or n == 0:
            return np.full(n, self.baseline)
        first, inverse = self._distinct(X)
        U = X[first]
        total = np.empty(len(U))
        for lo in range(0, len(U), self.CHUNK):
            # numpy's pairwise sum over a row of the C-ordered matrix: one row's sum in any batch
            total[lo:lo + self.CHUNK] = self._leaf_values(U[lo:lo + self.CHUNK]).sum(axis=1)
        return (self.baseline + total)[inverse]


def predict_trees(model: dict, X: np.ndarray) -> np.ndarray:
    """Sum of tree outputs plus the baseline (builds a Forest; keep one for repeated use)."""
    return Forest(model).predict(X)
