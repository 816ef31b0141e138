"""The RL step as the systems run it: the decode tail to the longest completion, a colocated engine
that sleeps while training (the peak is the larger phase), the engine's own tensor parallel, and
several optimizer steps per batch of rollouts with the old-policy log-prob pass."""

from __future__ import annotations

import pytest
from tests.conftest import REPO, reference_dir

import tuneplan
from tuneplan.errors import InputError
from tuneplan.physics import stages as ps
from tuneplan.specs.job import make_job

GPU = "H100-SXM5-80GB"
WORK = dict(examples=1000, tokens_per_example=None, calibration="none", interval=None)
GRPO = dict(method="lora", stage="grpo", gpus=8, micro_batch=4, grad_accum=4, seq_len=256, completion_len=256)


def _est(model="meta-llama/Llama-3.1-8B", **kw):
    return tuneplan.estimate(model, GPU, **{**WORK, **kw})


def test_decode_tail_by_hand():
    # 300 steps past the mean (mean 100, max 400), batch 16 -> a tail batch of 4 at context 10 + 250 = 260;
    # memory-bound: (1e9 weight bytes + 4 x 1e3 B x 260 x 1 pass) / 1e12 B/s per step
    t = ps.decode_tail_s(100, 400, 10, 16, 1e9, 1e3, 1.0, 1e12, 1.0, 1e15, 0.0)
    assert t == pytest.approx(300 * (1e9 + 4 * 1e3 * 260) / 1e12)
    # a batch of 2 drains to at least one sequence; the per-step overhead counts once a step
    assert ps.decode_tail_s(0, 10, 0, 2, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5) == pytest.approx(10 * (1 * 5 + 0.5))
    assert ps.decode_tail_s(100, 100, 10, 16, 1e9, 1e3, 1.0, 1e12, 1.0, 1e15, 0.0) == 0.0  # max = mean: no tail


def test_colocated_engine_bytes_by_hand():
    # awake: the engine's 24 GB pool on top of the training peak
    assert ps.colocated_engine_bytes(50e9, 20e9, 24e9, False) == 24e9
    # sleeping: generation phase 20 + 24 = 44 < training 50 -> adds nothing; 30 + 24 = 54 -> adds 4
    assert ps.colocated_engine_bytes(50e9, 20e9, 24e9, True) == 0.0
    assert ps.colocated_engine_bytes(50e9, 30e9, 24e9, True) == pytest.approx(4e9)


def test_step_waits_for_the_longest_completion():
    base = _est(**GRPO, rollout_engine="vllm")
    assert "rollout_decode_tail" not in base.step_breakdown_s
    r = _est(**GRPO, rollout_engine="vllm", completion_len_max=1024)
    bd = r.step_breakdown_s
    assert bd["rollout_decode"] == pytest.approx(base.step_breakdown_s["rollout_decode"])
    assert bd["rollout_decode_tail"] > 0
    assert bd["total"] == pytest.approx(sum(v for k, v in bd.items() if k != "total"))
    # between the mean-based and the cap-based figures: the tail drains, the cap-based run does not
    cap = _est(**{**GRPO, "completion_len": 1024}, rollout_engine="vllm")
    gen = bd["rollout_decode"] + bd["rollout_decode_tail"]
    assert base.step_breakdown_s["rollout_decode"] < gen < cap.step_breakdown_s["rollout_decode"]
    assert any("longest completion" in a for a in r.assumptions)
    parts = r.to_dict()["stage"]["train_parts_s"]  # the tail counts as generation in the wall clock's split
    assert sum(parts.values()) == pytest.approx(r.totals.train_s)
    assert parts["generation"] > base.to_dict()["stage"]["train_parts_s"]["generation"]
    # HF generate keeps finished sequences in the batch: its tail is decode at the full batch to the cap
    hf = _est(**GRPO, completion_len_max=1024).step_breakdown_s
    hf_cap = _est(**{**GRPO, "completion_len": 1024}).step_breakdown_s
    assert hf["rollout_decode"] + hf["rollout_decode_tail"] == pytest.approx(hf_cap["rollout_decode"], rel=1e-6)


def test_sleeping_engine_peak_is_the_larger_phase():
    kw = dict(GRPO, rollout_engine="vllm")
    awake = _est(**kw)
    asleep = _est(**kw, rollout_sleep=True, gpu_memory_utilization=ps.VLLM_COLOCATE_MEMORY_SHARE)
    assert _est(**kw, rollout_sleep=True).to_dict()["stage"]["gpu_memory_utilization"] == ps.VLLM_SLEEP_MEMORY_SHARE
    assert awake.memory_breakdown_gib["rollout_engine"] == pytest.approx(ps.VLLM_COLOCATE_MEMORY_SHARE * 80.0)
    # LoRA on 8B: resident weights ~16 GB + the 24 GB pool < the training peak? either way it adds less
    assert asleep.memory_breakdown_gib.get("rollout_engine", 0.0) < awake.memory_breakdown_gib["rollout_engine"]
    assert asleep.memory_per_gpu_gib == pytest.approx(sum(asleep.memory_breakdown_gib.values()))
    assert asleep.memory_per_gpu_gib < awake.memory_per_gpu_gib
    assert asleep.step_breakdown_s["total"] == pytest.approx(awake.step_breakdown_s["total"])


def test_rollout_tp_shards_the_engine_weights():
    kw = dict(method="full", stage="grpo", gpus=8, sharding="zero3", micro_batch=1, grad_accum=1, seq_len=256,
              completion_len=256, group_size=8, rollout_engine="vllm")
    with pytest.raises(InputError, match="rollout-tp"):  # 70B bf16 = 140 GB > 0.3 x 80 GB on one engine GPU
        _est(model="meta-llama/Llama-3.1-70B", **kw, rollout_tp=1)
    r = _est(model="meta-llama/Llama-3.1-70B", **kw, rollout_tp=8)  # 17.5 GB per GPU: one engine of 8
    assert r.step_breakdown_s["rollout_decode"] > 0
    assert r.to_dict()["stage"]["rollout_tp"] == 8
    # not given: the smallest power of two whose shard leaves half the share to the KV cache (none of 1, 2,
    # 4 does: 140 / 4 = 35 GB > 12 GB), so the largest dividing the 8 GPUs
    assert _est(model="meta-llama/Llama-3.1-70B", **kw).to_dict()["stage"]["rollout_tp"] == 8


def test_train_steps_per_rollout():
    one = _est(**GRPO)
    four = _est(**GRPO, train_steps_per_rollout=4)
    b1, b4 = one.step_breakdown_s, four.step_breakdown_s
    assert b4["optimizer"] == pytest.approx(4 * b1["optimizer"])
    assert "policy_nograd" not in b1 and b4["policy_nograd"] > 0  # old log-probs once the policy moves
    assert b4["total"] == pytest.approx(sum(v for k, v in b4.items() if k != "total"))
    with pytest.raises(InputError, match="train-steps-per-rollout"):
        _est(**GRPO, train_steps_per_rollout=3)  # 3 does not divide the 4 micro-steps


@pytest.mark.parametrize("kw", [
    dict(stage="grpo", rollout_tp=2),  # HF generate has no engine of its own
    dict(stage="grpo", rollout_sleep=True),
    dict(stage="grpo", rollout_engine="vllm", rollout_sleep=True, rollout_gpus=2, gpus=4),
    dict(stage="grpo", rollout_engine="vllm", rollout_tp=3, gpus=4),
    dict(stage="grpo", completion_len=512, completion_len_max=256),
    dict(stage="dpo", train_steps_per_rollout=2),
])
def test_bad_rl_step_input(kw):
    with pytest.raises(InputError) as e:
        make_job(**kw)
    assert e.value.field == "job"


def test_cap_only_mean_is_half_the_cap():
    # lengths uniform on [0, cap]: mean = cap / 2 (at least one token)
    assert ps.mean_from_cap(4096) == 2048 and ps.mean_from_cap(1) == 1
    kw = {k: v for k, v in GRPO.items() if k != "completion_len"}
    r = _est(**kw, rollout_engine="vllm", completion_len_max=1024)
    same = _est(**kw, rollout_engine="vllm", completion_len=512, completion_len_max=1024)
    assert r.to_dict()["stage"]["completion_len"] == 512
    assert r.step_breakdown_s == pytest.approx(same.step_breakdown_s)  # the update costs the mean, decode the cap
    assert r.step_breakdown_s["rollout_decode_tail"] > 0
    assert any("half the cap 1024" in a for a in r.assumptions)
    assert not any("half the cap" in a for a in same.assumptions)


def test_areal_before_0_4_is_realhf_megatron():
    from tuneplan.specs.framework import get_framework

    old, now = get_framework("areal@0.1"), get_framework("areal")
    assert old.distributed_optimizer and old.grad_ckpt and not now.distributed_optimizer


def test_verl_megatron_profile_is_megatron_core_with_fp32_grads():
    from tuneplan.specs.framework import get_framework, resolve_framework

    v, m = get_framework("verl-megatron"), get_framework("megatron")
    assert resolve_framework("verl-mcore") == "verl-megatron"
    assert v.distributed_optimizer and v.grad_buffers and v.cross_entropy == m.cross_entropy
    assert v.fp32_grads and not m.fp32_grads and not v.tp_comm_overlap and not v.grad_ckpt


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not beside the checkout")
def test_rl_benchmark_reads_the_rows_as_their_frameworks_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rl_by_source", REPO / "benchmarks" / "rl_by_source.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.evaluate([reference_dir() / f"{s}.csv" for s in ("verl", "trl-docs", "open-instruct")]).set_index("id")
    # DeepSeek-V3 on 96 GPUs at tp 8 x pp 12 x ep 8: only expert tensor parallel 1 fits its 8 tp x dp ranks
    # (verl's expert_tensor_parallel_size), so it answers; rows with no GPU or no group say why
    assert out.loc["verl-23", "why"] == "" and out.loc["verl-23", "pred_step"] > 0
    assert "names no GPU" in out.loc["trl-docs-1", "why"]
    assert out.loc["verl-19", "why"].startswith("InputError: group_size: not stated")
    assert "multi-turn tool-calling rollouts are not modelled" in out.loc["verl-17", "why"]  # the notes say so
    # verl's phase timers from the notes beside the parts that cost them: verl-1 times gen 357.41 s,
    # old_log_prob 107.71 s and update_actor 269.80 s; the predicted phases and the refit make the step
    v1 = out.loc["verl-1"]
    assert (v1["gen_s"], v1["old_log_prob_s"], v1["update_actor_s"]) == (357.41, 107.71, 269.80)
    assert v1["gen_pred_s"] + v1["old_log_prob_pred_s"] + v1["update_actor_pred_s"] == pytest.approx(
        v1["pred_step"], rel=1e-3)
    # verl-13 trained by Megatron (notes; no layout stated): no recompute in its update, which then costs
    # fwd + bwd = 3 of the old-log-prob forward plus communication; verl-23's "rollout time(s)" is its gen timer,
    # which holds the refit (rollout_mode), here over the network: tp 8 x pp 12 spans 12 nodes
    v13, v23 = out.loc["verl-13"], out.loc["verl-23"]
    assert 3.0 < v13["update_actor_pred_s"] / v13["old_log_prob_pred_s"] < 3.5
    assert v23["gen_s"] == 1050 and v23["gen_pred_s"] > 0
    # coverage: verl-1 gives only the cap (20480): the interval over the mean's range holds its 790 s step,
    # the learned width alone around the half-cap estimate does not; verl-23 gives its mean: no spread
    assert v1["cap_only"] and v1["inside"] == 1.0 and v1["inside_before"] == 0.0 and v1["low"] < v1["low_before"]
    assert out.loc["verl-23", "low"] == pytest.approx(out.loc["verl-23", "low_before"])
    # open-instruct's OLMo 2 1B DPO ran on 8 H100s at 8 pairs x 2048 tokens per GPU; its row states no sharding
    # or checkpointing: the source's defaults (ZeRO-3, checkpointing, data/source_defaults.yaml) fill them, said
    # in the row's fills; the SFT row of the same page keeps its own cells (the defaults are the DPO rows')
    oi = out.loc["open-instruct-2"]
    assert oi["fits"] == 1.0 and "sharding=zero3(source default open-instruct)" in oi["filled"]
    assert "grad_ckpt=1(source default open-instruct)" in oi["filled"]
    from tuneplan.runs.io import read_runs

    sft = read_runs([reference_dir() / "open-instruct.csv"], resolve=False).df.set_index("id").loc["open-instruct-1"]
    assert "source default open-instruct" not in str(sft["defaults_used"])


def test_rl_benchmark_reads_prompt_lengths_layouts_and_refuses_unstated_lengths():
    import importlib.util

    spec = importlib.util.spec_from_file_location("rl_by_source", REPO / "benchmarks" / "rl_by_source.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # realhf's step log: "Average #tokens per batch" = the dataset's prompt tokens per step of 1024 prompts,
    # so 111847 / 1024 = 109.2 -> 109 tokens a prompt; without the log line the cell (a cap) stands
    areal = {"id": "a", "source": "areal", "framework": "areal", "stage": "ppo", "prompts_per_step": 1024,
             "prompt_len": 2048, "group_size": 16, "notes": "log line 'Average #tokens per batch is 111847'"}
    assert bench.prompt_len(areal) == 109 and bench.sft_row(areal)["seq_len"] == 109
    assert bench.prompt_len({**areal, "notes": ""}) == 2048
    # Megatron-SWIFT's expert tensor parallel defaults to 1 (Megatron-Core's own default is tp: 4 x 4 would
    # not divide tp 4 x dp 1); an FSDP / DeepSpeed layout is left as it is
    swift = {"id": "s", "source": "ms-swift-examples", "framework": "megatron", "stage": "dpo", "seq_len": 8192,
             "sharding": "tp4+pp2+ep4+optim-offload"}
    assert bench.sft_row(swift)["sharding"] == "tp4+pp2+ep4+optim-offload+etp1"
    assert bench.sft_row({**swift, "sharding": "zero3"})["sharding"] == "zero3"
    # a preference row stating no length (ms-swift's max_length default: the model's max_model_len, the
    # dataset's own lengths) and an RL row stating no batch, group or length are refused, not guessed
    with pytest.raises(InputError, match="no sequence or prompt length"):
        bench.sft_row({**swift, "seq_len": None})
    with pytest.raises(InputError, match="states no prompts per step"):
        bench.sft_row({"id": "r", "source": "areal", "framework": "areal", "stage": "ppo"})
