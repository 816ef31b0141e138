"""Communication by domain (issue 31): each parallel dimension's bytes and seconds inside the NVLink domain
and across domains, checked by hand on a DeepSeek-V3 1,024-GPU run (EP 64, PP 8, H100 8-GPU nodes) and a
GB200 NVL72 context-parallel run."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.api import estimate
from tuneplan.physics.constants import DEFAULT_CONSTANTS as C
from tuneplan.physics.parallel import (
    expert_all_to_all,
    expert_all_to_all_parts,
    hierarchical_allreduce_parts,
)
from tuneplan.physics.step import step_time
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

GB = 1e9
DSV3 = dict(gpus=1024, nodes=128, ep=64, pp=8, method="full", micro_batch=1, grad_accum=16, framework="megatron")
LLAMA_CP = dict(gpus=64, tp=4, cp=8, method="full", micro_batch=1, grad_accum=4, framework="megatron")


def _domains(model: str, gpu: str, seq: int, **job) -> dict:
    return estimate(model, gpu, seq_len=seq, interval=None, **job).to_dict()["communication_by_domain"]


def test_deepseek_v3_1024_gpus_expert_all_to_all_mostly_across_nodes():
    d = _domains("deepseek-ai/DeepSeek-V3", "H100-SXM5-80GB", 4096, **DSV3)
    # routed copies per GPU per micro-step: 4096 tokens x 7168 x top-8 x 2 bytes; dispatch + combine, forward
    # + backward in each of the 58 MoE layers / 8 stages, 16 micro-steps: 464 all-to-alls
    routed, calls = 4096 * 7168 * 8 * 2, 4 * 58 / 8 * 16
    # EP 64 over consecutive GPUs: 7 of the 63 peers share the 8-GPU node, 56 are on other nodes
    assert d["expert"]["inside_domain_gb"] == pytest.approx(routed * 7 / 64 * calls / GB)
    assert d["expert"]["across_domains_gb"] == pytest.approx(routed * 56 / 64 * calls / GB)
    assert d["expert"]["across_domains_gb"] == pytest.approx(8 * d["expert"]["inside_domain_gb"])
    # pipeline stages are 128 GPUs apart (order tp-cp-ep-dp-pp): every send crosses nodes; activations
    # 4096 x 7168 x 2 bytes, forward and backward, per micro-step
    assert d["pipeline"] == pytest.approx({"inside_domain_gb": 0.0, "inside_domain_s": 0.0,
                                           "across_domains_gb": 4096 * 7168 * 2 * 2 * 16 / GB,
                                           "across_domains_s": d["pipeline"]["across_domains_s"]})
    assert "tensor" not in d and "context" not in d


def test_full_recompute_re_runs_the_forward_dispatch_and_combine():
    m, g = resolve_model("deepseek-ai/DeepSeek-V3"), gpu_catalog()["H100-SXM5-80GB"]
    off, full = (step_time(build_arrays([(m, g, make_job(seq_len=4096, grad_ckpt=ck, **DSV3), 4096)]), C)
                 for ck in (False, True))
    # 4 all-to-alls per MoE layer (dispatch + combine, forward + backward), 6 when the forward runs twice
    for key in ("comm_expert_inside_bytes", "comm_expert_across_bytes"):
        assert full[key][0] == pytest.approx(1.5 * off[key][0])


def test_deepseek_v3_experts_reduce_gradients_over_the_expert_data_parallel_pair():
    m, g = resolve_model("deepseek-ai/DeepSeek-V3"), gpu_catalog()["H100-SXM5-80GB"]
    a = build_arrays([(m, g, make_job(seq_len=4096, **DSV3), 4096)])
    t = step_time(a, C)
    # the distributed optimizer's gradient all-reduce (Megatron-Core's bf16 grad buffer, 2 bytes): dense weights
    # over the 128 data-parallel ranks, 8 to a node (2 x 7/8 inside, 2 x 15/16 of the 1/8 shard across); experts
    # over the 2 expert-data-parallel ranks 64 GPUs apart (2 x 1/2 across), each GPU holding 1/64 of them
    per_gpu = a["params_trainable"][0] / 8 * 2.0
    share = a["params_expert"][0] / a["params_total"][0]
    dense, expert = per_gpu * (1 - share), per_gpu * share / 64
    assert t["comm_data_inside_bytes"][0] == pytest.approx(2 * 7 / 8 * dense)
    assert t["comm_data_across_bytes"][0] == pytest.approx(2 * 15 / 16 * dense / 8 + 2 * 1 / 2 * expert)
    # grad_reduce_in_fp32 (--fp32-grads): the same reductions in 4-byte elements
    f = step_time(build_arrays([(m, g, make_job(seq_len=4096, fp32_grads=True, **DSV3), 4096)]), C)
    assert f["comm_data_inside_bytes"][0] == pytest.approx(2 * t["comm_data_inside_bytes"][0])


def test_gb200_nvl72_context_parallel_stays_inside_the_domain():
    # Llama-3.1-70B, 128k tokens, tp 4 x cp 8 x dp 2 = 64 GPUs of one NVL72 (16 4-GPU trays)
    d = _domains("meta-llama/Llama-3.1-70B", "GB200", 131072, nodes=16, **LLAMA_CP)
    # ring attention: each GPU's K/V block (16384 tokens x 2 x 1024 / tp 4 x 2 bytes) passed cp - 1 = 7 times
    # forward, K/V and their gradients backward (x 3), in 80 layers, 4 micro-steps
    kv = 16384 * 2 * 1024 / 4 * 2
    assert d["context"]["inside_domain_gb"] == pytest.approx(kv * 7 * 3 * 80 * 4 / GB)
    assert d["context"]["across_domains_gb"] == 0.0
    # tensor parallel: 4 all-reduces per layer of 16384 x 8192 x 2 bytes, 2 x 3/4 of it sent by each rank
    assert d["tensor"]["inside_domain_gb"] == pytest.approx(16384 * 8192 * 2 * 1.5 * 4 * 80 * 4 / GB)
    assert d["data"]["across_domains_gb"] == 0.0
    # the same job on B200 8-GPU nodes: a tp x cp group of 32 spans 4 nodes and runs at the network's pace
    b = _domains("meta-llama/Llama-3.1-70B", "B200-180GB", 131072, nodes=8, **LLAMA_CP)
    assert b["context"]["across_domains_gb"] == pytest.approx(d["context"]["inside_domain_gb"])
    assert b["context"]["across_domains_s"] > d["context"]["inside_domain_s"]


def test_domain_parts_add_up_to_the_collectives_time():
    n, intra, inter = np.array(1e8), np.array(400e9), np.array(50e9)
    b_in, b_out, s_in, s_out = expert_all_to_all_parts(n, np.array(16.0), np.array(1.0), np.array(8.0), intra, inter, C)
    assert (float(b_in), float(b_out)) == pytest.approx((1e8 * 7 / 16, 1e8 * 8 / 16))
    # both domains' sends run at once: the slower transfer, one latency per peer
    t = expert_all_to_all(n, np.array(16.0), np.array(1.0), np.array(8.0), intra, inter, C)
    assert float(t) == pytest.approx(max(float(s_in) - 7 * C.comm_latency_s, float(s_out) - 8 * C.comm_latency_s)
                                     + 15 * C.comm_latency_s)
    parts = hierarchical_allreduce_parts(n, np.array(32.0), np.array(8.0), intra, inter, C)
    assert (float(parts[0]), float(parts[1])) == pytest.approx((2 * 7 / 8 * 1e8, 2 * 3 / 4 * 1e8 / 8))


def test_single_gpu_has_no_communication_by_domain():
    assert "communication_by_domain" not in estimate("Qwen/Qwen2.5-0.5B", "H100-SXM5-80GB", seq_len=512,
                                                     interval=None).to_dict()


def test_domains_are_bookkeeping_only():
    m, g = resolve_model("deepseek-ai/DeepSeek-V3"), gpu_catalog()["H100-SXM5-80GB"]
    a = build_arrays([(m, g, make_job(seq_len=4096, **DSV3), 4096)])
    with_, without = step_time(a, C, domains=True), step_time(a, C, domains=False)
    assert not any(k.startswith("comm_") for k in without)
    assert {k: float(v[0]) for k, v in without.items()} == {k: float(with_[k][0]) for k in without}


def test_text_output_prints_the_domains_table():
    from rich.table import Table

    from tuneplan.report.tables import estimate_items

    r = estimate("meta-llama/Llama-3.1-70B", "GB200", seq_len=131072, nodes=16, interval=None, **LLAMA_CP)
    tables = {t.title: t for t in estimate_items(r) if isinstance(t, Table)}
    columns = tables["communication per GPU by domain (per step, before overlap)"].columns
    rows = {row[0]: row[1:] for row in zip(*([str(cell) for cell in col.cells] for col in columns), strict=True)}
    assert set(rows) == {"tensor", "context", "data"}
    assert rows["context"][0].startswith(f"{r.to_dict()['communication_by_domain']['context']['inside_domain_gb']:,.2f} GB")
    assert rows["context"][1].startswith("0.00 GB")
