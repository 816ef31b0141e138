"""Issue 19 point 7: the fast paths give the same answers as the plain ones."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.estimators.residual import TREE_MIN_WORK, _numpy_nearest, _tree_nearest, nearest_distance


@pytest.mark.parametrize("nan_share", [0.0, 0.05])
def test_kd_tree_distances_are_exact(nan_share):
    pytest.importorskip("scipy")
    rng = np.random.default_rng(0)
    points = rng.normal(size=(300, 8))
    X = rng.normal(size=(2000, 8))
    X[::5] = X[1]  # repeated rows, as a plan's grid has
    if nan_share:
        points[rng.random(points.shape) < nan_share] = np.nan
        X[rng.random(X.shape) < nan_share] = np.nan
    span = rng.uniform(0.5, 2.0, size=8)
    brute = _numpy_nearest(X, points, span)
    tree = _tree_nearest(X / span, points / span)
    np.testing.assert_allclose(tree, brute, rtol=1e-12, atol=1e-12)
    big = np.repeat(X, TREE_MIN_WORK // (len(X) * len(points)) + 1, axis=0)
    np.testing.assert_allclose(nearest_distance(big, points, span), _numpy_nearest(big, points, span),
                               rtol=1e-12, atol=1e-12)
