"""The calibration's boosted trees (estimators/trees.py): one evaluator gives the trees' own predictions,
the same figure for a row whatever batch it is in, and scikit-learn's for an exported model."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.estimators.trees import Forest, export_hgb


def random_model(rng, n_trees=20, n_features=5) -> dict:
    """Random small trees as `export_hgb` writes them (children numbered after their parent)."""
    trees = []
    for _ in range(n_trees):
        nodes = [0]
        n_internal = int(rng.integers(0, 8))
        count = 1
        spec = {}
        while nodes and len(spec) < n_internal:  # grown breadth-first: ids increase with depth
            i = nodes.pop(0)
            spec[i] = (count, count + 1)
            nodes += [count, count + 1]
            count += 2
        t = {k: [] for k in ("value", "feature", "threshold", "missing_left", "left", "right", "leaf")}
        for i in range(count):
            inner = i in spec
            t["value"].append(0.0 if inner else float(rng.normal()))
            t["feature"].append(int(rng.integers(0, n_features)) if inner else 0)
            t["threshold"].append(float(rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0])) if inner else 0.0)
            t["missing_left"].append(int(rng.integers(0, 2)) if inner else 0)
            t["left"].append(spec[i][0] if inner else 0)
            t["right"].append(spec[i][1] if inner else 0)
            t["leaf"].append(0 if inner else 1)
        trees.append(t)
    return {"kind": "hgb-regressor", "baseline": 0.3, "features": [f"f{j}" for j in range(n_features)],
            "trees": trees}


def reference_predict(model: dict, X: np.ndarray) -> np.ndarray:
    """The plain definition: each row down each tree, NaN going the node's missing-value way."""
    out = np.full(len(X), model["baseline"])
    for r, x in enumerate(X):
        for t in model["trees"]:
            i = 0
            while not t["leaf"][i]:
                v = x[t["feature"][i]]
                go_left = t["missing_left"][i] if np.isnan(v) else v <= t["threshold"][i]
                i = t["left"][i] if go_left else t["right"][i]
            out[r] += t["value"][i]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_random_forests_predict_the_walk_of_each_tree(seed):
    rng = np.random.default_rng(seed)
    model = random_model(rng)
    X = rng.choice([-2.0, -1.0, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0, np.nan, np.inf, -np.inf], size=(300, 5))
    got = Forest(model).predict(X)
    assert np.allclose(got, reference_predict(model, X), rtol=0, atol=1e-12)
    # a row's figure is the same alone, in any batch, in chunks of any size, and on the one-estimate path
    f = Forest(model)
    f.CHUNK = 7
    assert np.array_equal(f.predict(X), got)
    assert np.array_equal(np.concatenate([Forest(model).predict(X[i:i + 1]) for i in range(20)]), got[:20])
    assert np.array_equal(Forest(model).predict(X[::-1]), got[::-1])


def test_parent_before_child_order_is_checked():
    model = random_model(np.random.default_rng(1), n_trees=1)
    t = model["trees"][0] = {"value": [0.0, 1.0, 2.0], "feature": [0, 0, 0], "threshold": [0.5, 0.0, 0.0],
                             "missing_left": [0, 0, 0], "left": [0, 0, 0], "right": [2, 0, 0], "leaf": [0, 1, 1]}
    assert t["left"][0] == 0  # a child numbered before (here: as) its parent
    with pytest.raises(ValueError, match="parent-before-child"):
        Forest(model).predict(np.zeros((3, 5)))


def test_exported_hgb_predicts_as_scikit_learn():
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.sin(2 * np.nan_to_num(X[:, 0])) + 0.5 * np.nan_to_num(X[:, 1]) ** 2 + rng.normal(0, 0.05, 400)
    hgb = HistGradientBoostingRegressor(max_iter=60, random_state=0).fit(X, y)
    model = export_hgb(hgb, ["a", "b", "c", "d"])
    Xt = rng.normal(size=(3000, 4))
    Xt[rng.random(Xt.shape) < 0.1] = np.nan
    assert np.allclose(Forest(model).predict(Xt), hgb.predict(Xt), rtol=1e-12, atol=1e-12)


def test_calibration_forests_predict_the_walk_of_each_tree(calibrated_estimator):
    for f in (calibrated_estimator.residual.thr.forest,):
        model = {"baseline": f.baseline, "trees": f.trees}
        n_feat = int(f.nodes["feature"].max()) + 1
        thr = f.nodes["threshold"][~f.nodes["leaf"]]
        rng = np.random.default_rng(0)
        X = rng.choice(np.concatenate([thr, thr + 1e-9, thr - 1e-9, [np.nan]]), size=(500, n_feat))
        assert np.allclose(f.predict(X), reference_predict(model, X), rtol=0, atol=1e-12)
