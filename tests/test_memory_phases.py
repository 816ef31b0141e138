"""Memory phases and allocator settings, checked by hand on a tiny model: the evaluation pass's peak,
the optimizer inside the backward (torchtune optimizer_in_bwd) and expandable allocator segments."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import reference_dir, tiny_llama_config

from tuneplan.errors import InputError
from tuneplan.physics.activations import activation_bytes_per_token_layer
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import EVAL_LOGITS_BYTES_PER_ELEMENT, memory, settle_peaks
from tuneplan.physics.ops import FUSED_CE_CHUNK_TOKENS
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.architectures import model_from_config
from tuneplan.specs.framework import get_framework
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]
G = BYTES_PER_GIB


def tiny():
    return model_from_config(tiny_llama_config(num_hidden_layers=4), "tiny")


def mem(job, seq=128):
    m = tiny()
    a = build_arrays([(m, H100, job, seq)])
    out = memory(a, DEFAULT_CONSTANTS)
    return m, a, {k: float(np.asarray(v)[0]) for k, v in out.items()}


def test_eval_batch_defaults_by_framework():
    assert get_framework("hf-trainer").eval_batch == 8  # TrainingArguments.per_device_eval_batch_size
    assert get_framework("trl").eval_batch == 8
    assert get_framework("ms-swift").eval_batch == 1
    assert make_job(framework="hf-trainer", micro_batch=2).eval_batch() == 8
    assert make_job(framework="hf-trainer", eval_batch_size=3).eval_batch() == 3
    assert make_job(framework="litgpt", micro_batch=2).eval_batch() == 2  # no default stated: the micro-batch


def test_no_evaluation_no_eval_phase():
    _, _, out = mem(make_job(method="lora", micro_batch=1))
    assert out["eval_peak_gib"] == 0.0 and out["eval_pass_gib"] == 0.0


def test_eval_pass_peak_by_hand():
    # forward only at 8 samples: the persistent states, one layer's tensors and 8 x seq x vocab logits at
    # 10 bytes each (16-bit logits, their fp32 copy, log-softmax's fp32 output)
    seq = 128
    m, a, out = mem(make_job(method="lora", micro_batch=1, eval_every=10, eval_examples=80, framework="hf-trainer",
                             flash_attn=True), seq)
    logits = 8 * seq * m.vocab_size * EVAL_LOGITS_BYTES_PER_ELEMENT
    assert EVAL_LOGITS_BYTES_PER_ELEMENT == 2 + 4 + 4
    persistent = (out["weights_gib"] + out["master_weights_gib"] + out["optimizer_gib"] + out["workspace_gib"]) * G
    per = activation_bytes_per_token_layer(a)  # one layer's tensors (what a training layer saves), not n_layers'
    layer = 8 * seq * float(np.maximum(per["dense"], per["moe"])[0])
    assert out["eval_peak_gib"] * G == pytest.approx(persistent + layer + logits)
    # the eval batch's logits (8 x) dwarf the training micro-batch's (1 x 14 bytes): the eval phase is the peak
    assert out["eval_peak_gib"] > out["allocated_gib"] - out["eval_pass_gib"]
    assert out["allocated_gib"] == pytest.approx(out["eval_peak_gib"])
    # at eval batch 1 the training step is the peak: the eval phase adds nothing
    _, _, one = mem(make_job(method="lora", micro_batch=1, eval_every=10, eval_batch_size=1), seq)
    assert one["eval_pass_gib"] == 0.0 and 0 < one["eval_peak_gib"] < one["allocated_gib"]


def test_settle_peaks_takes_the_largest_phase():
    out = {"step_peak_gib": np.array([10.0]), "eval_peak_gib": np.array([25.0]),
           "variable_shape_gib": np.array([3.0]), "capacity_gib": np.array([80.0])}
    settle_peaks(out, np.array([20.0]), DEFAULT_CONSTANTS)
    assert out["allocated_gib"][0] == 25.0
    assert out["optimizer_step_gib"][0] == 0.0 and out["eval_pass_gib"][0] == 5.0
    # reserved: the backward's blocks with fragmentation and the cached other shapes, or the eval phase
    assert out["reserved_gib"][0] == pytest.approx(max(20 * (1 + DEFAULT_CONSTANTS.allocator_overhead) + 3, 25))


def test_optimizer_in_backward_holds_one_gradient():
    job = dict(method="full", precision="bf16", master_weights="none", micro_batch=1, optimizer_impl="foreach")
    m, a, base = mem(make_job(**job), seq=8)  # short: the states, not the activations, make the peak
    _, _, inb = mem(make_job(**job, optimizer_in_bwd=True), seq=8)
    P = m.params_total
    largest = max(m.vocab_size, m.intermediate_size) * m.hidden_size * 2  # the embedding's bf16 gradient
    # beside every activation in the backward: one gradient, not all of them
    assert inb["gradients_gib"] * G == pytest.approx(largest)
    # no step of its own: the step held every gradient (2P) and foreach's temporary (one bf16 moment, 2P)
    assert (base["step_peak_gib"] - inb["step_peak_gib"]) * G == pytest.approx(2 * P + 2 * P)
    assert base["optimizer_step_gib"] > 0 and inb["optimizer_step_gib"] == 0.0
    assert inb["allocated_gib"] < base["allocated_gib"]
    for k in ("weights_gib", "optimizer_gib", "master_weights_gib"):  # the same weights and states
        assert inb[k] == pytest.approx(base[k])


def test_optimizer_in_backward_needs_one_micro_step():
    with pytest.raises(InputError, match="grad-accum 1"):
        make_job(method="full", optimizer_in_bwd=True, grad_accum=4)


def test_expandable_segments_cache_no_other_shapes():
    job = dict(method="lora", micro_batch=2, padding="longest", framework="hf-trainer")
    _, _, cached = mem(make_job(**job))
    _, _, grown = mem(make_job(**job, expandable_segments=True))
    assert cached["variable_shape_gib"] > 0 and grown["variable_shape_gib"] == 0.0
    assert grown["allocated_gib"] == pytest.approx(cached["allocated_gib"])
    assert grown["reserved_gib"] < cached["reserved_gib"]
    assert get_framework("verl").expandable_segments  # verl trains with them (its source in frameworks.yaml)
    assert make_job(framework="verl").expandable_segments is None  # unset: the profile's, said in the assumptions


def test_deepspeed_zero_keeps_fp32_masters_under_an_in_place_framework():
    # ms-swift trains 16-bit weights in place on its own; under DeepSpeed ZeRO the engine's optimizer holds
    # fp32 partitions of the weights (and so fp32 moments): 4 + 8 bytes per parameter over the 4 ranks
    job = dict(method="full", precision="bf16", framework="ms-swift", gpus=4, micro_batch=1)
    assert not make_job(**job, sharding="ddp").fp32_master()
    assert make_job(**job, sharding="zero3").fp32_master()
    assert not make_job(**job, sharding="zero3", master_weights="none").fp32_master()  # as set
    m, _, out = mem(make_job(**job, sharding="zero3"))
    P = m.params_total
    assert out["master_weights_gib"] * G == pytest.approx(4 * P / 4)
    assert out["optimizer_gib"] * G == pytest.approx(8 * P / 4)


def test_a_rows_fused_loss_holds_one_chunk_of_logits():
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "full", "seq_len": 8192,
           "micro_batch_size": 1, "gpus": 1, "framework": "ms-swift"}
    plain, fused = row_to_config(row), row_to_config({**row, "fused_ce": 1})
    assert plain.job.fused_ce is None and fused.job.fused_ce is True
    logits = [memory(build_arrays([(c.model, c.gpu, c.job, c.seq_len)]))["logits_gib"][0] for c in (plain, fused)]
    # one chunk of tokens at 6 bytes per element (physics/ops.py logits_memory_bytes), not 8192 x vocab at 14
    assert logits[1] * G == pytest.approx(min(8192, FUSED_CE_CHUNK_TOKENS) * plain.model.vocab_size * 6.0)
    assert logits[0] * G == pytest.approx(8192 * plain.model.vocab_size * DEFAULT_CONSTANTS.logits_bytes_per_element)


def test_ms_swift_sequence_parallel_loss_over_bf16_logits():
    # ms-swift >= 3.4.1 under sequence parallel: torch's cross-entropy on each rank's bf16 logits shard, no
    # fp32 copy: 6 bytes per (token x vocab) element (physics/ops.py LOGITS_BYTES_PER_ELEMENT[3]) over
    # micro-batch x seq / cp tokens; without sequence parallel, and before 3.4.1 (xtuner's path, the
    # model's fp32 loss), the generic 14
    job = dict(method="lora", micro_batch=2, gpus=4, framework="ms-swift")
    m, _, sp = mem(make_job(**job, cp=4), seq=1024)
    _, _, plain = mem(make_job(**job), seq=1024)
    _, _, old = mem(make_job(**{**job, "framework": "ms-swift@3.4.0"}, cp=4), seq=1024)
    assert sp["logits_gib"] * G == pytest.approx(2 * 1024 / 4 * m.vocab_size * 6.0)
    assert plain["logits_gib"] * G == pytest.approx(2 * 1024 * m.vocab_size * DEFAULT_CONSTANTS.logits_bytes_per_element)
    assert old["logits_gib"] * G == pytest.approx(2 * 1024 / 4 * m.vocab_size * DEFAULT_CONSTANTS.logits_bytes_per_element)


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not present")
def test_ms_swift_examples_liger_rows_read_as_fused_loss():
    from tuneplan.runs import read_runs

    df = read_runs(reference_dir() / "ms-swift-examples.csv").df.set_index("id")
    assert str(df.loc["ms-swift-examples-42", "fused_ce"]) in ("1", "1.0")  # 'use_liger_kernel true' in its notes
    assert "fused_ce" in str(df.loc["ms-swift-examples-42", "defaults_used"])
    assert str(df.loc["ms-swift-examples-43", "fused_ce"]) in ("", "nan", "None")  # 'Not using use_liger_kernel'


def test_rl_stacks_of_the_shared_runs_have_profiles():
    from tuneplan.specs.framework import framework_for_text

    assert framework_for_text("areal") == "areal" and framework_for_text("skyrl") == "skyrl"
    areal, skyrl = get_framework("areal"), get_framework("skyrl-train")
    # both keep fp32 weights (FSDP2 computes in bf16) and reduce fp32 gradients
    assert areal.master_weights == skyrl.master_weights == "fp32" and areal.fp32_grads and skyrl.fp32_grads
    assert (areal.grad_ckpt, areal.optimizer_impl) == (False, "fused")
    assert (skyrl.grad_ckpt, skyrl.micro_batch, skyrl.optimizer_impl) == (True, 1, "foreach")


def test_fp32_gradient_buffers_as_set_or_by_framework():
    # megatron's profile (Megatron-Bridge performance recipes) reduces 16-bit gradients; --fp32-grads (Megatron-LM /
    # Megatron-SWIFT's main_grad in fp32) holds 4 bytes per trained parameter instead of 2
    job = dict(method="full", precision="bf16", framework="megatron", micro_batch=1)
    m, _, bf16 = mem(make_job(**job), seq=8)
    _, _, fp32 = mem(make_job(**job, fp32_grads=True), seq=8)
    P = m.params_total
    assert (fp32["step_peak_gib"] - bf16["step_peak_gib"]) * G == pytest.approx(2 * P)
    assert make_job(**job, fp32_grads=True).fp32_grads is True and make_job(**job).fp32_grads is None


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not present")
def test_megatron_swift_rows_read_with_fp32_gradients():
    from tuneplan.runs import read_runs

    df = read_runs(reference_dir() / "ms-swift-megatron.csv").df.set_index("id")
    assert str(df.loc["ms-swift-megatron-1", "fp32_grads"]) in ("1", "1.0")  # framework megatron: Megatron-SWIFT
    assert str(df.loc["ms-swift-megatron-3", "fp32_grads"]) in ("", "nan", "None")  # DeepSpeed ZeRO-3 under swift sft


def test_a_bad_loss_or_gradient_cell_is_the_rows_problem(tmp_path):
    from tuneplan.runs import read_runs

    head = "id,model,gpu,method,seq_len,micro_batch_size,gpus,tokens_per_s,fused_ce,fp32_grads\n"
    good = "x-1,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,full,512,1,1,1000,true,0\n"
    (tmp_path / "r.csv").write_text(head + good + "x-2,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,full,512,1,1,1000,abc,1\n")
    table = read_runs(tmp_path / "r.csv")
    assert [float(x) for x in table.df["fused_ce"]] == [1.0] and [float(x) for x in table.df["fp32_grads"]] == [0.0]
    assert [p.line for p in table.problems] == [3] and "fused_ce" in table.problems[0].message


def test_runs_sharding_reads_optimizer_and_parameter_offload():
    from tuneplan.learn.dataset import parse_sharding

    # Megatron's optimizer_cpu_offload (ms-swift examples: 'tp8+optim-offload'): master and moments on the host
    assert parse_sharding("tp8+optim-offload") == {"sharding": "ddp", "tp": 8, "offload": "optimizer"}
    assert parse_sharding("fsdp-full+offload") == parse_sharding("fsdp-full+cpu-offload") == {"sharding": "fsdp-offload"}
    job = make_job(method="full", precision="bf16", framework="megatron", gpus=8, tp=8, micro_batch=1,
                   **{k: v for k, v in parse_sharding("tp8+optim-offload").items() if k != "tp"})
    _, _, out = mem(job)
    assert out["master_weights_gib"] == 0.0 and out["optimizer_gib"] == 0.0 and out["weights_gib"] > 0
