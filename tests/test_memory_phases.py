"""Memory phases and allocator settings, checked by hand on a tiny model: the evaluation pass's peak,
the optimizer inside the backward (torchtune optimizer_in_bwd) and expandable allocator segments."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import tiny_llama_config

from tuneplan.errors import InputError
from tuneplan.physics.activations import activation_bytes_per_token_layer
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import EVAL_LOGITS_BYTES_PER_ELEMENT, memory, settle_peaks
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.framework import get_framework
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job
from tuneplan.specs.model_config import model_from_config

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
