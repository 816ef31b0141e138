"""`tuneplan plan --stage`: the stage grid (rollout splits for RL) and candidates equal to the estimate."""

from __future__ import annotations

import pytest

import tuneplan
from tuneplan.plan.stages import engine_layouts, rollout_options


def test_rollout_options():
    assert rollout_options("dpo", 4) == [("hf", 0)]
    assert rollout_options("grpo", 4) == [("hf", 0), ("vllm", 0), ("vllm", 1), ("vllm", 2), ("vllm", 3)]
    assert rollout_options("grpo", 1) == [("hf", 0), ("vllm", 0)]
    assert rollout_options("ppo", 4, nodes=2) == [("hf", 0), ("vllm", 0), ("vllm", 2)]


def test_engine_layouts():
    assert engine_layouts("hf", 4, 0) == [(None, False)]
    # colocated on 4 GPUs: tp 1, 2, 4, each awake or sleeping; on 2 GPUs of their own: tp 1, 2
    assert engine_layouts("vllm", 4, 0) == [(1, False), (1, True), (2, False), (2, True), (4, False), (4, True)]
    assert engine_layouts("vllm", 4, 2) == [(1, False), (2, False)]


def test_grpo_plan_enumerates_splits_and_matches_the_estimate():
    res = tuneplan.plan_run("Qwen/Qwen2.5-1.5B", gpus=["H100-SXM5-80GB"], methods=["lora"], max_gpus=4,
                        examples=2000, seq_len=256, stage="grpo", completion_len=128, micro_batches=[4],
                        grad_ckpt=(False,), calibration="none", rate=2.0)
    assert res.ok
    df = res.candidates
    assert {(e, int(r)) for e, r in zip(df["rollout_engine"], df["rollout_gpus"], strict=True)} >= {
        ("hf", 0), ("vllm", 0), ("vllm", 1), ("vllm", 3)}
    rec = res.recommended
    est = tuneplan.estimate("Qwen/Qwen2.5-1.5B", rec["gpu"], method="lora", gpus=rec["gpus"], examples=2000,
                            seq_len=256, stage="grpo", completion_len=128, micro_batch=rec["micro_batch"],
                            grad_accum=rec["grad_accum"], rollout_engine=rec["rollout_engine"],
                            rollout_gpus=rec["rollout_gpus"], calibration="none", rate=2.0, interval=None,
                            **({"rollout_tp": int(rec["rollout_tp"])} if rec["rollout_engine"] == "vllm" else {}),
                            **({"rollout_sleep": True} if rec["rollout_sleep"] else {}))
    assert rec["time_s"] == pytest.approx(est.wall_clock_s, rel=1e-9)
    assert rec["cost_usd"] == pytest.approx(est.cost_usd, rel=1e-9)
    assert "rollouts:" in rec["description"]
    assert "Placement " in res.why and "the best " in res.why  # why this placement beats the others
    assert {True, False} <= set(df["rollout_sleep"]) and {1, 2} <= set(df["rollout_tp"].dropna().astype(int))


def test_dpo_plan_keeps_the_stage():
    res = tuneplan.plan_run("Qwen/Qwen2.5-0.5B", gpus=["A100-SXM4-80GB"], methods=["full", "lora"], max_gpus=2,
                        examples=2000, tokens_per_example=512, stage="dpo", calibration="none", rate=1.0)
    assert res.ok and set(res.candidates["stage"]) == {"dpo"}
    assert res.to_dict()["space"]["stage"] == "dpo"


def test_web_api_takes_the_stage():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    c = TestClient(create_app())
    assert "grpo" in c.get("/api/options").json()["stages"]
    body = {"model": "Qwen/Qwen2.5-1.5B", "gpu": "H100-SXM5-80GB", "examples": 1000, "seq_len": 256,
            "stage": "grpo", "micro_batch": 8, "completion_len": 64, "rollout_engine": "vllm"}
    d = c.post("/api/estimate", json=body).json()
    assert "rollout_decode" in d["step_breakdown_s"] and d["stage"]["completions_per_step"] == 8
    assert "--stage grpo" in d["command"] and "--rollout-engine vllm" in d["command"]
    bad = c.post("/api/estimate", json={**body, "stage": "dpo"})
    assert bad.status_code == 422 and "applies to the RL stages" in bad.text
