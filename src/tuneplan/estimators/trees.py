"""Gradient-boosted trees as plain data: export a fitted scikit-learn HistGradientBoostingRegressor
to JSON-able lists and predict with numpy alone, so a calibration file is one versioned JSON and
`tuneplan estimate` never imports scikit-learn. One evaluator serves every caller (estimate, predict,
the planner's grids)."""

from __future__ import annotations

from functools import cached_property

import numpy as np

EXPORTED_NODE_FIELDS = {"value": "value", "feature": "feature_idx", "threshold": "num_threshold",
                        "missing_left": "missing_go_to_left", "left": "left", "right": "right", "leaf": "is_leaf"}
"""A tree's node lists as exported, by scikit-learn's node-array field."""


def export_hgb(model, feature_names: list[str]) -> dict:
    """Numerical-feature HGB regressor (squared error) -> dict of trees."""
    trees = [{k: it[0].nodes[field].tolist() for k, field in EXPORTED_NODE_FIELDS.items()} for it in model._predictors]
    return {"kind": "hgb-regressor", "baseline": float(np.asarray(model._baseline_prediction).ravel()[0]),
            "features": list(feature_names), "trees": trees}


class Forest:
    """All trees stacked into flat node arrays (children after their parent, as scikit-learn writes them).
    `predict` evaluates each row distinct to the trees once, walking each tree node by node with whole-column
    comparisons and summing a row's leaves in numpy's pairwise order (one row's figure is the same in any batch)."""

    CHUNK = 1 << 14
    """Distinct rows evaluated at a time (bounds the rows x trees matrix of leaf values)."""

    def __init__(self, model: dict) -> None:
        self.baseline = float(model["baseline"])
        self.trees: list[dict] = model["trees"]
        """The trees as exported (per tree: node lists, children numbered within the tree)."""

    @cached_property
    def nodes(self) -> dict[str, np.ndarray]:
        """The trees' nodes end to end as numpy arrays, children renumbered; `roots`: each tree's first node."""
        sizes = [len(t["value"]) for t in self.trees]
        roots = np.cumsum([0, *sizes[:-1]]).astype(int)

        def joined(key: str, dtype: type) -> np.ndarray:
            return np.concatenate([np.asarray(t[key], dtype=dtype) for t in self.trees]) if self.trees else np.zeros(0, dtype)

        def children(key: str) -> np.ndarray:
            return joined(key, int) + np.repeat(roots[: len(sizes)], sizes)

        return {"value": joined("value", float), "feature": joined("feature", int),
                "threshold": joined("threshold", float), "missing_left": joined("missing_left", bool),
                "left": children("left"), "right": children("right"),
                "leaf": joined("leaf", bool), "roots": roots[: len(self.trees)]}

    @cached_property
    def internal(self) -> list[tuple[int, np.ndarray]]:
        """Per tree: its root and its internal nodes in ascending order (a parent before its children,
        so one ascending pass takes every row to its leaf)."""
        a = self.nodes
        bounds = [*a["roots"].tolist(), len(a["value"])]
        out = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            nodes = lo + np.flatnonzero(~a["leaf"][lo:hi])
            left, right = a["left"][nodes], a["right"][nodes]
            if ((left <= nodes) | (right <= nodes) | (left >= hi) | (right >= hi)).any():
                raise ValueError("tree nodes are not in parent-before-child order")
            out.append((lo, nodes))
        return out

    @cached_property
    def split_thresholds(self) -> dict[int, np.ndarray]:
        """Every threshold the trees split each feature on, sorted and distinct."""
        feature, inner = self.nodes["feature"], ~self.nodes["leaf"]
        return {int(j): np.unique(self.nodes["threshold"][inner & (feature == j)]) for j in np.unique(feature[inner])}

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
        a = self.nodes
        out = np.empty((n, len(a["roots"])))
        nan = np.isnan(X)
        for t, (root, nodes) in enumerate(self.internal):
            cur = np.full(n, root, dtype=np.int64)
            for i in nodes.tolist():
                f = int(a["feature"][i])
                go_left = X[:, f] <= a["threshold"][i]
                if a["missing_left"][i]:
                    go_left |= nan[:, f]
                nxt = np.where(go_left, a["left"][i], a["right"][i])
                cur = nxt if i == root else np.where(cur == i, nxt, cur)
            out[:, t] = a["value"][cur]
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        if not self.trees or n == 0:
            return np.full(n, self.baseline)
        first, inverse = self._distinct(X)
        U = X[first]
        total = np.empty(len(U))
        for lo in range(0, len(U), self.CHUNK):
            # numpy's pairwise sum over a row of the C-ordered matrix: one row's sum in any batch
            total[lo:lo + self.CHUNK] = self._leaf_values(U[lo:lo + self.CHUNK]).sum(axis=1)
        return (self.baseline + total)[inverse]
