"""The planner's faster evaluation of the calibration's trees gives the trees' own predictions."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.plan.fastforest import FastForest, accelerated, fast_forest


def random_forest(rng, n_trees=20, n_features=5):
    """A Forest-like object: random small trees in parent-before-child order."""
    value, feature, thr, miss, left, right, leaf, roots = [], [], [], [], [], [], [], []
    for _ in range(n_trees):
        base = len(value)
        roots.append(base)
        # grow breadth-first: node ids increase with depth
        nodes = [0]
        n_internal = rng.integers(0, 8)
        count = 1
        spec = {}
        while nodes and len(spec) < n_internal:
            i = nodes.pop(0)
            spec[i] = (count, count + 1)
            nodes += [count, count + 1]
            count += 2
        for i in range(count):
            if i in spec:
                value.append(0.0)
                feature.append(int(rng.integers(0, n_features)))
                thr.append(float(rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0])))
                miss.append(bool(rng.integers(0, 2)))
                left.append(base + spec[i][0])
                right.append(base + spec[i][1])
                leaf.append(False)
            else:
                value.append(float(rng.normal()))
                feature.append(0)
                thr.append(0.0)
                miss.append(False)
                left.append(0)
                right.append(0)
                leaf.append(True)

    class F:
        pass

    f = F()
    f.baseline = 0.3
    for k, v in (("value", value), ("feature", feature), ("threshold", thr), ("missing_left", miss),
                 ("left", left), ("right", right), ("leaf", leaf), ("roots", roots)):
        setattr(f, k, np.asarray(v))
    return f


def reference_predict(f, X):
    """The plain definition: walk each tree for each row."""
    out = np.full(len(X), f.baseline)
    for r, x in enumerate(X):
        for root in f.roots:
            i = root
            while not f.leaf[i]:
                v = x[f.feature[i]]
                go_left = f.missing_left[i] if np.isnan(v) else v <= f.threshold[i]
                i = f.left[i] if go_left else f.right[i]
            out[r] += f.value[i]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_random_forests(seed):
    rng = np.random.default_rng(seed)
    f = random_forest(rng)
    X = rng.choice([-2.0, -1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0, np.nan, np.inf], size=(300, 5))
    want = reference_predict(f, X)
    ff = FastForest(f)
    assert np.allclose(ff.predict(X), want, rtol=0, atol=1e-12)  # walked (few distinct rows)
    ff.TABLE_MIN_ROWS = 1
    assert np.allclose(ff.predict(X), want, rtol=0, atol=1e-12)  # NaN rows: walked
    finite = np.nan_to_num(X, nan=0.7)
    assert np.allclose(ff.predict(finite), reference_predict(f, finite), rtol=0, atol=1e-12)  # tables


def _with_far_trees(est):
    """`est` with a throughput residual that has far trees too (fitted on several sources, as a calibration
    file of an earlier release has them): one on the work's shape, five sources of synthetic rows."""
    from tuneplan.estimators.residual import TuneplanCorrection
    from tuneplan.learn.learners import CAPACITY_GRID, fit_residual

    names = est.residual.thr.features(())
    rng = np.random.default_rng(5)
    X = rng.uniform(0.0, 1.0, size=(200, len(names)))
    y = 0.3 * np.sin(3.0 * X[:, 0]) + rng.normal(0.0, 0.02, 200)
    groups = np.repeat([f"s{k}" for k in range(5)], 40)
    res = fit_residual(X, y, names, groups, fixed=(0.5, 1.0, 0.3, dict(CAPACITY_GRID[0])), far_names=names[:3])
    return est.__class__(est.constants, TuneplanCorrection(res, None), "far")


def test_calibration_forests(calibrated_estimator):
    est = _with_far_trees(calibrated_estimator)
    corr = est.residual
    rng = np.random.default_rng(0)
    forests = [calibrated_estimator.residual.thr.forest, corr.thr.forest, corr.thr.far_forest]
    assert all(f is not None for f in forests)
    for f in forests:
        n_feat = int(f.feature.max()) + 1
        thr = f.threshold[~f.leaf]
        X = rng.choice(np.concatenate([thr, thr + 1e-9, thr - 1e-9, [np.nan]]), size=(6000, n_feat))
        noise = rng.random(X.shape) < 0.5
        X[noise] = rng.normal(0.0, 3.0, size=int(noise.sum()))
        assert np.allclose(fast_forest(f).predict(X), f.predict(X), rtol=1e-12, atol=1e-12)
        finite = X[~np.isnan(X).any(axis=1)]
        assert np.allclose(fast_forest(f).predict(finite), f.predict(finite), rtol=1e-12, atol=1e-12)
    fast = accelerated(est)
    assert fast is not est and fast.residual is not est.residual
    assert isinstance(fast.residual.thr.forest, FastForest)
    assert isinstance(fast.residual.thr.far_forest, FastForest)
    assert not isinstance(est.residual.thr.forest, FastForest)  # the original is untouched


def test_accelerated_leaves_other_estimators_alone():
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

    plain = TuneplanEstimator()
    assert accelerated(plain) is plain

    class Odd:
        residual = object()

    odd = Odd()
    assert accelerated(odd) is odd
