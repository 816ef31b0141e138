"""Hand-checkable tests of pipeline micro-batches and schedules (issue 31 item 3) and of expert
parallelism spanning tensor x data ranks with an expert tensor-parallel degree (issue 31 item 2,
issue 32 item 3), as megatron-core 0.13 runs them."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tuneplan.configs import read_configs
from tuneplan.learn.dataset import PIPELINE_MICRO_BATCH, _Defaults, batch_shape, row_to_config
from tuneplan.physics.constants import DEFAULT_CONSTANTS as C
from tuneplan.physics.memory import memory
from tuneplan.physics.parallel import expert_all_to_all, pipeline_inflight_factor, pipeline_p2p_bandwidth
from tuneplan.physics.stack import stack_assumptions
from tuneplan.physics.step import step_time
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import JobSpec, make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]
GIB = 1024.0**3


def _f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


# --- pipeline: micro-batches, bubble, activations in flight ----------------------------------------

def test_inflight_micro_batches_follow_megatron_schedules():
    pp, one, two = np.array(4.0), np.array(1.0), np.array(2.0)
    # 1F1B: pp - 1 warm-up forwards plus the one in hand; fewer micro-batches than stages: all of them
    assert _f(pipeline_inflight_factor(pp, one, np.array(8.0))) == 4.0
    assert _f(pipeline_inflight_factor(pp, one, np.array(2.0))) == 2.0
    # interleaved, vpp 2: 2 x (4 - 1) + (2 - 1) x 4 = 10 warm-up chunks + 1, each half a stage: 5.5
    assert _f(pipeline_inflight_factor(pp, two, np.array(8.0))) == (2 * 3 + 1 * 4 + 1) / 2
    # capped at every chunk of the step: 3 micro-batches x 2 chunks = 3 stages' worth
    assert _f(pipeline_inflight_factor(pp, two, np.array(3.0))) == 3.0
    assert _f(pipeline_inflight_factor(np.array(1.0), one, np.array(8.0))) == 1.0


def test_bubble_is_pp_minus_one_over_m_times_vpp_of_the_micro_batches():
    m = resolve_model("meta-llama/Llama-3.1-70B")
    kw = {"method": "full", "gpus": 32, "tp": 4, "pp": 8, "micro_batch": 1, "seq_len": 4096, "examples": 1.0,
          "framework": "megatron"}
    for ga, vpp in ((16, 1), (64, 1), (16, 4)):
        a = build_arrays([(m, H100, make_job(grad_accum=ga, vpp=vpp, **kw), 4096)])
        out = step_time(a)
        busy = _f(out["step_s"]) - _f(out["optimizer_s"]) - _f(out["communication_s"]) - _f(out["pipeline_bubble_s"])
        # the m micro-batches run at the last stage's pace; the fill and drain, (pp - 1)/vpp micro-steps, at the
        # others': without the LM head (forward + 2x backward, bf16, over tp 4) and Megatron's chunked loss
        # (8 bytes per logit, ops.LOSS_BYTES_PER_LOGIT, over tp 4)
        head = 3 * _f(a["head_flops"]) * 4096 / 4 / (_f(a["bf16_peak_flops"]) * _f(out["efficiency"])
                                                   * _f(a["matmul_rel"]))
        loss = 4096 * m.vocab_size * 8.0 / 4 / (_f(a["mem_bw"]) * C.bandwidth_efficiency)
        assert _f(out["pipeline_bubble_s"]) == pytest.approx(7 / vpp * (busy / ga - head - loss))
        assert _f(out["pipeline_bubble_s"]) / busy < 7 / (ga * vpp)


def test_pipeline_send_recv_crosses_nodes_when_the_stage_stride_fills_a_node():
    intra, inter = np.array(450e9), np.array(50e9)
    # pipeline ranks are tp x cp x dp apart (order tp-cp-ep-dp-pp): 2 x 1 x 2 = 4 < 8 GPUs of a node
    assert _f(pipeline_p2p_bandwidth(np.array(2.0), np.array(1.0), np.array(2.0), np.array(8.0), intra, inter)) == 450e9
    assert _f(pipeline_p2p_bandwidth(np.array(8.0), np.array(1.0), np.array(2.0), np.array(8.0), intra, inter)) == 50e9


def test_a_global_batch_alone_makes_pipeline_micro_batches():
    # dp 8, global 1536: a pipeline takes micro-batch 1 and 192 micro-batches (Megatron's
    # global / (micro x dp)), not one micro-batch of the whole local batch
    used = _Defaults()
    assert batch_shape(8, None, None, 1536, used, pp=8) == (PIPELINE_MICRO_BATCH, 192)
    assert any("pipeline" in u for u in used)
    # without a pipeline nothing changes: the local batch as the micro-batch, no accumulation
    assert batch_shape(8, None, None, 1536, _Defaults(), pp=1) == (192, 1)
    # stated cells win
    assert batch_shape(8, 2, None, 1536, _Defaults(), pp=8) == (2, 96)


def test_a_row_reads_its_virtual_stages_from_the_notes():
    row = {"model": "meta-llama/Llama-3.1-70B", "gpu": "H100-SXM5-80GB", "method": "full", "precision": "bf16",
           "sharding": "ddp+tp4+pp4", "gpus": 32, "global_batch_size": 64, "seq_len": 4096,
           "framework": "megatron", "notes": "TP=4 PP=4 CP=1 VP=5 DP=2"}
    cfg = row_to_config(row)
    assert (cfg.job.vpp, cfg.job.micro_batch, cfg.job.grad_accum) == (5, 1, 32)
    assert cfg.job.dp == 2
    assert row_to_config({**row, "notes": "VP=n/a"}).job.vpp == 1


def test_a_checkpointed_row_reads_megatron_recompute_granularity_from_the_notes():
    row = {"model": "Qwen/Qwen2.5-14B", "gpu": "A800-SXM4-80GB", "method": "full", "sharding": "tp4", "gpus": 8,
           "micro_batch_size": 1, "grad_accum": 8, "seq_len": 8192, "framework": "megatron", "grad_ckpt": 1,
           "notes": "tensor_model_parallel_size 4, recompute_granularity selective, flash attn"}
    assert row_to_config(row).job.checkpointing == "selective"
    assert row_to_config({**row, "notes": "recompute_granularity full"}).job.checkpointing == "full"
    assert row_to_config({**row, "notes": ""}).job.checkpointing == "full"  # grad_ckpt 1 alone: full
    assert not row_to_config({**row, "grad_ckpt": 0}).job.grad_ckpt  # the cell says off: the notes do not count


def test_a_config_global_batch_counts_data_parallel_ranks_only(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                              "zero_optimization": {"stage": 1}}))
    acc = tmp_path / "accelerate.yaml"
    acc.write_text("distributed_type: MEGATRON_LM\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n"
                   "  megatron_lm_pp_degree: 2\nnum_machines: 1\nnum_processes: 8\n")
    j = read_configs([ds, acc]).job_kwargs()
    # 8 GPUs / (tp 2 x pp 2) = 2 data-parallel ranks: 64 / (2 x 2) = 16 micro-batches
    assert (j["gpus"], j["tp"], j["pp"], j["micro_batch"], j["grad_accum"]) == (8, 2, 2, 2, 16)


def test_assumptions_state_micro_batches_and_bubble():
    m = resolve_model("meta-llama/Llama-3.1-70B")
    job = make_job(method="full", gpus=32, tp=4, pp=8, vpp=2, micro_batch=1, grad_accum=14, framework="megatron")
    text = " ".join(stack_assumptions(m, H100, job))
    assert "14 micro-batches per step" in text and f"{7 / 28:.1%}" in text


# --- expert parallelism over tensor x data ranks --------------------------------------------------

def test_ep_spans_tensor_and_data_ranks():
    # 16 GPUs, tp 2, dp 8: ep 16 with etp 1 uses all tp x dp ranks (Megatron allows it; ep | dp does not hold)
    job = JobSpec(gpus=16, tp=2, ep=16, etp=1)
    assert (job.dp, job.expert_tp) == (8, 1)
    assert JobSpec(gpus=16, tp=2, ep=8).expert_tp == 2  # megatron-core: etp defaults to tp
    with pytest.raises(ValueError, match=r"tp x cp x data-parallel \(16\) must be divisible by ep x etp \(16 x 2\)"):
        JobSpec(gpus=16, tp=2, ep=16)
    with pytest.raises(ValueError, match="etp"):
        JobSpec(gpus=16, etp=0)


def test_expert_all_to_all_by_hand():
    n, intra, inter, lat = np.array(1e8), np.array(400e9), np.array(50e9), C.comm_latency_s
    eff = C.comm_efficiency
    # ep 8 inside a node of 8: 7/8 of the bytes over NVLink, one latency per peer
    t = expert_all_to_all(n, np.array(8.0), np.array(1.0), np.array(8.0), intra, inter, C)
    assert _f(t) == pytest.approx(1e8 * 7 / 8 / (400e9 * eff) + 7 * lat)
    # ep 16 over 2 nodes: 7/16 inside, 8/16 across at the network share; the slower of the two
    t = expert_all_to_all(n, np.array(16.0), np.array(1.0), np.array(8.0), intra, inter, C)
    assert _f(t) == pytest.approx(1e8 * 8 / 16 / (50e9 * eff) + 15 * lat)
    # ep 8 x etp 2 = 16 GPUs: ep ranks are 2 apart, 4 of them in a node, 4/8 of the bytes leave it
    t = expert_all_to_all(n, np.array(8.0), np.array(2.0), np.array(8.0), intra, inter, C)
    assert _f(t) == pytest.approx(1e8 * 4 / 8 / (50e9 * eff) + 7 * lat)
    assert _f(expert_all_to_all(n, np.array(1.0), np.array(1.0), np.array(8.0), intra, inter, C)) == 0.0


def test_expert_weights_per_gpu_split_over_ep_times_etp():
    m = resolve_model("Qwen/Qwen3-30B-A3B")
    kw = {"method": "full", "gpus": 16, "nodes": 2, "tp": 2, "micro_batch": 1, "seq_len": 4096, "examples": 1.0,
          "framework": "megatron", "sharding": "ddp"}

    def weights(**extra):
        a = build_arrays([(m, H100, make_job(**kw, **extra), 4096)])
        return _f(memory(a)["weights_gib"]) * GIB, a

    w8, a = weights(ep=8)  # etp = tp = 2: experts over 16 GPUs
    w8_1, _ = weights(ep=8, etp=1)  # experts over 8 GPUs
    w16_1, _ = weights(ep=16, etp=1)  # experts over 16 GPUs again
    expert = _f(a["params_expert"]) * _f(a["weight_bytes_compute"])
    # etp 2 -> 1 doubles the experts each GPU holds: + expert / 16
    assert w8_1 - w8 == pytest.approx(expert / 16, rel=1e-6)
    assert w16_1 == pytest.approx(w8, rel=1e-9)


def test_expert_parallel_step_costs_the_all_to_all_across_nodes():
    m = resolve_model("Qwen/Qwen3-30B-A3B")
    kw = {"method": "full", "gpus": 16, "nodes": 2, "tp": 2, "micro_batch": 1, "seq_len": 4096, "examples": 1.0,
          "framework": "megatron"}
    inside = step_time(build_arrays([(m, H100, make_job(ep=4, **kw), 4096)]))  # 4 x 2 = 8 GPUs: one node
    across = step_time(build_arrays([(m, H100, make_job(ep=8, **kw), 4096)]))  # 8 x 2 = 16 GPUs: two nodes
    assert _f(across["tensor_parallel_s"]) > _f(inside["tensor_parallel_s"])
    job = make_job(ep=8, **kw)
    text = " ".join(stack_assumptions(m, H100, job))
    assert "ep 8 x expert tensor parallel 2" in text and "across nodes" in text
    assert "routing assumed balanced and dropless" in text  # load imbalance is not costed, and says so


def test_expert_gemms_run_at_the_experts_own_width():
    from tuneplan.physics.ops import gemm_efficiency, gemm_width

    m = resolve_model("Qwen/Qwen3-30B-A3B")  # 128 experts of width 768 over hidden 2048, top-8
    a = build_arrays([(m, H100, make_job(method="full", gpus=16, nodes=2, tp=2, ep=8, micro_batch=1, seq_len=4096,
                                         examples=1.0, framework="megatron"), 4096)])
    # gate/up split their 768 outputs, down its 768 inputs: 768 split by etp 2, the 2048 side whole
    assert (_f(a["expert_split_width"]), _f(a["expert_full_width"])) == (768.0, 2048.0)
    assert _f(gemm_width(a, "expert", np.array(2.0))) == 384.0
    # each expert's rows: 4096 tokens x etp 2 / tp 2 x ep 8 x top-8 / 128 experts = 2048; the experts' FLOPs
    # at that GEMM's efficiency
    out = step_time(a)
    dense = _f(a["fwd_block_flops"]) - _f(a["expert_fwd_flops"])
    eff_dense = _f(out["efficiency"])
    eff_expert = _f(gemm_efficiency(np.array(2048.0), np.array(384.0), C))
    gemm_fwd = 4096 / 2 * (dense / eff_dense + _f(a["expert_fwd_flops"]) / eff_expert) / (
        _f(a["lin_peak_flops"]) * _f(a["matmul_rel"]))
    attention_etc = _f(out["forward_s"]) - gemm_fwd
    assert 0 < attention_etc < 0.25 * _f(out["forward_s"])  # attention and the head: the rest of the forward


def test_moe_token_permutation_traffic_by_hand(monkeypatch):
    from tuneplan.physics import step
    from tuneplan.physics.ops import moe_permute_bytes

    one = np.array(1.0)
    assert _f(moe_permute_bytes(one, one, one)) == 12.0  # one GPU: gather, weight, scatter-add, both ways
    assert _f(moe_permute_bytes(one, np.array(8.0), np.array(2.0))) == 12.0 + 2 * 8.0  # + sort what arrives
    m = resolve_model("Qwen/Qwen3-30B-A3B")
    a = build_arrays([(m, H100, make_job(method="full", gpus=16, nodes=2, tp=2, ep=8, micro_batch=1, grad_accum=2,
                                         seq_len=4096, examples=1.0, framework="megatron"), 4096)])
    with_ = _f(step_time(a)["elementwise_s"])
    monkeypatch.setattr(step.ops, "moe_permute_bytes", lambda routed, ep, etp: 0.0 * routed)
    without = _f(step_time(a)["elementwise_s"])
    # 2 micro-steps x 48 MoE layers x (4096 / tp 2 tokens x 2048 x top-8 x 2 bytes) x 28 passes, at 80% of 3,350 GB/s
    routed = 4096 / 2 * 2048 * 8 * 2
    assert with_ - without == pytest.approx(2 * 48 * routed * 28 / (_f(a["mem_bw"]) * C.bandwidth_efficiency))


# --- NVLink domains beyond the node (GB200 / GB300 NVL72) -----------------------------------------

def test_nvlink_domain_spans_the_trays():
    from tuneplan.physics.parallel import domain_gpus

    # GB200 NVL72: 64 GPUs in 16 trays of 4 are one NVLink domain; 144 GPUs are two domains of 72
    assert _f(domain_gpus(np.array(64.0), np.array(16.0), np.array(72.0))) == 64.0
    assert _f(domain_gpus(np.array(144.0), np.array(36.0), np.array(72.0))) == 72.0
    # an HGX part (domain 8) or one without a figure (0): the node
    assert _f(domain_gpus(np.array(64.0), np.array(8.0), np.array(8.0))) == 8.0
    assert _f(domain_gpus(np.array(64.0), np.array(16.0), np.array(0.0))) == 4.0


def test_catalog_nvlink_domains_name_their_source():
    import csv
    from importlib import resources

    rows = list(csv.DictReader(resources.files("tuneplan.data").joinpath("gpus.csv").read_text().splitlines()))
    given = {r["name"]: int(r["nvlink_domain_gpus"]) for r in rows if r["nvlink_domain_gpus"].strip()}
    assert given["GB200"] == given["GB300"] == 72 and given["H100-SXM5-80GB"] == 8
    assert all(r["nvlink_domain_source"].strip() for r in rows if r["nvlink_domain_gpus"].strip())
    assert gpu_catalog()["GB200"].nvlink_domain_gpus == 72


def test_gb200_collectives_inside_the_rack_run_at_nvlink():
    gpus = gpu_catalog()
    gb200 = gpus["GB200"]
    m = resolve_model("meta-llama/Llama-3.1-70B")
    kw = {"method": "full", "gpus": 64, "nodes": 16, "micro_batch": 1, "grad_accum": 4, "seq_len": 8192,
          "examples": 1.0, "framework": "megatron", "sharding": "zero1"}
    job = make_job(**kw)
    rack = step_time(build_arrays([(m, gb200, job, 8192)]))
    # the same part without its NVLink domain: the gradients' reduce-scatter over 64 data-parallel
    # ranks goes hierarchically over the network between the 4-GPU trays
    trays = step_time(build_arrays([(m, dataclasses.replace(gb200, nvlink_domain_gpus=0), job, 8192)]))
    assert _f(rack["communication_total_s"]) < _f(trays["communication_total_s"]) / 2
    assert "NVLink domain: GB200 joins 72 GPUs over its 4-GPU nodes" in " ".join(stack_assumptions(m, gb200, job))


def test_a_row_of_many_gpus_without_nodes_takes_8_gpu_servers():
    row = {"model": "meta-llama/Llama-3.1-70B", "gpu": "H100-SXM5-80GB", "method": "full", "precision": "bf16",
           "sharding": "ddp+tp8", "gpus": 64, "micro_batch_size": 1, "grad_accum": 1, "seq_len": 4096,
           "framework": "megatron"}
    cfg = row_to_config(row)
    assert cfg.job.nodes == 8 and any(u.startswith("nodes=8 (8 GPUs per node") for u in cfg.defaults_used)
    assert row_to_config({**row, "nodes": 4}).job.nodes == 4
    assert row_to_config({**row, "gpus": 8, "sharding": "ddp"}).job.nodes == 1


def test_planner_gpu_counts_follow_the_expert_layout():
    from tuneplan.plan.search import _base_jobs
    from tuneplan.plan.space import Space, enumerate_grid

    # tp 2, ep 16, etp 1: 16 GPUs hold one copy of the experts (not tp x ep = 32 as when ep | dp)
    jobs, model_par, multiple = _base_jobs(["full"], {"tp": 2, "ep": 16, "etp": 1}, 1000.0, 512.0, 1.0)
    assert (model_par, multiple, jobs[0].gpus) == (2, 16, 16)
    # etp defaults to tp: ep 16 x etp 2 = 32
    assert _base_jobs(["full"], {"tp": 2, "ep": 16}, 1000.0, 512.0, 1.0)[2] == 32
    grid = enumerate_grid(1, 1, Space(gpu_counts=(8, 16, 24, 32, 48), global_batch=None, grad_accums=(1,)),
                          model_par=model_par, gpu_multiple=multiple)
    assert sorted(set(grid.gpus.tolist())) == [16, 32, 48]


def test_expert_parallel_refused_beyond_the_experts_or_on_a_dense_model():
    # ep 8 on dense Llama was estimated as plain data parallel while the assumptions described an
    # all-to-all over 8 GPUs; ep 16 over Mixtral's 8 experts left ranks with no expert
    import tuneplan
    from tuneplan.errors import InputError

    kw = {"method": "full", "seq_len": 1024, "examples": 1000}
    with pytest.raises(InputError, match=r"^ep: .*Llama-3.1-8B is a dense model \(no experts\): --ep 1$"):
        tuneplan.estimate("meta-llama/Llama-3.1-8B", "H100-SXM5-80GB", gpus=8, ep=8, **kw)
    with pytest.raises(InputError, match=r"^ep: .*ep 16 is more than mistralai/Mixtral-8x7B-v0.1's 8 experts$"):
        tuneplan.estimate("mistralai/Mixtral-8x7B-v0.1", "H100-SXM5-80GB", gpus=16, ep=16, **kw)
    assert tuneplan.estimate("mistralai/Mixtral-8x7B-v0.1", "H100-SXM5-80GB", gpus=16, ep=8, **kw).job.ep == 8
