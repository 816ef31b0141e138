"""physics/stages.py term by term, each checked by hand, and the stages through `tuneplan.estimate`."""

from __future__ import annotations

import dataclasses

import pytest

import tuneplan
from tuneplan.errors import InputError
from tuneplan.physics import stages as ps
from tuneplan.specs.job import make_job

MODEL, GPU = "meta-llama/Llama-3.1-8B", "H100-SXM5-80GB"
WORK = dict(examples=10000, tokens_per_example=1024, calibration="none", interval=None)


def test_shapes_follow_trl():
    assert ps.stage_shape("dpo") == ps.StageShape(2.0, 0.0, 2.0)
    assert ps.stage_shape("kto") == ps.StageShape(1.0, 1.0, 2.0)
    for s in ("orpo", "simpo", "cpo"):
        assert ps.stage_shape(s).reference == 0.0 and ps.stage_shape(s).trained == 2.0


def test_reference_weights_needed():
    assert ps.reference_weights_needed(True, lora_family=False, precompute_ref=False)
    assert not ps.reference_weights_needed(True, lora_family=True, precompute_ref=False)
    assert not ps.reference_weights_needed(True, lora_family=False, precompute_ref=True)
    assert not ps.reference_weights_needed(False, lora_family=False, precompute_ref=False)


def test_reference_weight_bytes_by_hand():
    # 8e9 params x 2 bytes over tp 2 and an 4-way ZeRO-3 shard = 2e9 bytes
    assert ps.reference_weight_bytes(8e9, 2.0, 2.0, 4.0) == pytest.approx(2e9)


def test_forward_only_by_hand():
    # 1.0 forward + (0.6 + 0.3) / 3 element-wise and overhead + 0.4 dequant / 2 passes
    assert ps.forward_only_s(1.0, 0.6, 0.3, 0.4, 0.0) == pytest.approx(1.0 + 0.3 + 0.2)
    assert ps.forward_only_s(1.0, 0.0, 0.0, 0.3, 1.0) == pytest.approx(1.1)  # 3 passes with grad-ckpt


def test_buffers_by_hand():
    assert ps.reference_logits_bytes(1000, 128256, 1) == pytest.approx(1000 * 128256 * 6.0)
    assert ps.logp_buffer_bytes(1000) == pytest.approx(16000.0)


def test_kv_and_decode_by_hand():
    kv = 131072.0  # Llama-3.1-8B: 32 layers x 1024 KV width x 2 (K, V) x 2 bytes per token
    assert ps.kv_cache_bytes(8, 1000, kv) == pytest.approx(8 * 1000 * 131072)
    # one decode step: 16 GB of weights + 8 sequences x kv x 1000 context x 3 passes
    assert ps.decode_step_bytes(16e9, 8, kv, 1000, 3.0) == pytest.approx(16e9 + 8 * kv * 1000 * 3)
    # memory-bound: 100 tokens at mean context 10 + 101/2 = 60.5, 1e12 B/s, no overhead
    t = ps.decode_s(100, 10, 4, 1e9, 1e3, 1.0, 1e12, 1e9, 1e15, 0.0)
    assert t == pytest.approx(100 * (1e9 + 4 * 1e3 * 60.5) / 1e12)
    # compute-bound when the FLOPs dominate: 100 x 4 x 1e12 / 1e14
    assert ps.decode_s(100, 10, 4, 1.0, 1.0, 1.0, 1e12, 1e12, 1e14, 0.0) == pytest.approx(4.0)
    assert ps.decode_s(10, 0, 1, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5) == pytest.approx(5.0)  # overhead alone


def test_prefill_scoring_sync_by_hand():
    assert ps.prefill_s(2e9, 1000, 1e14) == pytest.approx(0.02)
    assert ps.scoring_forward_s(2e9, 1000, 1e14) == pytest.approx(0.02)
    assert ps.weight_sync_s(16e9, 400e9) == pytest.approx(0.04)
    assert ps.hf_decode_overhead_s(32, 1e-5) == pytest.approx(16 * 32 * 1e-5)
    assert ps.completions_per_step(16, 8) == 128


def test_rl_defaults_are_trls():
    trl = pytest.importorskip("trl")
    assert ps.rl_defaults("grpo")["group_size"] == trl.GRPOConfig.__dataclass_fields__["num_generations"].default
    assert ps.rl_defaults("grpo")["kl_beta"] == trl.GRPOConfig.__dataclass_fields__["beta"].default
    assert trl.GRPOConfig.__dataclass_fields__["max_completion_length"].default == ps.COMPLETION_LEN
    assert ps.rl_defaults("rloo")["group_size"] == trl.RLOOConfig.__dataclass_fields__["num_generations"].default
    assert ps.rl_defaults("rloo")["kl_beta"] == trl.RLOOConfig.__dataclass_fields__["beta"].default
    fields = trl.GRPOConfig.__dataclass_fields__
    assert fields["vllm_gpu_memory_utilization"].default == ps.VLLM_COLOCATE_MEMORY_SHARE


# ---- through the estimate ---------------------------------------------------------------------
def _est(**kw):
    return tuneplan.estimate(MODEL, GPU, **{**WORK, **kw})


def test_sft_unchanged_by_the_stage_fields():
    a = _est(method="lora").to_dict()
    b = _est(method="lora", stage="sft").to_dict()
    assert a["step_breakdown_s"] == b["step_breakdown_s"]
    assert a["memory_breakdown_gib"] == b["memory_breakdown_gib"]
    assert "stage" not in a


def test_dpo_full_costs_two_sequences_and_a_reference():
    sft = _est(method="full", micro_batch=2, sharding="zero3", gpus=8)
    dpo = _est(method="full", micro_batch=2, sharding="zero3", gpus=8, stage="dpo")
    sft2 = _est(method="full", micro_batch=4, sharding="zero3", gpus=8)  # the policy's concatenated batch
    bd = dpo.step_breakdown_s
    assert bd["forward"] == pytest.approx(sft2.step_breakdown_s["forward"])
    assert bd["reference_forward"] > bd["forward"]  # the forward plus its share of element-wise work
    assert bd["total"] == pytest.approx(sum(v for k, v in bd.items() if k != "total"))
    mem = dpo.memory_breakdown_gib
    assert mem["reference_model"] == pytest.approx(8.03e9 * 2 / 8 / 1024**3, rel=0.01)
    assert dpo.memory_per_gpu_gib > sft2.memory_per_gpu_gib
    assert dpo.samples_per_s < sft.samples_per_s
    assert dpo.totals.steps == sft.totals.steps  # pairs per step = the SFT's samples per step
    assert dpo.to_dict()["tokens_total"] == pytest.approx(2 * sft.to_dict()["tokens_total"])


def test_dpo_lora_and_precompute_hold_no_reference():
    lora = _est(method="lora", stage="dpo")
    assert "reference_model" not in lora.memory_breakdown_gib and lora.step_breakdown_s["reference_forward"] > 0
    pre = _est(method="full", stage="dpo", gpus=8, sharding="zero3", precompute_ref=True)
    assert "reference_forward" not in pre.step_breakdown_s
    assert "reference_model" not in pre.memory_breakdown_gib
    wcb = pre.to_dict()["wall_clock_breakdown_s"]
    assert wcb["reference_precompute"] > 0
    assert pre.wall_clock_s == pytest.approx(sum(wcb.values()))


def test_reference_free_stages():
    for st in ("orpo", "simpo", "cpo"):
        r = _est(method="full", stage=st, gpus=8, sharding="zero3")
        assert "reference_forward" not in r.step_breakdown_s and "reference_model" not in r.memory_breakdown_gib
    kto = _est(method="lora", stage="kto").step_breakdown_s
    assert kto["policy_nograd"] > 0 and kto["reference_forward"] == pytest.approx(2 * kto["policy_nograd"])


def test_grpo_breakdown_adds_up_and_counts_rollout_gpus():
    r = _est(method="lora", stage="grpo", gpus=8, micro_batch=4, grad_accum=4, seq_len=256, completion_len=256,
             examples=1000, tokens_per_example=None)
    bd = r.step_breakdown_s
    assert bd["rollout_decode"] > 0 and bd["rollout_prefill"] > 0
    assert bd["total"] == pytest.approx(sum(v for k, v in bd.items() if k != "total"))
    st = r.to_dict()["stage"]
    assert st["completions_per_step"] == 128 and st["prompts_per_step"] == 16
    assert r.totals.steps == 63  # ceil(1000 prompts / 16)
    parts = st["train_parts_s"]
    assert sum(parts.values()) == pytest.approx(r.totals.train_s)
    v = _est(method="lora", stage="grpo", gpus=8, micro_batch=4, prompts_per_step=12, seq_len=256,
             completion_len=256, examples=1000, tokens_per_example=None, rollout_engine="vllm", rollout_gpus=2)
    assert v.to_dict()["stage"]["training_gpus"] == 6
    assert v.device_hours == pytest.approx(v.wall_clock_s * 8 / 3600)
    assert v.step_breakdown_s["rollout_decode"] < bd["rollout_decode"]  # vLLM: no launch overhead, 1 KV pass


def test_grpo_kl_and_reward_model():
    base = dict(method="full", stage="grpo", gpus=8, sharding="zero3", micro_batch=2, grad_accum=4, seq_len=256,
                completion_len=128, examples=1000, tokens_per_example=None)
    r = _est(**base)
    assert "reference_forward" not in r.step_breakdown_s  # TRL GRPO beta = 0
    k = _est(**base, kl_beta=0.04, reward_model="Qwen/Qwen2.5-0.5B")
    assert k.step_breakdown_s["reference_forward"] > 0 and k.step_breakdown_s["reward"] > 0
    assert k.memory_breakdown_gib["reference_model"] > 0 and k.memory_breakdown_gib["reward_model"] > 0
    p = _est(**{**base, "stage": "ppo"})
    assert p.step_breakdown_s["value_model"] > 0 and p.memory_breakdown_gib["value_model"] > 0


@pytest.mark.parametrize("kw, field", [
    (dict(stage="dpo", group_size=4), "job"),
    (dict(stage="orpo", precompute_ref=True), "job"),
    (dict(stage="grpo", rollout_gpus=2, gpus=4), "job"),
    (dict(stage="grpo", rollout_engine="vllm", rollout_gpus=4, gpus=4), "job"),
    (dict(stage="bogus"), "stage"),
])
def test_bad_stage_input(kw, field):
    with pytest.raises(InputError) as e:
        make_job(**kw)
    assert e.value.field == field


def test_group_size_must_divide_the_batch():
    with pytest.raises(InputError, match="group-size"):
        _est(method="lora", stage="grpo", micro_batch=3, seq_len=128, examples=100, tokens_per_example=None)
    # with --prompts-per-step the batch may split unevenly (verl, NeMo RL): 5 x 8 = 40 completions over
    # micro-batch 3 x 1 GPU = 14 micro-steps, the last one partly filled
    r = _est(method="lora", stage="grpo", micro_batch=3, prompts_per_step=5, seq_len=128, examples=100,
             tokens_per_example=None)
    assert r.to_dict()["stage"]["grad_accum"] == 14 == ps.micro_steps(40, 3)


def test_stage_result_keeps_its_fields():
    r = _est(method="lora", stage="dpo")
    d = r.to_dict()
    assert d["job"]["stage"] == "dpo"
    assert any("DPO" in a for a in d["assumptions"])
    assert dataclasses.asdict(r.totals)["wall_clock_s"] == d["wall_clock_s"]


def test_vllm_colocated_reserves_its_share():
    r = _est(method="lora", stage="grpo", micro_batch=8, seq_len=256, completion_len=128, examples=100,
             tokens_per_example=None, rollout_engine="vllm")
    assert r.memory_breakdown_gib["rollout_engine"] == pytest.approx(ps.VLLM_COLOCATE_MEMORY_SHARE * 80.0)
    assert r.memory_per_gpu_gib == pytest.approx(sum(r.memory_breakdown_gib.values()))
    assert "rollout_weight_sync" in r.step_breakdown_s


@pytest.mark.parametrize("estimator", ["kavier", "xia"])
@pytest.mark.parametrize("stage", ["dpo", "grpo", "rloo"])
def test_other_estimators_take_the_stage(estimator, stage):
    kw = dict(seq_len=256, examples=1000, tokens_per_example=None, micro_batch=8) if stage != "dpo" else {}
    r = tuneplan.estimate(MODEL, GPU, **{**WORK, "calibration": None, "method": "lora", "stage": stage,
                                         "estimator": estimator, **kw})
    parts = sum(v for k, v in r.step_breakdown_s.items() if k != "total")
    if estimator == "kavier":  # xia has no SFT parts: only the stage's own are listed
        assert r.step_breakdown_s["total"] == pytest.approx(parts)
    assert 0 < parts <= r.step_breakdown_s["total"] * (1 + 1e-12)
    assert r.memory_breakdown_gib["loss_buffers"] > 0 and r.max_micro_batch >= 1


def test_stage_rows_are_not_learned_from():
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "Qwen/Qwen2.5-0.5B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": 512,
           "micro_batch_size": 4, "step_time_s": 0.5}
    assert row_to_config({**row, "stage": "sft"}).job.stage == "sft"
    assert row_to_config(row).job.method == "lora"
    with pytest.raises(InputError) as e:
        row_to_config({**row, "stage": "dpo"})
    assert e.value.field == "stage" and "--stage dpo" in str(e.value)
