"""Hand-checkable tests of the eager-PyTorch terms (issue 15, second round): the RMSNorm / RoPE op chains
of frameworks that run a model's transformers code unfused, peft's fp32 adapter traffic, and the GEMM
ceiling at the GPU's measured matmul efficiency."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.physics.constants import DEFAULT_CONSTANTS as C
from tuneplan.physics.ops import (
    EAGER_FORWARD_SHARE,
    EAGER_RMSNORM_BYTES,
    EAGER_ROPE_BYTES,
    FP32_ADAPTER_IN_BYTES,
    FP32_ADAPTER_OUT_BYTES,
    eager_norm_rope_bytes,
    fp32_adapter_bytes,
    gemm_efficiency,
)
from tuneplan.physics.step import eager_norm_rope_seconds, fp32_adapter_seconds, step_time
from tuneplan.physics.terms import REFERENCE_MATMUL_EFFICIENCY, build_arrays
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.framework import get_framework, load_frameworks
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]


def test_eager_rmsnorm_and_rope_bytes_by_hand():
    # the op chains counted from transformers' LlamaRMSNorm and apply_rotary_pos_emb
    assert EAGER_RMSNORM_BYTES == 36.0 + 64.0  # forward 2+4, 4+4, 4, 4+4, 4+2, 2+2; backward ~64
    assert EAGER_ROPE_BYTES == 20.0 + 24.0
    # Llama-7B layer: two norms over h = 4,096, RoPE over q (4,096) and k (4,096)
    b = eager_norm_rope_bytes(4096.0, 4096.0, 4096.0, 1.0)
    assert b == pytest.approx(2 * 100 * 4096 + 44 * 8192)
    assert b == pytest.approx(1.179648e6)
    # a layer without attention (Mamba) keeps its norms, loses RoPE
    assert eager_norm_rope_bytes(4096.0, 4096.0, 4096.0, 0.0) == pytest.approx(2 * 100 * 4096)


def test_eager_norm_rope_seconds_follow_the_framework_flag():
    model = resolve_model("meta-llama/Llama-2-7b-hf")
    seq, mb = 2048, 1
    hf = build_arrays([(model, H100, make_job(method="full", micro_batch=mb, framework="hf-trainer"), seq)])
    mg = build_arrays([(model, H100, make_job(method="full", micro_batch=mb, framework="megatron"), seq)])
    bw = hf["mem_bw"] * C.bandwidth_efficiency
    zero = np.zeros(1)
    t = eager_norm_rope_seconds(hf, np.array([mb * seq]), bw, zero)
    # 2,048 tokens x 1.18 MB x 32 layers over 3.35 TB/s x 0.80 = 28.8 ms
    want = 2048 * 1.179648e6 * 32 / (H100.memory_bandwidth_gbs * 1e9 * 0.80)
    assert float(t[0]) == pytest.approx(want)
    assert float(t[0]) == pytest.approx(0.0288, rel=0.01)
    # recomputing every layer runs the forward share again
    t_rec = eager_norm_rope_seconds(hf, np.array([mb * seq]), bw, np.ones(1))
    assert float(t_rec[0]) == pytest.approx(want * (1 + EAGER_FORWARD_SHARE))
    # Megatron fuses its norms and RoPE (Transformer Engine): no such term
    assert float(eager_norm_rope_seconds(mg, np.array([mb * seq]), bw, zero)[0]) == 0.0
    # and the step's element-wise part differs by exactly this term plus the other fused-kernel terms
    assert step_time(hf)["elementwise_s"][0] > step_time(mg)["elementwise_s"][0] + want


def test_frameworks_say_which_run_norms_and_rope_eagerly():
    fw = load_frameworks()
    assert fw["hf-trainer"].eager_norm_rope and fw["litgpt"].eager_norm_rope and fw["ms-swift"].eager_norm_rope
    assert not fw["unsloth"].eager_norm_rope and not fw["megatron"].eager_norm_rope
    assert not fw["llm-foundry"].eager_norm_rope  # MPT: torch's fused LayerNorm, ALiBi, no RoPE
    for name, spec in fw.items():
        assert "eager_norm_rope" in spec.sources, name
    assert get_framework("generic").eager_norm_rope  # a Hugging Face model's own code


def test_fp32_adapter_bytes_by_hand():
    assert FP32_ADAPTER_IN_BYTES == 30.0 - 12.0 and FP32_ADAPTER_OUT_BYTES == 50.0 - 20.0
    # one q_proj of Llama-8B: 4,096 in, 4,096 out
    assert float(fp32_adapter_bytes(np.array(4096.0), np.array(8192.0), np.array(1.0))) == pytest.approx(
        18 * 4096 + 30 * 4096)
    assert float(fp32_adapter_bytes(np.array(4096.0), np.array(8192.0), np.array(1.0))) == pytest.approx(196608)
    assert float(fp32_adapter_bytes(np.array(4096.0), np.array(8192.0), np.array(0.0))) == 0.0


def test_fp32_adapter_seconds_only_for_unfused_16_bit_models():
    model = resolve_model("meta-llama/Llama-2-7b-hf")
    job = make_job(method="lora", lora_rank=8, lora_targets="q_proj,v_proj", framework="hf-trainer")
    a = build_arrays([(model, H100, job, 1024)])
    assert a["adapter_fp32"][0] == 1.0  # peft's default (frameworks.yaml hf-trainer adapter_fp32)
    bw = a["mem_bw"] * C.bandwidth_efficiency
    tok = np.array([1024.0])
    t = fp32_adapter_seconds(a, tok, bw, np.ones(1), np.zeros(1, dtype=bool))
    # q and v on 32 layers: inputs 2 x 4,096, outputs 2 x 4,096 per layer
    per = 32 * (18 * 2 * 4096 + 30 * 2 * 4096)
    assert float(t[0]) == pytest.approx(1024 * per / (H100.memory_bandwidth_gbs * 1e9 * 0.80))
    assert float(fp32_adapter_seconds(a, tok, bw, np.ones(1), np.ones(1, dtype=bool))[0]) == 0.0  # fused
    a32 = dict(a, weight_bytes_compute=np.array([4.0]))
    assert float(fp32_adapter_seconds(a32, tok, bw, np.ones(1), np.zeros(1, dtype=bool))[0]) == 0.0


def test_gemm_ceiling_is_the_reference_matmul_efficiency():
    assert C.mfu_max == REFERENCE_MATMUL_EFFICIENCY == 0.80
    # a huge GEMM approaches the ceiling; the curve's shape terms are unchanged
    e = float(gemm_efficiency(np.array(1e9), np.array(1e9), C))
    assert e == pytest.approx(0.80, rel=1e-5)
    e = float(gemm_efficiency(np.array(512.0), np.array(1024.0), C))
    assert e == pytest.approx(0.80 * 0.5 * 0.5)


# --- memory terms of the second round ---------------------------------------------------------------

def test_dora_saved_outputs_by_hand():
    from tuneplan.physics.ops import DORA_SAVED_BASE_BYTES, dora_saved_bytes_per_layer

    # Llama-8B, all linears adapted: outputs per layer q 4,096 + k 1,024 + v 1,024 + o 4,096 + gate/up
    # 2 x 14,336 + down 4,096 = 43,008; inputs are the rest of io
    outs, ins, layers = 43008.0 * 32, 38912.0 * 32, 32.0
    b = dora_saved_bytes_per_layer(np.array(outs + ins), np.array(ins), np.array(layers), np.array(4.0),
                                   np.array(True))
    assert DORA_SAVED_BASE_BYTES == 2.0
    assert float(b) == pytest.approx(43008 * (2 + 4))
    assert float(dora_saved_bytes_per_layer(np.array(outs + ins), np.array(ins), np.array(layers), np.array(4.0),
                                            np.array(False))) == 0.0


def test_dora_run_holds_more_than_lora_by_the_saved_outputs():
    from tuneplan.physics.memory import memory

    model = resolve_model("meta-llama/Llama-3.1-8B")
    mk = {"lora_rank": 16, "lora_targets": "all-linear", "micro_batch": 1, "framework": "hf-trainer"}
    lora = build_arrays([(model, H100, make_job(method="lora", **mk), 2048)])
    dora = build_arrays([(model, H100, make_job(method="dora", **mk), 2048)])
    extra = memory(dora)["activations_gib"][0] - memory(lora)["activations_gib"][0]
    # 2,048 tokens x 32 layers x 43,008 x 6 bytes = 15.75 GiB (plus DoRA's magnitude vectors elsewhere)
    assert extra == pytest.approx(2048 * 32 * 43008 * 6 / 1024**3, rel=0.01)


def test_usable_memory_less_inline_ecc_on_gddr_parts():
    from tuneplan.physics.terms import ECC_RESERVED_FRACTION, usable_memory_gib

    cat = gpu_catalog()
    assert ECC_RESERVED_FRACTION == 1 / 16
    assert usable_memory_gib(cat["T4-16GB"]) == pytest.approx(15.0)  # nvidia-smi: 15,360 MiB
    assert usable_memory_gib(cat["A10G-24GB"]) == pytest.approx(22.5)  # nvidia-smi: 23,028 MiB
    assert usable_memory_gib(cat["A100-SXM4-80GB"]) == 80.0  # HBM: ECC out of band
    assert usable_memory_gib(H100) == H100.memory_gib
    a = build_arrays([(resolve_model("meta-llama/Llama-3.2-1B"), cat["T4-16GB"], make_job(method="lora"), 512)])
    assert a["memory_bytes"][0] == pytest.approx(15.0 * 1024**3)


def test_gradients_and_activations_peak_by_hand():
    from tuneplan.physics.activations import backward_peak_bytes

    g, act, lg = np.array([10.0, 10.0, 10.0, 10.0]), np.array([30.0] * 4), np.array([5.0] * 4)
    a = {"grad_accum": np.array([1.0, 4.0, 1.0, 1.0]), "grad_buffers": np.array([0.0, 0.0, 1.0, 0.0]),
         "sharding": np.array([0.0, 0.0, 0.0, 3.0])}
    # set_to_none, one micro-step, unsharded: max(35, 10); accumulated, buffered or FSDP: the sum
    assert backward_peak_bytes(g, act, lg, a).tolist() == [35.0, 45.0, 45.0, 45.0]
    assert backward_peak_bytes(np.array([50.0]), np.array([30.0]), np.array([5.0]),
                               {k: v[:1] for k, v in a.items()}).tolist() == [50.0]
    fw = load_frameworks()
    assert fw["megatron"].grad_buffers and fw["deepspeed"].grad_buffers and not fw["hf-trainer"].grad_buffers


def test_frozen_down_projection_keeps_no_input():
    from tuneplan.physics.activations import frozen_product_saving

    model = resolve_model("meta-llama/Llama-3.1-8B")
    lora = build_arrays([(model, H100, make_job(method="lora", framework="hf-trainer"), 1024)])
    full = build_arrays([(model, H100, make_job(method="full", framework="hf-trainer"), 1024)])
    assert float(frozen_product_saving(lora, 2.0)["dense"][0]) == 14336 * 2  # I elements x 2 bytes
    assert float(frozen_product_saving(full, 2.0)["dense"][0]) == 0.0
    q = build_arrays([(model, H100, make_job(method="qlora", framework="hf-trainer"), 1024)])
    assert float(frozen_product_saving(q, 2.0)["dense"][0]) == 0.0  # bitsandbytes saves its own input


def test_loss_buffers_count():
    # bf16 logits freed after the upcast; the fp32 copy (4), its shifted copy (4, transformers < 4.46) and
    # the log-softmax output (4) at the forward's loss, 12-16 in its backward: 14 bytes per logit
    assert C.logits_bytes_per_element == 14.0
