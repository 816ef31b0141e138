"""Issue 19 point 7: the fast paths give the same answers as the plain ones."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import reference_dir

from tuneplan.estimators.residual import nearest, nearest_distance, nearest_values


def _brute_nearest(X, points, span):
    """(distance, index) by brute force: every row against every point, NaN counting 0, the first of
    equally near points."""
    d = np.nansum(np.abs(X[:, None, :] - points[None, :, :]) / span, axis=2)
    return d.min(axis=1), d.argmin(axis=1)


@pytest.mark.parametrize("nan_share", [0.0, 0.05])
def test_kd_tree_distances_are_exact(nan_share):
    rng = np.random.default_rng(0)
    points = rng.normal(size=(300, 8))
    X = rng.normal(size=(2000, 8))
    X[::5] = X[1]  # repeated rows, as a plan's grid has
    if nan_share:
        points[rng.random(points.shape) < nan_share] = np.nan
        X[rng.random(X.shape) < nan_share] = np.nan
    span = rng.uniform(0.5, 2.0, size=8)
    brute, _ = _brute_nearest(X, points, span)
    np.testing.assert_allclose(nearest_distance(X, points, span), brute, rtol=1e-12, atol=1e-12)


def test_nearest_takes_the_first_of_equally_near_rows():
    # rows 1 and 3 repeat row 0's configuration; rows 2 and 4 are each at distance 1 from (1, 0)
    points = np.array([[5.0, 5.0], [5.0, 5.0], [0.0, 0.0], [5.0, 5.0], [2.0, 0.0], [np.nan, 9.0]])
    span = np.array([1.0, 1.0])
    X = np.array([[5.0, 5.0], [1.0, 0.0], [4.0, 4.0], [np.nan, 0.0]])
    d, i = nearest(X, points, span)
    assert d.tolist() == [0.0, 1.0, 2.0, 0.0] and i.tolist() == [0, 2, 0, 2]
    assert nearest_values(X, points, [10, 11, 12, 13, 14, 15], span).tolist() == [10.0, 12.0, 10.0, 12.0]
    assert nearest_distance(X, np.empty((0, 2)), span).tolist() == [np.inf] * 4


def test_an_infinite_feature_is_near_only_the_same_infinity():
    points = np.array([[np.inf, 0.0], [0.0, 0.0], [np.inf, 3.0]])
    X = np.array([[np.inf, 3.0], [1.0, 0.0], [-np.inf, 0.0]])
    d, i = nearest(X, points, np.ones(2))
    assert d.tolist() == [0.0, 1.0, np.inf] and i.tolist() == [2, 1, 0]


def test_nearest_index_is_brute_forces_on_a_grid_of_ties():
    rng = np.random.default_rng(3)
    points = rng.integers(0, 3, size=(200, 3)).astype(float)  # many rows at equal distances
    X = rng.integers(0, 3, size=(300, 3)).astype(float) + 0.5
    span = np.ones(3)
    d, i = nearest(X, points, span)
    bd, bi = _brute_nearest(X, points, span)
    np.testing.assert_array_equal(d, bd)
    np.testing.assert_array_equal(i, bi)


def _stepwise_max_micro_batch(est, a):
    """The search one halving per call (before the look-ahead)."""
    n = len(a["micro_batch"])
    lo, hi = np.zeros(n), np.full(n, 4097.0)
    for _ in range(14):
        mid = np.maximum(np.floor((lo + hi) / 2.0), 1.0)
        ok = est.predict_arrays({**a, "micro_batch": mid})["fits"]
        lo = np.where(ok & (mid > lo), mid, lo)
        hi = np.where(~ok, mid, hi)
    return lo.astype(int)


def test_look_ahead_bisection_finds_the_stepwise_answer():
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.dataset import arrays_for, configs_from_rows
    from tuneplan.runs import read_runs

    est = get_estimator("tuneplan")
    ref = reference_dir()
    if ref is None:
        pytest.skip("the shared reference runs are not beside the checkout")
    rows = read_runs([str(ref / "litgpt.csv"), str(ref / "xtuner.csv")]).df
    configs = [c for c in configs_from_rows(rows.to_dict("records"))[0] if c is not None][::3]
    assert len(configs) >= 30
    for c in configs:  # one row: three halvings a call
        a = arrays_for([c], est.constants)
        assert est.max_micro_batch(a)[0] == _stepwise_max_micro_batch(est, a)[0]
    a = arrays_for(configs, est.constants)  # many rows at once
    np.testing.assert_array_equal(est.max_micro_batch(a), _stepwise_max_micro_batch(est, a))
