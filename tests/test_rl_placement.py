"""RL placement and the step's parts as verl, NeMo RL, OpenRLHF and TRL run them: the rollout engine's own
layout, refit, asynchronous overlap, models on GPUs of their own, a value head, and their configs."""

from __future__ import annotations

from pathlib import Path

import pytest

import tuneplan
from tuneplan.configs import read_configs
from tuneplan.errors import InputError
from tuneplan.physics import stages as ps
from tuneplan.physics.constants import DEFAULT_CONSTANTS
from tuneplan.specs.job import make_job

DATA = Path(__file__).parent / "data" / "rl"
GPU = "H100-SXM5-80GB"
WORK = dict(examples=1000, tokens_per_example=None, calibration="none", interval=None)
VLLM = dict(method="full", stage="grpo", gpus=8, sharding="zero3", micro_batch=2, seq_len=256, completion_len=256,
            group_size=8, prompts_per_step=64, rollout_engine="vllm")


def _est(model="Qwen/Qwen2.5-7B", **kw):
    return tuneplan.estimate(model, GPU, **{**WORK, **kw})


def _sums(r) -> None:
    bd = r.step_breakdown_s
    assert bd["total"] == pytest.approx(sum(v for k, v in bd.items() if k != "total"))


def test_terms_by_hand():
    # 16 GB of weights, 24 GB of engine memory: a shard may take 12 GB -> tp 2 (8 GB); 8 GPUs cap it at 8
    assert ps.engine_tp(16e9, 8, 1, 24e9) == 2
    assert ps.engine_tp(140e9, 8, 1, 24e9) == 8
    assert ps.engine_tp(140e9, 8, 2, 24e9) == 4  # over 2 pipeline stages: tp x pp = 8
    assert ps.engine_tp(1e9, 8, 1, 24e9) == 1
    assert ps.micro_steps(40, 3) == 14 and ps.micro_steps(48, 3) == 16
    assert ps.async_overlap_s(30.0, 50.0, 1) == -30.0 and ps.async_overlap_s(30.0, 50.0, 0) == 0.0
    assert ps.weight_sync_s(14e9, 350e9) == pytest.approx(0.04)
    # the refit gathers the weights from their holders: 8 on a node of 8 -> NVLink (900); 16 -> the network (50)
    assert ps.refit_bandwidth(900.0, 50.0, 8, 8, False) == 900.0
    assert ps.refit_bandwidth(900.0, 50.0, 16, 8, False) == 50.0
    assert ps.refit_bandwidth(900.0, 50.0, 1, 8, True) == 50.0  # separate engines on other nodes


def test_colocated_refit_over_the_network_when_the_shards_span_nodes():
    # ZeRO-3 over 16 GPUs on 2 nodes: each GPU gathers 7.6 B x 2 bytes from shards on both nodes, over its
    # network share (the H100's 400 Gb/s = 50 GB/s x comm efficiency 0.7); on one node over NVLink (450 GB/s
    # each way)
    one = _est(**VLLM).step_breakdown_s["rollout_weight_sync"]
    two = _est(**{**VLLM, "gpus": 16, "prompts_per_step": 128}).step_breakdown_s["rollout_weight_sync"]
    full = tuneplan.specs.catalog.resolve_model("Qwen/Qwen2.5-7B").params_total * 2
    assert two == pytest.approx(full / (50e9 * DEFAULT_CONSTANTS.comm_efficiency), rel=1e-6)
    assert one == pytest.approx(full / (450e9 * DEFAULT_CONSTANTS.comm_efficiency), rel=1e-6)


def test_generation_follows_the_engine_not_the_training_layout():
    a = _est(**VLLM, rollout_tp=2).step_breakdown_s
    b = _est(**VLLM, rollout_tp=2, tp=2).step_breakdown_s
    for k in ("rollout_prefill", "rollout_decode"):
        assert a[k] == pytest.approx(b[k])
    # prefill is compute-bound: one engine of 2 GPUs with twice the batch takes what one GPU takes for its own
    one = _est(**VLLM, rollout_tp=1, gpu_memory_utilization=0.9).step_breakdown_s
    two = _est(**VLLM, rollout_tp=2, gpu_memory_utilization=0.9).step_breakdown_s
    assert two["rollout_prefill"] == pytest.approx(one["rollout_prefill"], rel=0.1)
    assert two["rollout_decode"] < one["rollout_decode"]  # the weights are read once per 2 GPUs


def test_engine_tp_allreduces_by_hand():
    c = DEFAULT_CONSTANTS
    lat, eff = c.comm_latency_s, c.comm_efficiency
    # 100 tokens x hidden 1000 x 2 bytes = 2e5 bytes over tp 4 in a node of 8: 2 x 3/4 of them over NVLink
    # and vLLM's custom all-reduce's 2 latencies; 2 all-reduces per layer x 10 layers
    assert ps.engine_tp_allreduce_s(100, 10, 1000, 2, 4, 8, 1e11, 1e10, c) == pytest.approx(
        20 * (3e5 / (1e11 * eff) + 2 * lat))
    assert ps.engine_tp_allreduce_s(100, 10, 1000, 2, 1, 8, 1e11, 1e10, c) == 0.0  # one GPU: none
    # tp 16 over 2 nodes of 8, NCCL: the node's ring of 8, then each GPU's 1/8 all-reduced across the 2 nodes
    assert ps.engine_tp_allreduce_s(100, 10, 1000, 2, 16, 8, 1e11, 1e10, c) == pytest.approx(
        20 * (2 * 7 / 8 * 2e5 / (1e11 * eff) + 14 * lat + 2 * 1 / 2 * 2.5e4 / (1e10 * eff) + 2 * lat))


def test_engine_pays_its_allreduces_every_decode_step(monkeypatch):
    # 512 completions of 256 tokens on 4 engines of tp 2 in one wave: each decode step pays one forward's
    # all-reduces, the prefill one more per wave
    kw = dict(VLLM, rollout_tp=2, gpu_memory_utilization=0.9)
    monkeypatch.setattr(ps, "engine_tp_allreduce_s", lambda *a: 0.0)
    free = _est(**kw).step_breakdown_s
    monkeypatch.setattr(ps, "engine_tp_allreduce_s", lambda *a: 1e-3)
    paid = _est(**kw)
    assert paid.to_dict()["stage"]["rollout_waves"] == 1
    assert paid.step_breakdown_s["rollout_decode"] - free["rollout_decode"] == pytest.approx(256 * 1e-3)
    assert paid.step_breakdown_s["rollout_prefill"] - free["rollout_prefill"] == pytest.approx(1e-3)


def test_engine_kv_cache_per_gpu_by_hand():
    from tuneplan.estimators.rl_stages import generation
    from tuneplan.physics.terms import build_arrays
    from tuneplan.specs.catalog import resolve_model
    from tuneplan.specs.gpu import resolve_gpu

    g = resolve_gpu(GPU)

    def kv(model, tp, gpus=8):
        m, job = resolve_model(model), make_job(**{**VLLM, "rollout_tp": tp, "gpus": gpus})
        a = build_arrays([(m, g, job, 512)], DEFAULT_CONSTANTS)
        return generation(a, m, g, job, 512, 256, 256, DEFAULT_CONSTANTS)["kv_tok"]

    full = 28 * 2 * 4 * 128 * 2  # Qwen2.5-7B: 28 layers x K, V x 4 KV heads x 128 x 2 bytes per token
    assert kv("Qwen/Qwen2.5-7B", 1) == full and kv("Qwen/Qwen2.5-7B", 4) == full / 4
    assert kv("Qwen/Qwen2.5-7B", 8) == full / 4  # 4 KV heads on 8 ranks: each holds one
    # DeepSeek-V3's MLA: the compressed latent (512 + 64 rope) x 61 layers x 2 bytes, on every rank
    assert kv("deepseek-ai/DeepSeek-V3", 32, gpus=32) == 576 * 61 * 2


def test_engine_decodes_max_num_seqs_at_once():
    # 64 prompts x 8 = 512 completions on 8 engines of 1 GPU: 64 each; at most 16 at once -> 4 waves,
    # each reading the weights again; the prefill is the same work
    kw = dict(VLLM, rollout_tp=1, gpu_memory_utilization=0.9)
    one, four = _est(**kw), _est(**kw, max_num_seqs=16)
    assert one.to_dict()["stage"]["rollout_waves"] == 1 and four.to_dict()["stage"]["rollout_waves"] == 4
    assert four.step_breakdown_s["rollout_decode"] > one.step_breakdown_s["rollout_decode"]
    assert four.step_breakdown_s["rollout_prefill"] == pytest.approx(one.step_breakdown_s["rollout_prefill"], rel=0.3)
    assert any("4 waves" in w for w in four.warnings)


def test_off_policy_step_is_the_larger_phase():
    kw = dict(VLLM, rollout_gpus=4, rollout_placement="separate")
    sync, k1 = _est(**kw), _est(**kw, off_policy_steps=1)
    gen = sum(sync.step_breakdown_s[k] for k in ("rollout_prefill", "rollout_decode"))
    rest = sync.step_breakdown_s["total"] - gen - sync.step_breakdown_s["rollout_weight_sync"]
    assert k1.step_breakdown_s["overlap"] == pytest.approx(-min(gen, rest))
    assert k1.step_breakdown_s["total"] == pytest.approx(max(gen, rest) + sync.step_breakdown_s["rollout_weight_sync"])
    _sums(k1)


def test_old_logprobs_every_step():
    # the old-policy pass is the policy's no-grad forward over all completions, as the reference's is
    bd = _est(**VLLM, kl_beta=0.01, old_logprobs=True).step_breakdown_s
    assert bd["policy_nograd"] == pytest.approx(bd["reference_forward"])
    assert "policy_nograd" not in _est(**VLLM).step_breakdown_s  # TRL's rule: one optimizer step, no pass


def test_value_head_is_no_model():
    kw = dict(method="lora", stage="ppo", gpus=8, micro_batch=4, grad_accum=4, seq_len=256, completion_len=128)
    model, head = _est(**kw), _est(**kw, value_model="head")
    assert "value_model" in model.step_breakdown_s and "value_model" not in head.step_breakdown_s
    assert "value_model" not in head.memory_breakdown_gib
    assert head.memory_per_gpu_gib < model.memory_per_gpu_gib


def test_reference_on_its_own_gpus_runs_beside_the_policy():
    kw = dict(VLLM, gpus=16, kl_beta=0.01, train_steps_per_rollout=2)
    on = _est(**kw)
    off = _est(**kw, ref_gpus=8)
    # 8 training GPUs: the reference forward (8 GPUs of its own) hides behind the old-log-prob pass
    assert off.step_breakdown_s["overlap"] == pytest.approx(-min(off.step_breakdown_s["reference_forward"],
                                                                 off.step_breakdown_s["policy_nograd"]))
    assert "reference_model" in on.memory_breakdown_gib and "reference_model" not in off.memory_breakdown_gib
    _sums(off)


def test_235b_moe_grpo_on_128_gpus_from_a_nemo_rl_recipe():
    r = read_configs([DATA / "nemo_rl_grpo.yaml"])
    job = r.job_kwargs()
    assert (job["gpus"], job["tp"], job["pp"], job["ep"], job["etp"], job["rollout_tp"]) == (128, 4, 8, 16, 1, 16)
    assert job["train_steps_per_rollout"] == 128 * 16 // 512 and job["seq_len"] == 8192 - 4096
    est = _est(r.model, **{**job, "examples": 12800})
    assert est.fits
    bd = est.step_breakdown_s
    assert {"rollout_prefill", "rollout_decode", "rollout_weight_sync", "reference_forward", "policy_nograd"} <= set(bd)
    _sums(est)


def test_70b_ppo_with_separate_actor_critic_ref_reward_gpus_from_openrlhf():
    r = read_configs([DATA / "openrlhf_ppo_70b.sh"])
    job = r.job_kwargs()
    assert r.formats == ["openrlhf"] and r.model == "meta-llama/Llama-3.1-70B-Instruct"
    assert (job["gpus"], job["rollout_gpus"], job["critic_gpus"], job["ref_gpus"], job["reward_gpus"]) == (
        32 + 16 + 16 + 8 + 8, 16, 16, 8, 8)
    assert (job["stage"], job["sharding"], job["train_steps_per_rollout"]) == ("ppo", "zero3", 1024 // 128)
    est = _est(r.model, **job)
    bd, st = est.step_breakdown_s, est.to_dict()["stage"]
    assert {"value_model", "reward", "reference_forward", "policy_nograd", "overlap"} <= set(bd)
    assert st["training_gpus"] == 32 and st["critic_memory_per_gpu_gib"] > 0
    assert not {"value_model", "reward_model", "reference_model"} & set(est.memory_breakdown_gib)
    _sums(est)


def test_verl_and_trl_configs():
    v = read_configs([DATA / "verl_grpo.yaml"]).job_kwargs()
    assert (v["gpus"], v["prompts_per_step"], v["group_size"], v["rollout_tp"], v["train_steps_per_rollout"],
            v["gpu_memory_utilization"], v["rollout_sleep"], v["kl_beta"]) == (16, 512, 16, 2, 4, 0.6, True, 0.001)
    assert v["old_logprobs"]
    t = read_configs([DATA / "trl_grpo.yaml"]).job_kwargs()
    assert (t["stage"], t["rollout_engine"], t["gpu_memory_utilization"], t["rollout_sleep"],
            t["train_steps_per_rollout"], t["seq_len"]) == ("grpo", "vllm", 0.4, True, 2, 512)
    d = read_configs([DATA / "trl_dpo.yaml"]).job_kwargs()
    assert d["stage"] == "dpo" and d["precompute_ref"]


@pytest.mark.parametrize("kw", [
    dict(stage="grpo", rollout_engine="vllm", off_policy_steps=1),  # colocated: no overlap possible
    dict(stage="grpo", rollout_engine="vllm", rollout_placement="separate"),  # separate needs its GPUs
    dict(stage="grpo", value_model="head"),
    dict(stage="grpo", rollout_pp=2),  # HF generate has no engine
    dict(stage="ppo", gpus=4, critic_gpus=2, ref_gpus=2),  # leaves no trainer
    dict(stage="ppo", gpus=4, critic_gpus=2, value_model="head"),  # no critic to place
])
def test_bad_placement_input(kw):
    with pytest.raises(InputError) as e:
        make_job(**kw)
    assert e.value.field == "job"


def test_verl_fully_async_rollouter_and_bad_values(tmp_path):
    p = tmp_path / "async.yaml"
    p.write_text("actor_rollout_ref:\n  model: {path: Qwen/Qwen2.5-7B}\n  rollout: {name: vllm, n: 16}\n"
                 "algorithm: {adv_estimator: grpo}\ntrainer: {nnodes: 2, n_gpus_per_node: 8}\n"
                 "rollout: {nnodes: 2, n_gpus_per_node: 8}\n")
    j = read_configs([p]).job_kwargs()
    assert (j["gpus"], j["rollout_gpus"], j["off_policy_steps"], j["rollout_tp"]) == (32, 16, 1, 2)
    assert "rollout_sleep" not in j  # the engine has GPUs of its own
    bad = tmp_path / "bad.sh"
    bad.write_text("python -m openrlhf.cli.train_ppo_ray --rollout.batch_size lots\n")
    with pytest.raises(InputError, match="lots") as e:
        read_configs([bad])
    assert e.value.field == "from"


def test_plan_from_a_verl_config_searches_the_placement(capsys):
    from tuneplan.cli import main

    assert main(["plan", "--from", str(DATA / "verl_grpo.yaml"), "--gpus", GPU, "--max-gpus", "16", "--examples",
                 "2000", "--calibration", "none", "--methods", "full"]) == 0
    text = capsys.readouterr().out
    assert "Recommended:" in text and "rollouts: vLLM" in text and "Placement " in text
