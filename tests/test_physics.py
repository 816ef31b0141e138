"""Physics by hand-checkable small cases: FLOPs, bytes, memory terms, sharding divisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import tiny_llama_config

from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import max_micro_batch, memory
from tuneplan.physics.step import model_flops_per_step, step_time
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.architectures import model_from_config
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]


def tiny(**over):
    return model_from_config(tiny_llama_config(**over), "tiny")


def arrays(model, job, seq=128, gpu=H100):
    return build_arrays([(model, gpu, job, seq)])


def test_forward_flops_by_hand():
    m = tiny()
    # per layer: q 64x64, k 64x32, v 64x32, o 64x64, gate/up 64x128, down 128x64
    per_layer = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 128
    t = model_terms(m, make_job(method="full"))
    assert t.fwd_block_flops == 2 * per_layer * 2
    assert t.head_flops == 2 * 64 * 100
    assert t.attn_flops_per_seq == 4 * 64 * 2  # QK^T and AV: 2 x 2 x q_dim per token per layer
    assert t.params_trainable == m.params_total


def test_backward_by_method():
    m = tiny()
    full = model_terms(m, make_job(method="full"))
    lora = model_terms(m, make_job(method="lora", lora_rank=4))
    assert full.bwd_block_factor == 2.0 and lora.bwd_block_factor == 1.0  # 6 -> ~4 FLOPs/param/token
    # adapters on all 7 linears: r (in + out) each
    expect = 4 * ((64 + 64) + (64 + 32) * 2 + (64 + 64) + (64 + 128) * 2 + (128 + 64)) * 2
    assert lora.params_trainable == expect
    assert lora.adapter_flops == 2 * expect


def test_adapter_element_wise_and_launch_terms_by_hand():
    m = tiny()  # 2 layers; 7 linears per layer
    lora = model_terms(m, make_job(method="lora", lora_rank=4))
    assert lora.adapted_modules == 7 * 2
    io = (64 + 64) + (64 + 32) * 2 + (64 + 64) + (64 + 128) * 2 + (128 + 64)
    assert lora.adapter_io_elements == io * 2
    qv = model_terms(m, make_job(method="lora", lora_rank=4, lora_targets="q_proj,v_proj"))
    assert qv.adapted_modules == 2 * 2 and qv.adapter_io_elements == ((64 + 64) + (64 + 32)) * 2
    full = model_terms(m, make_job(method="full"))
    assert full.adapted_modules == 0 and full.adapter_io_elements == 0

    c = DEFAULT_CONSTANTS
    mb, seq = 2, 128
    t = {meth: step_time(arrays(m, make_job(method=meth, lora_rank=4, micro_batch=mb), seq=seq))
         for meth in ("lora", "dora")}
    bw = H100.memory_bandwidth_gbs * 1e9 * c.bandwidth_efficiency
    # LoRA: the per-layer overhead plus 14 modules x 16 kernels x the launch time
    assert t["lora"]["overhead_s"][0] == pytest.approx(c.overhead_s_per_layer * 2 + 14 * 16 * c.kernel_launch_s)
    # DoRA: 56 kernels per module, and its weight-norm traffic, but the same per-token element-wise work
    assert t["dora"]["overhead_s"][0] - t["lora"]["overhead_s"][0] == pytest.approx(14 * 40 * c.kernel_launch_s)
    assert t["lora"]["dequant_s"][0] == 0.0
    assert t["dora"]["dequant_s"][0] == pytest.approx(2 * c.dora_bytes_per_weight * lora.params_adapted / bw)
    assert t["dora"]["elementwise_s"][0] == pytest.approx(t["lora"]["elementwise_s"][0])
    # the adapter's element-wise share: passes x tokens x (in + out) elements x 2 bytes / bandwidth
    no_adapter = step_time(arrays(m, make_job(method="lora", lora_rank=4, micro_batch=mb), seq=seq),
                           c.with_(adapter_passes=0.0))
    assert t["lora"]["elementwise_s"][0] - no_adapter["elementwise_s"][0] == pytest.approx(
        c.adapter_passes * mb * seq * io * 2 * 2 / bw)


def test_lora_targets_subset_and_errors():
    from tuneplan.errors import InputError

    m = tiny()
    qv = model_terms(m, make_job(method="lora", lora_rank=4, lora_targets="q_proj,v_proj"))
    assert qv.params_trainable == 4 * ((64 + 64) + (64 + 32)) * 2
    with pytest.raises(InputError, match="lora-rank"):
        model_terms(m, make_job(method="lora", lora_rank=65))
    with pytest.raises(InputError, match="lora-targets"):
        model_terms(m, make_job(method="lora", lora_targets="nonexistent"))


def test_recompute_adds_a_forward():
    m = tiny()
    a0 = arrays(m, make_job(method="full", micro_batch=2))
    a1 = arrays(m, make_job(method="full", micro_batch=2, grad_ckpt=True))
    t0, t1 = step_time(a0), step_time(a1)
    assert t0["recompute_s"][0] == 0
    # recompute = forward without the LM head
    assert 0 < t1["recompute_s"][0] < t1["forward_s"][0]


def test_quadratic_attention_term_grows_with_seq():
    m = tiny()
    job = make_job(method="full", micro_batch=1)
    f1 = model_flops_per_step(arrays(m, job, seq=1024))[0] / 1024
    f2 = model_flops_per_step(arrays(m, job, seq=4096))[0] / 4096
    assert f2 > f1  # per-token FLOPs grow with sequence length


def test_weights_memory_by_storage():
    m = tiny(num_hidden_layers=4)
    # two micro-steps: the accumulated gradients are all there at the peak (activations.backward_peak_bytes)
    full = memory(arrays(m, make_job(method="full", precision="bf16", optimizer="adamw", master_weights="auto",
                                     grad_accum=2)))
    P = m.params_total
    g = BYTES_PER_GIB
    assert full["weights_gib"][0] * g == pytest.approx(2 * P)
    assert full["gradients_gib"][0] * g == pytest.approx(2 * P)
    # `auto`, unsharded bf16: weights trained in bf16, no master copy, bf16 AdamW moments (8 bytes/param)
    assert full["master_weights_gib"][0] * g == pytest.approx(0.0)
    assert full["optimizer_gib"][0] * g == pytest.approx(4 * P)
    # not given (issue 20): mixed precision over an fp32 master copy, fp32 moments (16 bytes/param)
    mixed = memory(arrays(m, make_job(method="full", precision="bf16", optimizer="adamw")))
    assert mixed["master_weights_gib"][0] * g == pytest.approx(4 * P)
    assert mixed["optimizer_gib"][0] * g == pytest.approx(8 * P)
    q = memory(arrays(m, make_job(method="qlora")))
    lin = sum(lin.params for lin in m.linears)
    assert q["weights_gib"][0] * g == pytest.approx(lin * (0.5 + 0.127 / 8) + (P - lin) * 2
                                                    + 4 * model_terms(m, make_job(method="qlora")).params_trainable)


@pytest.mark.parametrize("sharding,w,gr,o", [("ddp", 1, 1, 1), ("zero1", 1, 1, 4), ("zero2", 1, 4, 4),
                                             ("zero3", 4, 4, 4), ("fsdp", 4, 4, 4)])
def test_sharding_divisions(sharding, w, gr, o):
    m = tiny()
    # the same fp32 master and moments on both sides
    # two micro-steps: accumulated gradients are all there at the peak (activations.backward_peak_bytes)
    one = memory(arrays(m, make_job(method="full", gpus=1, master_weights="fp32", grad_accum=2)))
    # FSDP's own reduction under accumulation (the HF Trainer's no_sync holds them whole: test_fsdp_gradients.py)
    four = memory(arrays(m, make_job(method="full", gpus=4, sharding=sharding, master_weights="fp32", grad_accum=2,
                                     grad_accum_sync="every-micro-batch")))
    assert four["weights_gib"][0] == pytest.approx(one["weights_gib"][0] / w)
    assert four["optimizer_gib"][0] == pytest.approx(one["optimizer_gib"][0] / o)
    grads4 = four["gradients_gib"][0]
    if sharding == "ddp":  # DDP keeps a bucket copy of the gradients, named apart in the breakdown
        assert grads4 == pytest.approx(one["gradients_gib"][0])
        assert four["gradient_buckets_gib"][0] == pytest.approx(one["gradients_gib"][0])
        assert one["gradient_buckets_gib"][0] == 0.0
    else:
        assert grads4 == pytest.approx(one["gradients_gib"][0] / gr)


def test_tensor_parallel_divides_weights_and_activations():
    m = tiny()
    one = memory(arrays(m, make_job(method="full", gpus=2, sharding="none")))
    tp2 = memory(arrays(m, make_job(method="full", gpus=2, tp=2, sequence_parallel=True)))
    assert tp2["weights_gib"][0] == pytest.approx(one["weights_gib"][0] / 2)
    # with sequence parallel every saved activation is split over the tensor-parallel ranks
    assert tp2["activations_gib"][0] == pytest.approx(one["activations_gib"][0] / 2)
    # without it the norms' inputs and outputs (4h per token per layer) stay whole on each rank
    no_sp = memory(arrays(m, make_job(method="full", gpus=2, tp=2, sequence_parallel=False)))
    tokens = 4 * 128  # tiny()'s default micro-batch x the test's seq_len
    extra = 4 * m.hidden_size * 2 / 2 * m.n_layers * tokens / 1024**3  # 4h bf16 elements, half of them kept
    assert no_sp["activations_gib"][0] == pytest.approx(tp2["activations_gib"][0] + extra, rel=1e-6)


def test_checkpointing_keeps_layer_inputs_plus_one_layer():
    m = tiny(num_hidden_layers=8)
    job = make_job(method="full", micro_batch=4)
    a_off = arrays(m, job, seq=256)
    a_on = arrays(m, make_job(method="full", micro_batch=4, grad_ckpt=True), seq=256)
    off, on = memory(a_off)["activations_gib"][0], memory(a_on)["activations_gib"][0]
    per_layer = off / 8
    layer_inputs = 4 * 256 * 64 * 2 * 8 / BYTES_PER_GIB
    assert on == pytest.approx(layer_inputs + per_layer)


def test_eager_attention_stores_scores():
    m = tiny()
    fa = memory(arrays(m, make_job(method="full", micro_batch=1, flash_attn=True), seq=1024))
    eager = memory(arrays(m, make_job(method="full", micro_batch=1, flash_attn=False), seq=1024))
    # 4 heads x S x S x 2 bytes per layer, 2 layers
    extra = (eager["activations_gib"][0] - fa["activations_gib"][0]) * BYTES_PER_GIB
    assert extra == pytest.approx(2 * 4 * 1024 * 1024 * 2, rel=0.01)


def test_logits_fp32_copy():
    m = tiny()
    mem = memory(arrays(m, make_job(method="full", micro_batch=3), seq=50))
    assert mem["logits_gib"][0] * BYTES_PER_GIB == pytest.approx(
        3 * 50 * 100 * DEFAULT_CONSTANTS.logits_bytes_per_element)


def test_max_micro_batch_is_the_largest_that_fits():
    from tuneplan.specs.catalog import resolve_model

    m = resolve_model("meta-llama/Llama-3.1-8B")
    a = arrays(m, make_job(method="lora", micro_batch=1), seq=2048)
    mb = int(max_micro_batch(a)[0])
    assert mb >= 1
    for b, ok in ((mb, True), (mb + 1, False)):
        t = dict(a)
        t["micro_batch"] = np.array([float(b)])
        assert bool(memory(t)["fits"][0]) is ok


@settings(max_examples=40, deadline=None)
@given(mb=st.integers(1, 64), seq=st.integers(16, 4096), layers=st.integers(1, 8))
def test_memory_and_time_monotone_in_batch(mb, seq, layers):
    m = tiny(num_hidden_layers=layers)
    a1 = arrays(m, make_job(method="full", micro_batch=mb), seq=seq)
    a2 = arrays(m, make_job(method="full", micro_batch=mb + 1), seq=seq)
    # never less memory for a larger batch; strictly more once the activations, not the gradients written
    # as they are freed (activations.backward_peak_bytes), make the peak
    m1, m2 = memory(a1), memory(a2)
    assert m2["allocated_gib"][0] >= m1["allocated_gib"][0]
    assert m2["activations_gib"][0] > m1["activations_gib"][0]
    assert step_time(a2)["step_s"][0] > step_time(a1)["step_s"][0]


def test_vectorised_equals_scalar():
    m = tiny()
    jobs = [make_job(method=me, micro_batch=b) for me in ("full", "lora") for b in (1, 2, 8)]
    many = build_arrays([(m, H100, j, 128) for j in jobs])
    out = step_time(many)["step_s"]
    for i, j in enumerate(jobs):
        assert out[i] == pytest.approx(step_time(arrays(m, j))["step_s"][0])
