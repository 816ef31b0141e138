"""What the learner may take from measured rows and how its correction transfers: token counts only
where they are known, sources weighing the same in the constants' fit, and the residual's share chosen
by the distance to the nearest measured configuration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tests.conftest import reference_dir

from tuneplan.estimators.residual import Residual, nearest_distance
from tuneplan.estimators.residual_fit import CAPACITY_GRID, fit_residual, source_weights, weighted_median
from tuneplan.learn.measured import measured_tokens_per_s, uncounted_token_rows

NAMES = ("a", "b", "c")


def test_tokens_only_where_the_tokens_per_sample_are_known():
    raw = pd.DataFrame({"samples_per_s": [2.0, 2.0], "seq_len": [1024, 1024], "avg_tokens_per_sample": [np.nan, 300]})
    # a raw table (not normalised): mean real tokens first, else seq_len
    assert measured_tokens_per_s(raw).tolist() == [2048.0, 600.0]
    # a normalised table has already derived every token figure it can: samples/s alone is not tokens/s
    norm = raw.assign(usable_throughput=True, tokens_per_s=[np.nan, 600.0])
    t = measured_tokens_per_s(norm)
    assert np.isnan(t[0]) and t[1] == 600.0
    assert uncounted_token_rows(norm).tolist() == [True, False]


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not beside the checkout")
def test_reference_rows_without_token_counts_are_left_out_and_said():
    from tuneplan.learn.measured import training_set
    from tuneplan.runs.io import read_runs

    ts = training_set(read_runs([reference_dir() / "ms-swift.csv", reference_dir() / "litgpt.csv"]).df)
    swift = ts.source == "ms-swift"
    has_avg = ts.df["avg_tokens_per_sample"].notna().to_numpy()
    # ms-swift's samples vary in length: tokens/s only where the mean tokens per sample is known
    assert np.all(np.isnan(ts.tokens_per_s[swift & ~has_avg]))
    assert np.all(np.isfinite(ts.tokens_per_s[swift & has_avg & ts.df["samples_per_s"].notna().to_numpy()]))
    assert any("no token count" in n for n in ts.notes)
    # litgpt's Thunder pre-training streams fixed blocks: tokens = samples x seq_len
    thunder = ts.df["source_ref"].str.contains("extensions/thunder").to_numpy()
    assert thunder.sum() >= 6 and np.all(np.isfinite(ts.tokens_per_s[thunder]))


def test_every_source_weighs_the_same_in_the_constants_fit():
    src = np.array(["big"] * 300 + ["small"] * 10 + ["mid"] * 30)
    w2 = source_weights(src, len(src)) ** 2  # squared: the row weights
    assert w2.sum() == pytest.approx(1.0)
    for s in ("big", "small", "mid"):
        assert w2[src == s].sum() == pytest.approx(1 / 3)
    assert (source_weights(None, 4) ** 2).sum() == pytest.approx(1.0)


def test_weighted_median():
    assert weighted_median(np.array([1.0, 2.0, 3.0]), np.ones(3)) == 2.0
    assert weighted_median(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 10.0])) == 3.0


def test_nearest_distance_in_span_units():
    pts = np.array([[0.0, 0.0], [1.0, 1.0]])
    d = nearest_distance(np.array([[0.0, 0.0], [0.5, 0.0], [3.0, 1.0]]), pts, np.array([2.0, 1.0]))
    assert d.tolist() == pytest.approx([0.0, 0.25, 1.0])


def _sources(n_src=5, n=40, seed=0, clustered=False):
    rng = np.random.default_rng(seed)
    X, g = [], []
    for k in range(n_src):
        x = rng.uniform(0, 1, size=(n, 3))
        if clustered:
            x[:, 0] = x[:, 0] * 0.2 + k  # each source in its own region
        X.append(x)
        g += [f"s{k}"] * n
    return np.vstack(X), np.array(g), rng


def test_a_correction_that_holds_everywhere_transfers_to_new_sources():
    X, g, rng = _sources()
    y = 0.4 * np.sin(3 * X[:, 1]) + 0.3 * X[:, 2] + rng.normal(0, 0.01, len(g))
    res = fit_residual(X, y, NAMES, g)
    assert res.capacity in [dict(c) for c in CAPACITY_GRID]
    new = np.random.default_rng(9).uniform(0, 1, size=(200, 3))
    assert np.median(res.share(new)) >= 0.75
    pred, _ = res(new)
    truth = 0.4 * np.sin(3 * new[:, 1]) + 0.3 * new[:, 2]
    assert np.median(np.abs(pred - truth)) < 0.05


def test_a_source_specific_correction_is_not_carried_to_new_stacks():
    X, g, rng = _sources(clustered=True)
    offsets = {f"s{k}": v for k, v in enumerate([0.4, -0.3, 0.25, -0.35, 0.3])}
    y = np.array([offsets[s] for s in g]) + rng.normal(0, 0.01, len(g))
    res = fit_residual(X, y, NAMES, g)
    # chosen on held-out sources: one source's own offset tells nothing about another's, so a fit on
    # several sources (the shipped calibration, used on a new user's stack) applies little or none of it
    assert res.near <= 0.25 and res.shrink <= 0.25
    assert np.all(res.share(X[:5] + 0.001) <= 0.25)
    # a user's own stack (rows of one source): the correction applies in full next to its rows
    own = g == "s0"
    mine = fit_residual(X[own], y[own], NAMES, g[own])
    assert np.all(mine.share(X[own][:5] + 0.001) > 0.7)
    pred, _ = mine(X[own][:5])
    assert np.median(np.abs(pred - 0.4)) < 0.05


def test_residual_files_round_trip_and_old_box_files_still_load():
    X, g, rng = _sources(n_src=3, n=40)
    y = 0.2 * X[:, 0]
    res = fit_residual(X, y, NAMES, g)
    back = Residual.from_dict(res.to_dict())
    assert back.capacity == res.capacity and back.points.shape == X.shape
    assert np.allclose(back(X)[0], res(X)[0])
    assert back.features(("x", "y", "z")) == NAMES
    old = res.to_dict()
    old.pop("points"), old.pop("capacity")
    old["boxes"] = [[[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]]
    legacy = Residual.from_dict(old)
    assert legacy.distance(np.array([[0.5, 0.5, 0.5], [2.0, 0.5, 0.5]])).tolist() == pytest.approx([0.0, 1.0 / np.ptp(X[:, 0])])



def test_far_trees_see_the_work_shape_only_and_apply_away_from_measured_rows():
    # five sources, each on its own machine ("m") with its own offset, and an effect of the work's
    # shape ("w") that holds on every machine
    rng = np.random.default_rng(3)
    X, y, g = [], [], []
    for k, off in enumerate([0.3, -0.3, 0.2, -0.2, 0.25]):
        w = rng.uniform(0, 1, 40)
        X.append(np.column_stack([w, np.full(40, float(k))]))
        y.append(off + 0.5 * np.sin(3 * w))
        g += [f"s{k}"] * 40
    X, y, g = np.vstack(X), np.concatenate(y), np.array(g)
    res = fit_residual(X, y, ("w", "m"), g, fixed=(1.0, 1.0, 0.01, dict(CAPACITY_GRID[0])), far_names=("w",))
    assert res.far_model["features"] == ["w"] and res.far_columns == [0]
    # next to a measured row: the trees on every feature, the machine's own offset included
    assert np.allclose(res(X[:5])[0], res.forest.predict(X[:5]), atol=1e-3)
    assert np.median(np.abs(res(X)[0] - y)) < 0.05
    # a new machine between the measured ones: the shape's trees, whatever the machine
    a, b = np.array([[0.3, 2.5]]), np.array([[0.3, 1.5]])
    assert res(a)[0] == pytest.approx(res(b)[0], abs=1e-3)
    assert res(a)[0] == pytest.approx(res.far_forest.predict(np.array([[0.3]])), abs=1e-3)
    back = Residual.from_dict(res.to_dict())
    # (the stored rows are rounded to 6 digits: the nearness gate moves by as little)
    assert np.allclose(back(np.vstack([a, X[:5]]))[0], res(np.vstack([a, X[:5]]))[0], atol=1e-4)
    # without far features (and with fewer than three sources to hold out) one set of trees serves both
    assert fit_residual(X, y, ("w", "m"), g, fixed=(1.0, 1.0, 0.01)).far_model is None
    assert fit_residual(X[g < "s2"], y[g < "s2"], ("w", "m"), g[g < "s2"], far_names=("w",)).far_model is None
