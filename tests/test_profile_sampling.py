"""Smart sampling on PLANTED step-time functions (no torch): anchors first, then the largest
bootstrap spread per second of predicted cost, stopping at the budget or the target error."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.profile.config import parse_duration
from tuneplan.profile.sampling import (
    FeatureMap,
    Learner,
    Measurement,
    anchor_order,
    estimate_overhead,
    heldout_error,
    random_sample,
    score_candidates,
    smart_sample,
)

STEPS = 10


def space() -> list[dict]:
    return [dict(micro_batch=mb, seq_len=s, layers=n, method=m)
            for m, mb, s, n in itertools.product(["full", "lora"], [1, 2, 4, 8], [128, 256, 512, 1024], [2, 4, 8])]


def planted(c: dict) -> float:
    """Not log-linear: a fixed overhead plus compute (so the law has something to learn)."""
    tokens = c["micro_batch"] * c["seq_len"]
    per_layer = (2.0 if c["method"] == "full" else 1.3) * tokens * (1 + c["seq_len"] / 2048)
    return 0.01 + 2e-6 * c["layers"] * per_layer


def cost(c: dict, t: float) -> float:
    return 1.0 + STEPS * t


def noisy(seed: int = 0):
    rng = np.random.default_rng(seed)

    def measure(c: dict) -> Measurement:
        t = planted(c) * math.exp(rng.normal(0, 0.02))
        return Measurement(t, cost(c, t))

    return measure


def test_anchors_are_cheapest_corner_then_one_step_along_each_axis():
    cands = space()
    fmap = FeatureMap(cands)
    assert fmap.numeric == ["micro_batch", "seq_len", "layers"]
    assert list(fmap.categorical) == ["method"]
    got = [cands[i] for i in anchor_order(fmap, cands)]
    base = dict(micro_batch=1, seq_len=128, layers=2, method="full")
    assert got[0] == base
    expected = [dict(base, method="lora"), dict(base, micro_batch=2), dict(base, seq_len=256),
                dict(base, layers=4)]
    assert len(got) == fmap.n_linear == 5
    assert sorted(map(str, got[1:])) == sorted(map(str, expected))


def test_choice_order_anchors_then_max_spread_per_cost():
    cands = space()
    budget = 60.0
    res = smart_sample(cands, noisy(1), budget, target_error=0.0, steps_per_run=STEPS, seed=3)
    fmap = FeatureMap(cands)
    anchors = anchor_order(fmap, cands)
    n_anchor = len(anchors)
    assert res.order[:n_anchor] == anchors
    assert [c.phase for c in res.trace[:n_anchor]] == ["anchor"] * n_anchor
    assert all(c.phase == "uncertainty" for c in res.trace[n_anchor:])
    assert len(res.order) > n_anchor + 3
    # replay: each later choice is the argmax of spread / predicted cost among what fits the budget
    spent = sum(m.cost_s for m in res.measurements[:n_anchor])
    for k in range(n_anchor, len(res.order)):
        done = res.order[:k]
        train = [cands[i] for i in done]
        ys = [res.measurements[j].step_time_s for j in range(k)]
        learner = Learner(fmap, n_boot=32, seed=3 + k).fit(train, ys)  # the sampler's defaults
        left = [i for i in range(len(cands)) if i not in done]
        overhead = estimate_overhead(res.measurements[:k], STEPS)
        score, _, pred = score_candidates(learner, [cands[i] for i in left], overhead, STEPS)
        fits = pred <= budget - spent
        best = left[int(np.argmax(np.where(fits, score, -np.inf)))]
        assert res.order[k] == best, f"choice {k}"
        assert res.trace[k].pred_cost_s <= budget - spent + 1e-9
        spent += res.measurements[k].cost_s
    # stops at the budget: spent within it, and nothing left that is predicted to fit
    assert res.stop_reason == "budget"
    assert res.spent_s <= budget
    done = res.order
    learner = Learner(fmap, n_boot=32, seed=3 + len(done)).fit(
        [cands[i] for i in done], [m.step_time_s for m in res.measurements])
    left = [i for i in range(len(cands)) if i not in done]
    _, _, pred = score_candidates(learner, [cands[i] for i in left],
                                  estimate_overhead(res.measurements, STEPS), STEPS)
    assert (pred > budget - res.spent_s).all()


def test_stops_at_target_error_on_an_exact_law():
    cands = space()

    def measure(c):
        t = 1e-4 * c["micro_batch"] ** 0.9 * c["seq_len"] ** 1.1 * c["layers"] * (0.7 if c["method"] == "lora" else 1)
        return Measurement(t, cost(c, t))

    res = smart_sample(cands, measure, budget_s=1e6, target_error=0.01, steps_per_run=STEPS)
    assert res.stop_reason == "target"
    assert len(res.order) < 15
    assert res.curve[-1].loo_error is not None and res.curve[-1].loo_error < 0.01
    assert [p.n_runs for p in res.curve] == list(range(1, len(res.order) + 1))


def test_oom_makes_larger_configs_infeasible():
    cands = [c for c in space() if c["layers"] == 2]

    def measure(c):
        if c["micro_batch"] >= 4 and c["seq_len"] >= 512:
            return Measurement(None, 2.0, "oom")
        t = planted(c)
        return Measurement(t, cost(c, t))

    res = smart_sample(cands, measure, budget_s=1e6, target_error=0.0, steps_per_run=STEPS)
    measured = [cands[i] for i in res.order]
    ooms = [c for c, m in zip(measured, res.measurements, strict=True) if m.status == "oom"]
    assert ooms
    for o in ooms:  # nothing measured after an oom that dominates it
        k = measured.index(o)
        for c in measured[k + 1:]:
            assert not (c["method"] == o["method"] and all(c[x] >= o[x] for x in ("micro_batch", "seq_len", "layers")))
    assert res.stop_reason == "exhausted"


def test_budget_under_one_step_is_an_input_error():
    cands = space()
    with pytest.raises(InputError, match="under one step"):
        smart_sample(cands, lambda c: Measurement(5.0, 60.0), budget_s=2.0)
    with pytest.raises(InputError):
        smart_sample(cands, lambda c: Measurement(5.0, 60.0), budget_s=0)


def test_smart_beats_random_at_equal_cost_on_planted_function():
    cands = space()
    truth = [planted(c) for c in cands]
    fmap = FeatureMap(cands)
    full = sum(cost(c, t) for c, t in zip(cands, truth, strict=True))
    wins = 0
    for seed in range(3):
        got = {}
        meas = noisy(seed)

        def m(c, meas=meas, got=got):
            r = meas(c)
            got[cands.index(c)] = r.step_time_s
            return r

        res = smart_sample(cands, m, 0.15 * full, target_error=0.0, steps_per_run=STEPS, seed=seed)
        test = [i for i in range(len(cands)) if i not in res.order]
        e_smart = heldout_error(fmap, [cands[i] for i in res.order], [got[i] for i in res.order],
                                [cands[i] for i in test], [truth[i] for i in test])
        idx = random_sample(cands, lambda i: cost(cands[i], truth[i]), res.spent_s, seed=seed)
        rm = noisy(100 + seed)
        ry = [rm(cands[i]).step_time_s for i in idx]
        rtest = [i for i in range(len(cands)) if i not in idx]
        e_rand = heldout_error(fmap, [cands[i] for i in idx], ry, [cands[i] for i in rtest], [truth[i] for i in rtest])
        wins += e_smart < e_rand
    assert wins >= 2


def test_measure_may_return_rows_or_floats():
    cands = [dict(micro_batch=mb) for mb in (1, 2, 4, 8)]
    res = smart_sample(cands, lambda c: {"step_time_s": 0.1 * c["micro_batch"], "wall_s": 1.0, "status": "ok"},
                       budget_s=100, target_error=0.0)
    assert res.stop_reason == "exhausted" and len(res.order) == 4
    res = smart_sample(cands, lambda c: 0.1 * c["micro_batch"], budget_s=100, target_error=0.0)
    assert len(res.order) == 4


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400),
                                          ("600", 600), ("2.5m", 150)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "abc", "10x", "-5m"])
def test_parse_duration_bad(text):
    with pytest.raises(InputError, match="budget"):
        parse_duration(text)
