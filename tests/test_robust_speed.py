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


def test_kd_tree_module_loaded_alone_is_scipys():
    """The KD-tree's extension module loaded without the rest of scipy.spatial is the module a later
    `import scipy.spatial` uses, and its distances are those of scipy.spatial's cKDTree."""
    pytest.importorskip("scipy")
    code = (
        "import sys, numpy as np\n"
        "from tuneplan.estimators.residual import _kd_tree_class\n"
        "T = _kd_tree_class()\n"
        "assert 'scipy.spatial' not in sys.modules and 'scipy.constants' not in sys.modules\n"
        "rng = np.random.default_rng(1); P = rng.normal(size=(200, 6)); X = rng.normal(size=(500, 6))\n"
        "d = T(P).query(X, k=1, p=1)[0]\n"
        "import scipy.spatial\n"
        "assert scipy.spatial.cKDTree is T and _kd_tree_class() is T\n"
        "assert np.array_equal(scipy.spatial.KDTree(P).query(X, k=1, p=1)[0], d)\n"
        "assert scipy.spatial.distance.cityblock(P[0], X[0]) > 0\n"
        "print('ok')\n"
    )
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


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
    rows = read_runs(["../shared/reference/runs/litgpt.csv", "../shared/reference/runs/xtuner.csv"]).df
    configs = [c for c in configs_from_rows(rows.to_dict("records"))[0] if c is not None][::3]
    assert len(configs) >= 30
    for c in configs:  # one row: three halvings a call
        a = arrays_for([c], est.constants)
        assert est.max_micro_batch(a)[0] == _stepwise_max_micro_batch(est, a)[0]
    a = arrays_for(configs, est.constants)  # many rows at once
    np.testing.assert_array_equal(est.max_micro_batch(a), _stepwise_max_micro_batch(est, a))
