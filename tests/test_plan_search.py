"""The planner's search: a planted case with a known optimum, agreement with `tuneplan.estimate`,
constraints, objectives, the infeasible listing, the grid, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tuneplan
from tuneplan.errors import InputError, UnknownNameError
from tuneplan.plan.search import OBJECTIVES
from tuneplan.plan.search import plan_run as plan
from tuneplan.plan.space import Space, enumerate_grid, gpu_counts
from tuneplan.plan.units import hours, money, parse_duration, parse_money
from tuneplan.specs.gpu import gpu_from_dict

MODEL = "meta-llama/Llama-3.1-8B"
WORK = {"examples": 20_000, "tokens_per_example": 512, "epochs": 2}


def fake_gpu(name: str, tflops: float, mem: float = 80.0, bw: float = 3000.0, tdp: float = 500.0):
    return gpu_from_dict({"name": name, "memory_gib": mem, "memory_bandwidth_gbs": bw, "peak_tflops": tflops,
                          "tdp_w": tdp, "intra_node_gbs": 450})


@pytest.fixture()
def planted_prices(tmp_path):
    p = tmp_path / "planted_prices.yaml"
    p.write_text(
        "prices:\n"
        "  - {provider: Planted, gpu: planted-fast, usd_per_gpu_hour: 1.0, pricing_kind: on-demand,\n"
        "     date_seen: '2026-01-01', source: test}\n"
        "  - {provider: Planted, gpu: planted-slow, usd_per_gpu_hour: 3.0, pricing_kind: on-demand,\n"
        "     date_seen: '2026-01-01', source: test}\n", encoding="utf-8")
    return str(p)


# --- a planted case ---------------------------------------------------------------------------

def test_planted_dominating_gpu_wins(planted_prices):
    """planted-fast is 4x the FLOP/s at a third of the price: every objective must pick it."""
    fast, slow = fake_gpu("planted-fast", 800.0), fake_gpu("planted-slow", 200.0)
    for objective in OBJECTIVES:
        r = plan(MODEL, gpus=[slow, fast], methods=["lora"], max_gpus=4, prices=planted_prices,
                 objective=objective, interval=None, **WORK)
        assert r.ok, r.message
        assert r.recommended["gpu"] == "planted-fast", objective
        assert r.prices["planted-slow"]["usd_per_gpu_hour"] == 3.0
    # and the slow GPU is never on the cost-time front
    assert set(r.pareto["gpu"]) == {"planted-fast"}


def test_planted_known_optimum_matches_brute_force(planted_prices):
    """The cheapest configuration meeting a deadline, found by brute force over `tuneplan.estimate`."""
    fast, slow = fake_gpu("planted-fast", 800.0), fake_gpu("planted-slow", 200.0)
    grid = dict(gpus=[fast, slow], methods=["lora", "full"], max_gpus=4, micro_batches=[2, 8],
                shardings=["ddp", "fsdp"], grad_ckpt=(False, True), global_batch=16)
    free = plan(MODEL, prices=planted_prices, interval=None, **grid, **WORK)
    # a deadline between the fastest and the slowest fitting configuration
    deadline = float(np.quantile(free.candidates["time_s"], 0.3))
    r = plan(MODEL, prices=planted_prices, interval=None, deadline_s=deadline, **grid, **WORK)
    best = None
    for g, m, n, mb, sh, ck in itertools.product((fast, slow), ("lora", "full"), (1, 2, 4), (2, 8),
                                                   ("ddp", "fsdp"), (False, True)):
        if n == 1 and sh == "fsdp":
            continue
        ga = max(1, round(16 / (mb * n)))
        if not 8 <= mb * n * ga <= 32:
            continue
        e = tuneplan.estimate(MODEL, g, method=m, gpus=n, micro_batch=mb, grad_accum=ga, sharding=sh,
                              grad_ckpt=ck, prices=planted_prices, interval=None, **WORK)
        if e.fits and e.wall_clock_s <= deadline and (best is None or round(e.cost_usd, 2) < round(best[0], 2)
                                                       or (round(e.cost_usd, 2) == round(best[0], 2)
                                                           and e.wall_clock_s < best[1])):
            best = (e.cost_usd, e.wall_clock_s, g.name, m, n, mb, sh, ck)
    assert best is not None
    rec = r.recommended
    assert (rec["gpu"], rec["method"], rec["gpus"], rec["micro_batch"], rec["grad_ckpt"]) == \
        (best[2], best[3], best[4], best[5], best[7])
    assert rec["cost_usd"] == pytest.approx(best[0], rel=1e-9)
    assert rec["time_s"] <= deadline


# --- agreement with the per-configuration API ---------------------------------------------------

def test_candidates_equal_estimate():
    r = plan(MODEL, gpus=["A100-SXM4-80GB", "L40S-48GB"], methods=["full", "lora", "qlora"], max_gpus=16,
             rate=2.5, save_every=300, eval_every=200, eval_examples=500, interval=None, **WORK)
    df = r.candidates
    assert len(df) > 50 and df["fits"].all()
    picks = [0, len(df) - 1] + list(np.random.default_rng(1).choice(len(df), 12, replace=False))
    picks += [int(np.flatnonzero(df["nodes"] > 1)[0]), int(np.flatnonzero(df["grad_ckpt"])[0]),
              int(np.flatnonzero(df["sharding"] == "fsdp")[0])]
    for i in picks:
        row = df.iloc[int(i)]
        e = tuneplan.estimate(MODEL, row["gpu"], method=row["method"], gpus=int(row["gpus"]), nodes=int(row["nodes"]),
                              micro_batch=int(row["micro_batch"]), grad_accum=int(row["grad_accum"]),
                              sharding="ddp" if row["sharding"] == "none" else row["sharding"],
                              grad_ckpt=bool(row["grad_ckpt"]), rate=2.5, save_every=300, eval_every=200,
                              eval_examples=500, interval=None, **WORK)
        for got, want in ((row["time_s"], e.wall_clock_s), (row["cost_usd"], e.cost_usd),
                          (row["energy_kwh"], e.energy_kwh), (row["co2_kg"], e.totals.co2_kg),
                          (row["memory_per_gpu_gib"], e.memory_per_gpu_gib), (row["tokens_per_s"], e.tokens_per_s),
                          (row["device_hours"], e.device_hours), (row["mfu"], e.mfu)):
            assert got == pytest.approx(want, rel=1e-6)
        assert int(row["steps"]) == e.totals.steps
        assert bool(row["fits"]) == e.fits


def test_default_price_is_cheapest_on_demand():
    from tuneplan.specs.prices import price_for

    r = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=2, interval=None, **WORK)
    p = price_for("H100-SXM5-80GB")
    assert r.prices["H100-SXM5-80GB"]["usd_per_gpu_hour"] == p.usd_per_gpu_hour
    row = r.candidates.iloc[0]
    assert row["cost_usd"] == pytest.approx(row["device_hours"] * p.usd_per_gpu_hour)
    aws = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=2, provider="aws", interval=None, **WORK)
    assert aws.prices["H100-SXM5-80GB"]["provider"] == "AWS"
    assert aws.recommended["cost_usd"] > r.recommended["cost_usd"]


# --- constraints and objectives -------------------------------------------------------------------

@pytest.fixture(scope="module")
def base():
    return plan(MODEL, gpus=["A100-SXM4-80GB", "H100-SXM5-80GB", "L40S-48GB"], methods=["full", "lora", "qlora"],
                max_gpus=16, interval=None, **WORK)


def test_objectives_pick_the_extremes(base):
    df = base.candidates
    assert base.recommended["cost_usd"] == pytest.approx(df["cost_usd"].min(), abs=0.006)
    kw = dict(gpus=base.gpus, methods=base.methods, max_gpus=16, interval=None, **WORK)
    fastest = plan(MODEL, objective="fastest", **kw)
    assert fastest.recommended["time_s"] == pytest.approx(df["time_s"].min(), abs=0.5)
    energy = plan(MODEL, objective="energy", **kw)
    assert energy.recommended["energy_kwh"] == pytest.approx(df["energy_kwh"].min(), abs=0.006)
    bal = plan(MODEL, objective="balanced", **kw)
    prod = (df["time_s"] * df["cost_usd"]).min()
    assert bal.recommended["time_s"] * bal.recommended["cost_usd"] == pytest.approx(prod)
    assert bal.recommended["pareto"] and fastest.recommended["pareto"]
    # the sorted table starts with the recommendation
    assert fastest.candidates.iloc[0]["time_s"] == fastest.recommended["time_s"]


def test_deadline_excludes(base):
    df = base.candidates
    deadline = float(np.quantile(df["time_s"], 0.2))
    r = plan(MODEL, gpus=base.gpus, methods=base.methods, max_gpus=16, deadline_s=deadline, interval=None, **WORK)
    assert r.ok and r.recommended["time_s"] <= deadline
    elig = r.candidates[r.candidates["eligible"]]
    assert (elig["time_s"] <= deadline).all()
    assert r.n_eligible == int((df["time_s"] <= deadline).sum())
    assert r.recommended["cost_usd"] == pytest.approx(elig["cost_usd"].min(), abs=0.006)
    assert "deadline" in r.why and r.runner_up is not None


def test_budget_excludes(base):
    df = base.candidates
    budget = float(np.quantile(df["cost_usd"], 0.1))
    r = plan(MODEL, gpus=base.gpus, methods=base.methods, max_gpus=16, budget_usd=budget, objective="fastest",
             interval=None, **WORK)
    assert r.ok and r.recommended["cost_usd"] <= budget
    assert r.recommended["time_s"] == pytest.approx(df.loc[df["cost_usd"] <= budget, "time_s"].min(), abs=0.5)
    assert "budget" in r.why


def test_nothing_meets_the_deadline(base):
    fastest = base.candidates["time_s"].min()
    r = plan(MODEL, gpus=base.gpus, methods=base.methods, max_gpus=16, deadline_s=fastest * 0.5, interval=None,
             **WORK)
    assert not r.ok and r.recommended is None
    assert r.message.startswith("no configuration meets the")
    assert "deadline" in r.message and "the fastest is" in r.message
    assert r.closest["time_s"] == pytest.approx(fastest)
    assert r.closest["description"] in r.message
    assert len(r.infeasible) == 9 and all("past the deadline" in x["reason"] for x in r.infeasible)


def test_nothing_within_budget(base):
    cheapest = base.candidates["cost_usd"].min()
    r = plan(MODEL, gpus=base.gpus, methods=base.methods, max_gpus=16, budget_usd=cheapest / 2, interval=None,
             **WORK)
    assert not r.ok
    assert "budget" in r.message and "the cheapest is" in r.message
    assert r.closest["cost_usd"] == pytest.approx(cheapest)
    assert all("over budget" in x["reason"] for x in r.infeasible)


def test_deadline_and_budget_jointly_impossible(tmp_path):
    """A fast, pricey GPU and a slow, cheap one: each constraint alone is met, both together not."""
    prices = tmp_path / "p.yaml"
    prices.write_text("prices:\n"
                      "  - {provider: P, gpu: fast-pricey, usd_per_gpu_hour: 40.0, date_seen: '2026-01', source: t}\n"
                      "  - {provider: P, gpu: slow-cheap, usd_per_gpu_hour: 1.0, date_seen: '2026-01', source: t}\n")
    gpus = [fake_gpu("fast-pricey", 900.0), fake_gpu("slow-cheap", 150.0)]
    kw = dict(gpus=gpus, methods=["lora"], max_gpus=1, micro_batches=[4], grad_ckpt=False, prices=str(prices),
              interval=None, **WORK)
    free = plan(MODEL, **kw).candidates.set_index("gpu")
    fast, slow = free.loc["fast-pricey"], free.loc["slow-cheap"]
    assert fast["time_s"] < slow["time_s"] and fast["cost_usd"] > slow["cost_usd"]
    r = plan(MODEL, deadline_s=fast["time_s"] * 1.01, budget_usd=slow["cost_usd"] * 1.01, **kw)
    assert not r.ok
    assert r.message.startswith("no configuration meets both the") and "the closest is" in r.message
    assert r.closest is not None and r.closest["gpu"] in ("fast-pricey", "slow-cheap")
    reasons = {x["gpu"]: x["reason"] for x in r.infeasible}
    assert reasons["fast-pricey"].startswith("over budget") and reasons["slow-cheap"].startswith("past the deadline")


def test_out_of_memory_listed():
    r = plan("meta-llama/Llama-3.1-70B", gpus=["L40S-48GB", "H100-SXM5-80GB"], methods=["full", "qlora"],
             max_gpus=2, examples=1000, tokens_per_example=2048, interval=None)
    oom = [x for x in r.infeasible if x["kind"] == "memory"]
    assert {x["choice"] for x in oom} >= {"L40S-48GB full", "H100-SXM5-80GB full"}
    for x in oom:
        assert x["reason"].startswith("out of memory even at micro-batch 1 with checkpointing on")
        assert "up to 2 GPUs" in x["reason"]


def test_nothing_fits():
    r = plan("meta-llama/Llama-3.1-70B", gpus=["L4-24GB"], methods=["full"], max_gpus=2, examples=1000,
             tokens_per_example=1024, interval=None)
    assert not r.ok and len(r.candidates) == 0
    assert r.message.startswith("no configuration fits in memory")
    assert r.closest["memory_per_gpu_gib"] > r.closest["memory_capacity_gib"]
    d = r.to_dict()
    assert d["ok"] is False and d["candidates"] == []


def test_missing_price_and_rate():
    r = plan(MODEL, gpus=["H100-SXM5-80GB", "L40S-48GB"], methods=["lora"], max_gpus=1, provider="Lambda",
             interval=None, **WORK)
    # Lambda prices no L40S in the shipped file: listed, not recommended
    assert r.prices["L40S-48GB"]["usd_per_gpu_hour"] is None
    assert any(x["gpu"] == "L40S-48GB" and "no price" in x["reason"] for x in r.infeasible)
    assert r.recommended["gpu"] == "H100-SXM5-80GB"
    # the fastest objective needs no price
    f = plan(MODEL, gpus=["L40S-48GB"], methods=["lora"], max_gpus=1, provider="Lambda", objective="fastest",
             interval=None, **WORK)
    assert f.ok and f.recommended["cost_usd"] is None
    with pytest.raises(InputError, match="pass --rate"):
        plan(MODEL, gpus=["L40S-48GB"], methods=["lora"], max_gpus=1, provider="Lambda", interval=None, **WORK)


def test_unknown_names_have_close_matches():
    with pytest.raises(UnknownNameError) as e:
        plan(MODEL, gpus=["H100-SXM5-80GB", "A1000-SXM4-80GB"], **WORK)
    assert e.value.field == "gpu" and "A100-SXM4-80GB" in e.value.close
    with pytest.raises(UnknownNameError) as e:
        plan(MODEL, gpus=["H100-SXM5-80GB"], provider="lamda", **WORK)
    assert e.value.field == "provider" and "Lambda" in e.value.close
    with pytest.raises(InputError, match="unknown method"):
        plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora", "prefix"], **WORK)
    with pytest.raises(InputError, match="objective"):
        plan(MODEL, gpus=["H100-SXM5-80GB"], objective="cheap", **WORK)


def test_pinned_axes_and_fixed_fields():
    r = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora", "full"], max_gpus=8, micro_batch=4, grad_ckpt=True,
             sharding="fsdp", lora_rank=64, interval=None, **WORK)
    df = r.candidates
    assert set(df["micro_batch"]) == {4} and df["grad_ckpt"].all()
    assert set(df["sharding"]) <= {"fsdp", "none"}
    lo = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=1, micro_batch=4, grad_ckpt=True,
              lora_rank=8, interval=None, **WORK)
    hi = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=1, micro_batch=4, grad_ckpt=True,
              lora_rank=256, interval=None, **WORK)
    assert hi.candidates.iloc[0]["memory_per_gpu_gib"] > lo.candidates.iloc[0]["memory_per_gpu_gib"]
    with pytest.raises(InputError):
        plan(MODEL, gpus=["H100-SXM5-80GB"], gpus_count=3, **WORK)


def test_intervals_when_residuals_are_stored(monkeypatch):
    import tuneplan.estimators.calibration as cal

    rng = np.random.default_rng(0)
    monkeypatch.setattr(cal, "interval_residuals",
                        lambda est, calibration=None: {"throughput": rng.normal(0, 0.2, 200), "source": "test"})
    r = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=2, interval=0.8, **WORK)
    df = r.candidates
    assert r.interval is not None and r.interval["coverage"] == 0.8
    assert (df["time_low_s"] < df["time_s"]).all() and (df["time_s"] < df["time_high_s"]).all()
    assert (df["cost_low_usd"] < df["cost_usd"]).all() and (df["cost_usd"] < df["cost_high_usd"]).all()
    none = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=2, interval=None, **WORK)
    assert none.candidates["time_low_s"].isna().all()


def test_to_dict_is_json_ready(base):
    import json

    d = base.to_dict()
    text = json.dumps(d)  # no NaN, no numpy types
    assert "NaN" not in text
    assert d["recommended"]["description"] and d["why"]
    assert d["n_evaluated"] >= d["n_fit"] == len(d["candidates"])
    assert {"time_s", "time_low_s", "cost_usd", "energy_kwh", "co2_kg", "tokens_per_s", "memory_per_gpu_gib",
            "fits", "gpu", "gpus", "nodes", "method", "micro_batch", "grad_accum", "sharding",
            "grad_ckpt"} <= set(d["candidates"][0])
    assert len(base.to_dict(max_candidates=3)["candidates"]) == 3


def test_top_level_function():
    r = tuneplan.plan_run(MODEL, gpus="H100-SXM5-80GB", methods="lora", max_gpus=1, interval=None, **WORK)
    assert r.ok
    import tuneplan.plan as plan_package  # a plain package, whether imported before or after

    assert tuneplan.plan is plan_package and not callable(plan_package)


# --- the grid -----------------------------------------------------------------------------------

def test_gpu_counts_and_nodes():
    assert gpu_counts(16) == [1, 2, 4, 8, 16]
    assert gpu_counts(12) == [1, 2, 4, 8, 12]
    assert gpu_counts(20) == [1, 2, 4, 8, 16]  # 20 GPUs do not split over 3 nodes of 8
    g = enumerate_grid(2, 3, Space(gpu_counts=(1, 2, 16)))
    assert set(g.nodes[g.gpus == 16]) == {2} and set(g.nodes[g.gpus <= 8]) == {1}
    # one GPU: DDP and FSDP are the same configuration, kept once
    one = g.take(g.gpus == 1)
    combos = set(zip(one.gpu_idx, one.method_idx, one.micro_batch, one.grad_ckpt, strict=True))
    assert len(combos) == len(one)
    assert set(np.asarray(g.sharding_labels, dtype=object)[one.sharding_idx]) == {"none"}
    # the global batch is kept where the micro-batch x GPUs allows
    gb = g.micro_batch * g.grad_accum * g.dp
    assert (gb[g.micro_batch * g.dp <= 32] == 32).all()
    assert gb.max() <= 64


def test_units():
    assert parse_duration("12h") == 43200
    assert parse_duration("90min") == 5400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d") == 172800
    assert parse_duration("12") == 43200
    assert parse_duration("1e3h") == 3.6e6 and parse_duration("1.5e1min") == 900  # an exponent, then the unit
    for bad in ("", "12x", "h", "-1h", "0", "1e400h", "1eh"):
        with pytest.raises(InputError):
            parse_duration(bad)
    assert parse_money("$1,200.50") == 1200.5
    with pytest.raises(InputError):
        parse_money("lots")
    assert hours(5.2 * 3600) == "5.2 h" and hours(12 * 3600) == "12 h" and hours(1800) == "30 min"
    assert money(400) == "$400" and money(31.2) == "$31.20" and money(math.nan) == "no price"


def test_intervals_match_estimate():
    from tuneplan.estimators.calibration import interval_residuals

    if interval_residuals("tuneplan") is None:
        pytest.skip("the shipped calibration stores no held-out residuals")
    r = plan(MODEL, gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=2, rate=2.0, **WORK)
    for i in (0, len(r.candidates) - 1):
        row = r.candidates.iloc[i]
        e = tuneplan.estimate(MODEL, "H100-SXM5-80GB", method="lora", gpus=int(row["gpus"]),
                              micro_batch=int(row["micro_batch"]), grad_accum=int(row["grad_accum"]),
                              sharding="ddp" if row["sharding"] == "none" else row["sharding"],
                              grad_ckpt=bool(row["grad_ckpt"]), rate=2.0, **WORK)
        assert row["time_low_s"] == pytest.approx(e.interval["wall_clock_s_low"], rel=1e-6)
        assert row["time_high_s"] == pytest.approx(e.interval["wall_clock_s_high"], rel=1e-6)
        assert row["cost_low_usd"] == pytest.approx(e.interval["cost_usd_low"], rel=1e-6)
        assert row["cost_high_usd"] == pytest.approx(e.interval["cost_usd_high"], rel=1e-6)


def test_cached_batch_shapes_note_when_a_fitting_candidate_reads_above_capacity():
    # Qwen3-30B-A3B LoRA with hf-trainer (batches padded to their longest, experts stacked): at micro-batch 16
    # the nvidia-smi peak with the cached blocks of other batch shapes is above 80 GiB on a run that fits
    r = plan("Qwen/Qwen3-30B-A3B", gpus=["H100-SXM5-80GB"], methods=["lora"], framework="hf-trainer",
             examples=20000, tokens_per_example=1024, interval=None)
    df = r.candidates
    over = df[df["fits"] & (df["memory_per_gpu_gib"] > 80.0)]
    assert len(over) > 0
    assert any("blocks cached for other batch shapes" in n for n in r.notes)
    packed = plan("Qwen/Qwen3-30B-A3B", gpus=["H100-SXM5-80GB"], methods=["lora"], framework="hf-trainer",
                  examples=20000, tokens_per_example=1024, packing=True, interval=None)
    assert not any("blocks cached for other batch shapes" in n for n in packed.notes)
