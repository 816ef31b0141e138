"""The nearest measured configuration's share of a user's own-stack throughput correction
(estimators.residual_fit.NEIGHBOUR_SHARE): what it adds to the trees, and where it is (not) fitted."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.estimators.residual import Residual, nearest_values
from tuneplan.estimators.residual_fit import NEIGHBOUR_SHARE, fit_residual

NAMES = ("a", "b")


def _rows(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, size=(n, 2))
    y = 0.3 * np.sin(6 * X[:, 0]) + 0.1 * X[:, 1] + rng.normal(0, 0.02, n)
    return X, y


def test_the_nearest_row_gives_its_own_value():
    points = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, np.nan]])
    values = [0.1, -0.2, 0.3]
    span = np.array([1.0, 1.0])
    X = np.array([[0.1, 0.1], [0.9, 0.8], [0.55, 0.9], [0.0, 0.0]])
    got = nearest_values(X, points, values, span)
    assert got.tolist() == [0.1, -0.2, 0.3, 0.1]  # the third point lacks b: it counts 0


def test_a_training_row_gets_the_mean_of_the_trees_and_its_own_residual():
    X, y = _rows()
    r = fit_residual(X, y, NAMES, np.array(["mine"] * len(y)), neighbour_share=NEIGHBOUR_SHARE)
    trees_only = Residual(r.model, r.lo, r.hi, 1.0, 1.0, r.tau, None, r.capacity, X.tolist())
    corr, weight = r(X)
    assert np.allclose(weight, 1.0)  # a user's own stack: in full
    tree_corr = trees_only(X)[0]
    assert np.allclose(corr, (1 - NEIGHBOUR_SHARE) * tree_corr + NEIGHBOUR_SHARE * y)
    assert np.median(np.abs(corr - y)) < np.median(np.abs(tree_corr - y))  # closer to what was measured


def test_the_share_survives_the_calibration_file():
    X, y = _rows(seed=1)
    r = fit_residual(X, y, NAMES, None, neighbour_share=NEIGHBOUR_SHARE)
    back = Residual.from_dict(r.to_dict())
    assert back.value_share == NEIGHBOUR_SHARE and len(back.values) == len(y)
    probe = np.array([[0.2, 0.7], [0.8, 0.1], [1.3, 0.5]])  # the last one outside the training range
    a, _ = back(probe)
    b, _ = r(probe)
    assert a.tolist() == pytest.approx(b.tolist(), abs=1e-5)  # the file keeps 6 decimals
    old = r.to_dict()
    old.pop("values"), old.pop("value_share")
    assert Residual.from_dict(old).value_share == 0.0  # a file written before: trees alone


def test_rows_of_several_sources_are_not_given_a_neighbour_share():
    X, y = _rows(60, seed=2)
    sources = np.array(["s1", "s2", "s3"] * 20)
    r = fit_residual(X, y, NAMES, sources, neighbour_share=NEIGHBOUR_SHARE)
    assert r.value_share == 0.0 and r.values is None
    assert "values" not in r.to_dict()


def test_the_learner_gives_the_share_to_throughput_only(calibrated_estimator):
    corr = calibrated_estimator.residual
    assert corr.thr.value_share == NEIGHBOUR_SHARE
    assert corr.mem is None or corr.mem.value_share == 0.0


def test_the_estimate_says_how_its_correction_is_made(calibrated_estimator, monkeypatch):
    from tuneplan import api

    monkeypatch.setattr("tuneplan.estimators.base.get_estimator", lambda name, calibration=None: calibrated_estimator)
    r = api.estimate("meta-llama/Llama-3.1-8B", "H200-SXM-141GB", method="lora", examples=2000, seq_len=2048)
    said = [a for a in r.assumptions if a.startswith("Calibration 'h200'")]
    assert said and "50% of it the nearest measured run's error" in said[0]
