"""The Pareto front of (time, cost): the configurations no other is at least as fast and as cheap as,
and strictly better in one of the two."""

from __future__ import annotations

import numpy as np


def pareto_mask(time: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated points when minimising both time and cost, in O(n log n).

    Point p dominates q when p.time <= q.time and p.cost <= q.cost with one of them strict; equal
    points do not dominate each other (both stay on the front). Points with a non-finite time or cost
    are never on the front."""
    t = np.asarray(time, dtype=float)
    c = np.asarray(cost, dtype=float)
    out = np.zeros(len(t), dtype=bool)
    ok = np.isfinite(t) & np.isfinite(c)
    if not ok.any():
        return out
    pts = np.column_stack([t[ok], c[ok]])
    # unique points, sorted by time then cost; duplicates share their fate
    uniq, inverse = np.unique(pts, axis=0, return_inverse=True)
    uc = uniq[:, 1]
    # a unique point is dominated iff an earlier one (smaller time, or equal time and smaller cost)
    # has a cost <= its own
    prev_min = np.minimum.accumulate(np.concatenate([[np.inf], uc[:-1]]))
    front_u = uc < prev_min
    out[np.flatnonzero(ok)] = front_u[np.asarray(inverse).reshape(-1)]
    return out

