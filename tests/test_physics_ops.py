"""Hand-checkable tests of the per-operation physics (issue 15, issue 14 part 5): attention at
FlashAttention's efficiency, low-precision GEMMs and casts, pipeline / context / data-parallel terms,
checkpointing modes, offload, fused cross-entropy, sequence parallel, and the frameworks file."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.activations import OFFLOAD_RESIDENT_LAYERS, offloaded_bytes
from tuneplan.physics.constants import DEFAULT_CONSTANTS as C
from tuneplan.physics.memory import memory
from tuneplan.physics.ops import (
    FLASH_HEAD_DIM_HALF,
    FLASH_SPAN_HALF,
    attention_efficiency,
    causal_share,
    expert_gemm_rows,
    gemm_width,
    logits_memory_bytes,
)
from tuneplan.physics.parallel import (
    hierarchical_allreduce_parts,
    pipeline_bubble_fraction,
    pipeline_inflight_factor,
    ring_attention_exposed,
)
from tuneplan.physics.precision import CAST_BYTES_PER_IO_ELEMENT, cast_seconds, linear_tflops
from tuneplan.physics.step import ring_time, step_time
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.framework import framework_for_text, load_frameworks
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

CAT = gpu_catalog()
H100 = CAT["H100-SXM5-80GB"]
A100 = CAT["A100-SXM4-80GB"]
GIB = 1024.0**3


def _arrays(model, job, seq, gpu=H100):
    return build_arrays([(model, gpu, job, seq)])


# --- attention ------------------------------------------------------------------------------------

def test_flash2_on_a100_matches_the_fa2_paper_points():
    # FA2 (Dao 2023, Fig. 6) causal fwd+bwd head dim 128: ~0.63 of peak at 16k, ~0.42 at 512
    e16k = attention_efficiency(np.array(16384.0), np.array(128.0), np.array(0), np.array(0))
    e512 = attention_efficiency(np.array(512.0), np.array(128.0), np.array(0), np.array(0))
    assert float(e16k) == pytest.approx(0.768 * 16384 / (16384 + 269) * 128 / (128 + 25.6))
    assert float(e16k) == pytest.approx(0.63, abs=0.01)
    assert float(e512) == pytest.approx(0.42, abs=0.01)
    assert FLASH_SPAN_HALF == 269.0 and FLASH_HEAD_DIM_HALF == 25.6


def test_hopper_native_kernels_beat_fa2_on_hopper():
    s, d = np.array(8192.0), np.array(128.0)
    fa2 = float(attention_efficiency(s, d, np.array(0), np.array(1)))
    te = float(attention_efficiency(s, d, np.array(1), np.array(1)))
    fa1 = float(attention_efficiency(s, d, np.array(3), np.array(1)))
    assert te / fa2 == pytest.approx(0.68 / 0.39)
    assert fa1 == pytest.approx(0.5 * fa2)


def test_causal_and_window_shares():
    seq = np.array([4096.0, 4096.0, 4096.0])
    span = np.array([4096.0, 1024.0, 4096.0])
    kernel = np.array([1.0, 1.0, 0.0])  # causal flash, causal flash, eager
    assert causal_share(span, seq, kernel).tolist() == [0.5, 1.0, 1.0]


def test_long_sequences_cost_attention_at_its_own_rate():
    # the same 32,768 tokens per micro-step as 1 x 32k or 16 x 2k: the GEMMs cost the same, attention differs
    m = resolve_model("meta-llama/Llama-3.1-8B")
    long = step_time(_arrays(m, make_job(method="full", micro_batch=1, seq_len=32768, examples=1.0), 32768))
    short = step_time(_arrays(m, make_job(method="full", micro_batch=16, seq_len=2048, examples=1.0), 2048))

    def attn(span):  # forward seconds: 4 x q_dim x layers x span/2 FLOPs per token, FA2 on Hopper at bf16 peak
        eff = float(attention_efficiency(np.array(float(span)), np.array(128.0), np.array(0), np.array(1)))
        return 4.0 * 4096 * 32 * span * 0.5 * 32768 / (H100.peak_tflops["bf16"] * 1e12 * eff)

    assert long["forward_s"][0] - short["forward_s"][0] == pytest.approx(attn(32768) - attn(2048), rel=1e-6)


# --- GEMMs and low precision ----------------------------------------------------------------------

def test_gemm_width_is_the_split_dimension_per_rank():
    m = resolve_model("meta-llama/Llama-3.1-70B")
    mt = model_terms(m, make_job(method="full"))
    a1 = _arrays(m, make_job(method="full", gpus=1), 2048)
    a8 = _arrays(m, make_job(method="full", gpus=8, tp=8), 2048)
    assert float(gemm_width(a1)[0]) == pytest.approx(min(mt.gemm_split_width, mt.gemm_full_width))
    # tensor parallel splits the MLP's 28,672 and the heads, not the 8,192 hidden: wider than hidden / tp
    assert float(gemm_width(a8)[0]) == pytest.approx(mt.gemm_split_width / 8)
    assert float(gemm_width(a8)[0]) > 8192 / 8


def test_expert_gemm_rows():
    # 2,048 tokens, top-2 of 8 experts, no expert parallel: 512 rows per expert; ep=4 brings 4 ranks' tokens
    assert float(expert_gemm_rows(np.array(2048.0), np.array(2.0), np.array(8.0), np.array(1.0))) == 512.0
    assert float(expert_gemm_rows(np.array(2048.0), np.array(2.0), np.array(8.0), np.array(4.0))) == 2048.0


def test_linear_tflops_and_fallbacks():
    assert linear_tflops(H100, "fp8") == (H100.peak_tflops["fp8"], None)
    tf, note = linear_tflops(A100, "fp8")
    assert tf == A100.peak_tflops["bf16"] and "no fp8" in note
    t4 = CAT["T4-16GB"]  # fp16 units only: the fallback names the peak it takes (it said "bf16 peak")
    tf, note = linear_tflops(t4, "fp8")
    assert tf == t4.peak_tflops["fp16"] and note.endswith(f"costed at its fp16 peak ({tf:g} TFLOP/s)")
    b200 = CAT["B200-180GB"]
    tf, note = linear_tflops(b200, "nvfp4")
    if b200.peak_tflops.get("fp4"):
        assert tf == b200.peak_tflops["fp4"] and note is None
    else:
        assert tf == b200.peak_tflops["fp8"] and "fp4" in note


def test_cast_traffic_by_hand():
    # 1,000 io elements per token, 2,048 tokens, fp8: 5 bytes each over 1 TB/s
    t = cast_seconds(np.array(1000.0), np.array(2048.0), np.array(1), np.array(1e12))
    assert float(t) == pytest.approx(5.0 * 1000 * 2048 / 1e12)
    assert CAST_BYTES_PER_IO_ELEMENT[1] == 5.0


def test_fp8_runs_only_the_linears_faster():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 2, "seq_len": 4096, "examples": 1.0}
    bf = step_time(_arrays(m, make_job(**kw), 4096))
    f8 = step_time(_arrays(m, make_job(precision="fp8", **kw), 4096))
    assert f8["forward_s"][0] < bf["forward_s"][0]
    # not 2x: attention, the LM head stay bf16 and the GEMMs reach 0.85 of the doubled peak
    assert f8["forward_s"][0] > 0.5 * bf["forward_s"][0]
    assert f8["elementwise_s"][0] > bf["elementwise_s"][0]  # the casts


def test_fp8_memory_keeps_bf16_weights_plus_cast_copies():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 1, "seq_len": 2048, "examples": 1.0, "master_weights": "fp32"}
    bf = memory(_arrays(m, make_job(**kw), 2048))
    f8 = memory(_arrays(m, make_job(precision="fp8", fp8_recipe="te", **kw), 2048))  # Transformer Engine's
    p = m.params_total
    assert bf["weights_gib"][0] == pytest.approx(2.0 * p / GIB, rel=1e-3)
    assert f8["weights_gib"][0] == pytest.approx(4.0 * p / GIB, rel=1e-3)  # bf16 + fp8 and its transpose
    assert f8["master_weights_gib"][0] == pytest.approx(bf["master_weights_gib"][0])
    assert f8["activations_gib"][0] < bf["activations_gib"][0]  # the linears' inputs saved in fp8


def test_fp8_base_weights_under_lora():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    mt = model_terms(m, make_job(method="lora", quant="fp8"))
    assert mt.frozen_linear_bytes == pytest.approx(1.0, abs=1e-3)
    assert mt.dequant_bytes == 3.0


# --- parallelism ----------------------------------------------------------------------------------

def test_pipeline_bubble_and_inflight_by_hand():
    assert float(pipeline_bubble_fraction(np.array(4.0), np.array(1.0))) == 3.0
    assert float(pipeline_bubble_fraction(np.array(4.0), np.array(2.0))) == 1.5
    assert float(pipeline_inflight_factor(np.array(4.0), np.array(1.0), np.array(8.0))) == 4.0
    assert float(pipeline_inflight_factor(np.array(4.0), np.array(2.0), np.array(8.0))) == 4.0 + 4.0 * 3 / 8
    assert float(pipeline_inflight_factor(np.array(1.0), np.array(1.0), np.array(8.0))) == 1.0


def test_hierarchical_allreduce_within_a_node_is_the_ring():
    nbytes, bw = np.array(1e9), np.array(300e9)
    def hierarchical_allreduce(*args):
        return sum(hierarchical_allreduce_parts(*args)[2:])

    one_node = hierarchical_allreduce(nbytes, np.array(8.0), np.array(8.0), bw, np.array(50e9), C)
    assert float(one_node) == pytest.approx(float(ring_time(nbytes, np.array(8.0), bw, 2.0, C)))
    # 4 nodes of 8: the network carries each GPU's 1/8 shard: 2 x 3/4 x 1e9/8 over 50 GB/s
    four = hierarchical_allreduce(nbytes, np.array(32.0), np.array(8.0), bw, np.array(50e9), C)
    inter = 2 * 0.75 * 1e9 / 8 / (50e9 * C.comm_efficiency) + 2 * 3 * C.comm_latency_s
    assert float(four) == pytest.approx(float(one_node) + inter)


def test_ring_attention_hides_behind_attention():
    c = C
    kv, bw = np.array(1e8), np.array(100e9)
    comm = 3 * 1e8 / (100e9 * c.comm_efficiency)
    assert float(ring_attention_exposed(kv, np.array(4.0), np.array(1.0), bw, c)) == pytest.approx(3 * c.comm_latency_s)
    assert float(ring_attention_exposed(kv, np.array(4.0), np.array(0.0), bw, c)) == pytest.approx(
        comm + 3 * c.comm_latency_s)


def test_ulysses_and_ring_both_cost_context_parallel():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "gpus": 8, "cp": 8, "micro_batch": 1, "seq_len": 131072, "examples": 1.0}
    ring = step_time(_arrays(m, make_job(**kw), 131072))
    uly = step_time(_arrays(m, make_job(cp_mode="ulysses", **kw), 131072))
    assert uly["tensor_parallel_s"][0] > 0
    assert ring["tensor_parallel_s"][0] >= 0


def test_interleaving_shrinks_the_bubble():
    m = resolve_model("meta-llama/Llama-3.1-70B")
    kw = {"method": "full", "gpus": 32, "tp": 4, "pp": 8, "micro_batch": 1, "grad_accum": 16, "seq_len": 4096,
          "examples": 1.0, "framework": "megatron"}
    one = step_time(_arrays(m, make_job(**kw), 4096))
    four = step_time(_arrays(m, make_job(vpp=4, **kw), 4096))
    assert four["pipeline_bubble_s"][0] < one["pipeline_bubble_s"][0] / 3.5


# --- memory modes ---------------------------------------------------------------------------------

def test_checkpoint_modes_order_memory_and_recompute():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 2, "seq_len": 4096, "examples": 1.0, "flash_attn": False}
    res = {}
    for mode in ("none", "selective", "full", "offload"):
        a = _arrays(m, make_job(grad_ckpt=mode, **kw), 4096)
        res[mode] = (memory(a)["activations_gib"][0], step_time(a)["recompute_s"][0])
    assert res["none"][0] > res["selective"][0] > res["full"][0] > res["offload"][0]
    assert res["none"][1] == 0 < res["selective"][1] < res["full"][1] == pytest.approx(res["offload"][1])
    # the old boolean: true = full, false = none
    assert make_job(grad_ckpt=True).checkpointing == "full" and make_job(grad_ckpt=False).checkpointing == "none"


def test_checkpoint_every_other_layer_keeps_half_the_layers_whole():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 1, "seq_len": 2048, "examples": 1.0}
    none = memory(_arrays(m, make_job(**kw), 2048))["activations_gib"][0]
    full = memory(_arrays(m, make_job(grad_ckpt="full", **kw), 2048))["activations_gib"][0]
    half = memory(_arrays(m, make_job(grad_ckpt="full", ckpt_every=2, **kw), 2048))["activations_gib"][0]
    assert half == pytest.approx((none + full) / 2, rel=0.05)


def test_activation_offload_keeps_two_layers():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 1, "seq_len": 2048, "examples": 1.0}
    none = memory(_arrays(m, make_job(**kw), 2048))["activations_gib"][0]
    off = memory(_arrays(m, make_job(act_offload=True, **kw), 2048))["activations_gib"][0]
    assert off == pytest.approx(none * OFFLOAD_RESIDENT_LAYERS / m.n_layers)


def test_offloading_a_number_of_layers_frees_theirs():
    # Megatron-Core cpu_offloading_num_layers: N of the L layers' saved activations go to the host, at
    # most L - 1; the host copies of N layers each way per micro-step show in the step when not hidden
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 1, "seq_len": 2048, "examples": 1.0}
    L = m.n_layers
    none = memory(_arrays(m, make_job(**kw), 2048))["activations_gib"][0]
    part = memory(_arrays(m, make_job(act_offload_layers=8, **kw), 2048))["activations_gib"][0]
    most = memory(_arrays(m, make_job(act_offload_layers=500, **kw), 2048))["activations_gib"][0]
    assert part == pytest.approx(none * (L - 8) / L) and most == pytest.approx(none / L)
    a = _arrays(m, make_job(act_offload_layers=8, **kw), 2048)
    assert float(offloaded_bytes(a, 2048.0, 1000.0, 10.0, float(L))[0]) == 2048 * 8 * 1000.0
    assert step_time(a)["step_s"][0] > step_time(_arrays(m, make_job(**kw), 2048))["step_s"][0]
    with pytest.raises(InputError, match="act-offload-layers"):
        make_job(act_offload_layers=-1, **kw)


def test_a_rows_offloaded_layers_cell():
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "full", "seq_len": 2048,
           "micro_batch_size": 1, "gpus": 1, "framework": "megatron"}
    assert row_to_config(row).job.act_offload_layers == 0
    assert row_to_config({**row, "act_offload_layers": "6"}).job.act_offload_layers == 6
    with pytest.raises(InputError, match="act_offload_layers"):
        row_to_config({**row, "act_offload_layers": "two"})


def test_fused_cross_entropy_logits_by_hand():
    tokens, vocab, tp = np.array(4096.0), np.array(128256.0), np.array(1.0)
    full = logits_memory_bytes(tokens, vocab, tp, np.array(0.0), 16.0)
    chunked = logits_memory_bytes(tokens, vocab, tp, np.array(1.0), 16.0)
    fused = logits_memory_bytes(tokens, vocab, tp, np.array(2.0), 16.0)
    assert float(full) == 4096 * 128256 * 16 and float(chunked) == 4096 * 128256 * 4
    assert float(fused) == 4096 * 128256 * 6


def test_optimizer_offload_moves_states_to_the_host():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    kw = {"method": "full", "micro_batch": 1, "seq_len": 1024, "examples": 1.0}
    a = memory(_arrays(m, make_job(offload="optimizer", **kw), 1024))
    assert a["optimizer_gib"][0] == 0 and a["master_weights_gib"][0] == 0 and a["weights_gib"][0] > 0


def test_70b_lora_8k_on_8_h100_with_tensor_parallel_fits():
    m = resolve_model("meta-llama/Llama-3.1-70B")
    kw = {"method": "lora", "gpus": 8, "tp": 8, "micro_batch": 1, "seq_len": 8192, "examples": 1.0}
    assert bool(memory(_arrays(m, make_job(framework="megatron", **kw), 8192))["fits"][0])
    assert bool(memory(_arrays(m, make_job(sequence_parallel=True, grad_ckpt="selective", **kw), 8192))["fits"][0])
    assert bool(memory(_arrays(m, make_job(grad_ckpt=True, **kw), 8192))["fits"][0])


# --- frameworks -----------------------------------------------------------------------------------

def test_every_framework_entry_states_its_sources():
    fws = load_frameworks()
    for name in ("hf-trainer", "trl", "fms-hf-tuning", "axolotl", "llama-factory", "unsloth", "torchtune", "torchtitan", "megatron",
                 "llm-foundry", "deepspeed", "ms-swift", "litgpt", "generic"):
        assert fws[name].sources, name


def test_runs_framework_cells_map_to_entries():
    assert framework_for_text("nemo") == "megatron"
    assert framework_for_text("llama-factory (modified, hf-trainer)") == "llama-factory"
    assert framework_for_text("trl-sft (run_sft.py)") == "trl"
    assert framework_for_text("transformers Trainer + peft") == "hf-trainer"
    assert framework_for_text("something else") == "generic"


def test_framework_effects_come_from_its_kernels():
    m = resolve_model("meta-llama/Llama-3.2-1B")
    kw = {"method": "full", "micro_batch": 8, "seq_len": 2048, "examples": 1.0}
    gen = _arrays(m, make_job(**kw), 2048)
    uns = _arrays(m, make_job(framework="unsloth", **kw), 2048)
    # unsloth: in-kernel cross-entropy (4 of the torch loss's 14 bytes per logit) and fused element-wise kernels
    assert memory(uns)["logits_gib"][0] == pytest.approx(memory(gen)["logits_gib"][0] * 4 / C.logits_bytes_per_element)
    assert step_time(uns)["elementwise_s"][0] < step_time(gen)["elementwise_s"][0]
    assert step_time(uns)["forward_s"][0] == pytest.approx(step_time(gen)["forward_s"][0])


def test_bad_values_are_one_line_errors():
    with pytest.raises(InputError, match="framework"):
        make_job(framework="keras")
    with pytest.raises(InputError, match="grad"):
        make_job(grad_ckpt="sometimes")
    with pytest.raises(InputError, match="vpp"):
        make_job(vpp=2)


def test_gptq_dequantises_in_eager_ops_forward_and_recompute_only():
    m, g = resolve_model("meta-llama/Llama-3.1-8B"), gpu_catalog()["A100-SXM4-80GB"]
    for ckpt, passes in ((False, 1.0), (True, 2.0)):
        a = build_arrays([(m, g, make_job(method="gptq-lora", grad_ckpt=ckpt, micro_batch=1), 2048)])
        assert float(a["dequant_bytes"][0]) == 4.0
        # auto-gptq's unpacking: 16.5 bytes per weight per forward, again when the forward is recomputed
        want = passes * 16.5 * float(a["params_frozen_linear"][0]) / (2039e9 * C.bandwidth_efficiency)
        assert float(step_time(a, C)["dequant_s"][0]) == pytest.approx(want)


def test_gptq_eight_bit_unpacks_through_int16():
    """8-bit GPTQ (Qwen's -Int8 checkpoints) runs the same eager ops with int16 intermediates: read 1,
    write 4; 4 + 2; 2 + 2; 2 + 2; 2 + 2 = 23 bytes per weight per forward (4-bit: 16.5)."""
    from tuneplan.physics.step import gptq_eager_bytes

    assert (gptq_eager_bytes(4), gptq_eager_bytes(8)) == (16.5, 23.0)
    m, g = resolve_model("Qwen/Qwen-7B-Chat-Int8"), gpu_catalog()["A100-SXM4-80GB"]
    assert m.quant == "gptq-int8"
    a = build_arrays([(m, g, make_job(method="gptq-lora", grad_ckpt=False, micro_batch=1), 2048)])
    assert float(a["dequant_bytes"][0]) == 5.0
    want = 23.0 * float(a["params_frozen_linear"][0]) / (2039e9 * C.bandwidth_efficiency)
    assert float(step_time(a, C)["dequant_s"][0]) == pytest.approx(want)
