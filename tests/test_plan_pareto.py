"""The cost-time Pareto front against the O(n^2) definition, on random points with ties."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneplan.plan.pareto import pareto_mask


def pareto_mask_bruteforce(time: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The O(n^2) definition: finite points that no other finite point is at least as good as in both
    and strictly better in one."""
    t, c = np.asarray(time, dtype=float), np.asarray(cost, dtype=float)
    ok = np.isfinite(t) & np.isfinite(c)
    tj, cj = t[ok][None, :], c[ok][None, :]
    dominated = ((tj <= t[:, None]) & (cj <= c[:, None]) & ((tj < t[:, None]) | (cj < c[:, None]))).any(axis=1)
    return ok & ~dominated

coord = st.one_of(st.integers(0, 6).map(float), st.floats(0, 100, allow_nan=False),
                  st.just(float("nan")), st.just(float("inf")))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(coord, coord), min_size=0, max_size=40))
def test_pareto_matches_brute_force(points):
    t = np.array([p[0] for p in points], dtype=float)
    c = np.array([p[1] for p in points], dtype=float)
    assert (pareto_mask(t, c) == pareto_mask_bruteforce(t, c)).all()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=60))
def test_front_properties(points):
    t = np.array([p[0] for p in points], dtype=float)
    c = np.array([p[1] for p in points], dtype=float)
    m = pareto_mask(t, c)
    # the fastest-then-cheapest and the cheapest-then-fastest points are always on the front
    assert m[np.lexsort((c, t))[0]] and m[np.lexsort((t, c))[0]]
    # along the front, sorted by time, cost strictly falls (equal points aside)
    ft, fc = t[m], c[m]
    order = np.lexsort((fc, ft))
    ft, fc = ft[order], fc[order]
    for i in range(1, len(ft)):
        if (ft[i], fc[i]) != (ft[i - 1], fc[i - 1]):
            assert ft[i] > ft[i - 1] and fc[i] < fc[i - 1]
    # every point off the front is dominated by one on it
    for i in np.flatnonzero(~m):
        assert ((ft <= t[i]) & (fc <= c[i]) & ((ft < t[i]) | (fc < c[i]))).any()


def test_pareto_column_of_a_plan():
    from tuneplan.plan.search import plan_run as plan

    r = plan("meta-llama/Llama-3.1-8B", gpus=["A100-SXM4-80GB", "L40S-48GB"], methods=["lora", "full"],
             max_gpus=8, examples=10_000, tokens_per_example=512, interval=None)
    df = r.candidates
    want = pareto_mask_bruteforce(df["time_s"].to_numpy(), df["cost_usd"].to_numpy())
    assert (df["pareto"].to_numpy() == want).all()
    assert len(r.pareto) == int(want.sum()) and r.pareto["time_s"].is_monotonic_increasing
    assert r.recommended["pareto"]  # the cheapest is on the front
