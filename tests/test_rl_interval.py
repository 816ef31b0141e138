"""An RL estimate whose mean completion length is not given: its interval spans the range the mean can
take (estimators/rl_stages.py mean_spread), the stage evaluated at the mean's floor and at the cap,
multiplied into the learned width (learn/intervals.py attach_interval) and named with its size."""

from __future__ import annotations

import pytest

import tuneplan
from tuneplan.estimators.base import get_estimator
from tuneplan.estimators.rl_stages import MEAN_FLOOR, mean_spread, rl_stage
from tuneplan.estimators.stage_run import first_value
from tuneplan.physics import stages as ps
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import resolve_gpu
from tuneplan.specs.job import make_job

GPU, MODEL = "H100-SXM5-80GB", "Qwen/Qwen2.5-7B"
CAP_ONLY = dict(method="full", sharding="fsdp", stage="grpo", gpus=8, micro_batch=4, grad_accum=4, seq_len=512,
                group_size=8, grad_ckpt=True, rollout_engine="vllm", rollout_sleep=True, completion_len_max=4096,
               precision="bf16", padding="longest")  # recipe and padding said: the spread ranks among the 3 named


def test_tail_of_the_longest_alone_by_hand():
    # share 0: only the longest still decodes - 300 steps (mean 100 -> max 400) of a batch of one at context
    # 10 + 250 = 260; memory-bound: (1e9 weight bytes + 1 x 1e3 B x 260) / 1e12 B/s per step
    t = ps.decode_tail_s(100, 400, 10, 16, 1e9, 1e3, 1.0, 1e12, 1.0, 1e15, 0.0, share=0.0)
    assert t == pytest.approx(300 * (1e9 + 1e3 * 260) / 1e12)


def test_spread_is_the_stage_at_the_two_means():
    est, m, g = get_estimator("tuneplan", None), resolve_model(MODEL), resolve_gpu(GPU)
    job = make_job(**CAP_ONLY)
    run = rl_stage(est, m, g, job, 512, False)
    sp = mean_spread(est, m, g, job, 512, run)

    def step(r):
        return first_value(r.out["step_s"])

    floor = rl_stage(est, m, g, job.updated(completion_len=MEAN_FLOOR, completion_len_max=4096), 512, False, 0.0)
    full = rl_stage(est, m, g, job.updated(completion_len=4096, completion_len_max=4096), 512, False)
    assert (sp["mean_low"], sp["mean_high"]) == (1, 4096)
    # the step time grows with the mean: the bounds are the ratios of the step at the floor and at the cap
    assert step(floor) < step(run) < step(full)
    assert sp["step_s"] == pytest.approx((step(floor) / step(run), step(full) / step(run)))
    assert "rollout_decode_tail_s" not in full.out  # every completion at the cap: no tail
    mem = [first_value(r.out["memory_gib"]) for r in (floor, run, full)]
    assert sp["memory_gib"] == pytest.approx((min(mem) / mem[1], max(mem) / mem[1]))
    # the mean given, or a preference stage: no spread
    given = make_job(**{**CAP_ONLY, "completion_len": 2048})
    assert mean_spread(est, m, g, given, 512, rl_stage(est, m, g, given, 512, False)) is None


def test_interval_multiplies_the_learned_width_by_the_spread():
    cap = tuneplan.estimate(MODEL, GPU, **CAP_ONLY)
    # the same estimate with its assumed mean (half the cap) given: the learned width alone
    said = tuneplan.estimate(MODEL, GPU, **CAP_ONLY, completion_len=2048)
    assert cap.step_time_s == pytest.approx(said.step_time_s)
    iv, base = cap.interval, said.interval
    sp = iv["completion_len_spread"]
    assert "completion_len_spread" not in base and "completion_len_spread" not in cap.to_dict()["stage"]
    for key, ratio in (("step_time_s", "step_s"), ("tokens_per_s", "tokens_per_s"),
                       ("memory_per_gpu_gib", "memory_gib")):
        assert iv[f"{key}_low"] == pytest.approx(base[f"{key}_low"] * sp[ratio][0])
        assert iv[f"{key}_high"] == pytest.approx(base[f"{key}_high"] * sp[ratio][1])
    lo, hi = sp["step_s"]
    assert lo < 1.0 < hi
    assert f"mean completion length not given (x{lo:.3g}-x{hi:.3g})" in iv["why"]
    assert not any("mean completion" in w for w in base["why"])
    assert any("from 1 token" in a and "to 4096" in a for a in cap.assumptions)


def test_neither_mean_nor_cap_spans_up_to_the_default_length():
    kw = {k: v for k, v in CAP_ONLY.items() if k != "completion_len_max"}
    sp = tuneplan.estimate(MODEL, GPU, **kw).interval["completion_len_spread"]
    # the default length is generated to full: it is the cap, the estimate the upper bound
    assert sp["mean_high"] == ps.COMPLETION_LEN and sp["step_s"][1] == pytest.approx(1.0)
    assert sp["step_s"][0] < 1.0
