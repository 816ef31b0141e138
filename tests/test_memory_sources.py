"""Memory model: what the frameworks behind the reference sources really hold per parameter, checked
by hand on a tiny model (P parameters) and on the ms-swift full fine-tuning rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tests.conftest import reference_dir, tiny_llama_config

from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import memory
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.architectures import model_from_config
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]
G = BYTES_PER_GIB


def tiny():
    return model_from_config(tiny_llama_config(num_hidden_layers=4), "tiny")


def mem(job, c=DEFAULT_CONSTANTS, seq=128):
    m = tiny()
    out = memory(build_arrays([(m, H100, job, seq)]), c)
    return m, {k: float(np.asarray(v)[0]) for k, v in out.items()}


def states(out):
    return {k: out[k] * G for k in ("weights_gib", "gradients_gib", "master_weights_gib", "optimizer_gib")}


def test_pure_bf16_single_gpu_is_8_bytes_per_param():
    # two micro-steps: the gradients accumulate, so all of them are there at the peak (backward_peak_bytes)
    m, out = mem(make_job(method="full", master_weights="auto", precision="bf16", optimizer="adamw", gpus=1,
                          grad_accum=2))
    P = m.params_total
    s = states(out)
    assert s["weights_gib"] == pytest.approx(2 * P)
    assert s["gradients_gib"] == pytest.approx(2 * P)
    assert s["master_weights_gib"] == 0.0
    assert s["optimizer_gib"] == pytest.approx(4 * P)  # two bf16 moments
    assert sum(s.values()) == pytest.approx(8 * P)


def test_amp_master_weights_give_16_bytes_per_param():
    m, out = mem(make_job(method="full", precision="bf16", optimizer="adamw", gpus=1, master_weights="fp32",
                          grad_accum=2))
    P = m.params_total
    s = states(out)
    assert s["master_weights_gib"] == pytest.approx(4 * P)
    assert s["optimizer_gib"] == pytest.approx(8 * P)
    assert sum(s.values()) == pytest.approx(16 * P)


def test_master_weights_auto_by_framework():
    auto = {k: make_job(**{"method": "full", "gpus": 4, "master_weights": "auto", **kw}).fp32_master() for k, kw in {
        "one": {"gpus": 1}, "ddp": {"sharding": "ddp"}, "fsdp": {"sharding": "fsdp"},
        "zero2": {"sharding": "zero2"}, "zero3": {"sharding": "zero3"}, "tp": {"tp": 2},
        "pp": {"pp": 2}, "fp8": {"precision": "fp8"}}.items()}
    assert auto == {"one": False, "ddp": False, "fsdp": False, "zero2": True, "zero3": True, "tp": True,
                    "pp": False, "fp8": True}
    assert make_job(method="full", master_weights="fp32").fp32_master()
    assert make_job(method="full").fp32_master()  # not given: mixed precision over fp32 (issue 20)
    assert not make_job(method="full", framework="torchtune").fp32_master()  # the framework says: in place
    assert not make_job(method="full", sharding="zero2", gpus=2, master_weights="none").fp32_master()


def test_amp_rows_of_runs_files_keep_an_fp32_master():
    from tuneplan.learn.dataset import row_to_config

    base = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "full", "seq_len": 512,
            "micro_batch_size": 1, "gpus": 1}
    assert row_to_config({**base, "precision": "amp-bf16"}).job.fp32_master()
    assert not row_to_config({**base, "precision": "bf16"}).job.fp32_master()


def test_ddp_is_unsharded_pure_bf16_plus_bucket_copy():
    m, out = mem(make_job(method="full", master_weights="auto", gpus=2, sharding="ddp", grad_accum=2))
    P = m.params_total
    s = states(out)
    assert s["gradients_gib"] == pytest.approx(2 * P)
    assert out["gradient_buckets_gib"] * G == pytest.approx(2 * P)  # the DDP bucket copy
    assert s["master_weights_gib"] == 0.0
    assert s["optimizer_gib"] == pytest.approx(4 * P)


@pytest.mark.parametrize("sharding,master,opt", [("zero1", 4 / 4, 8 / 4), ("zero2", 4 / 4, 8 / 4),
                                                 ("zero3", 4 / 4, 8 / 4)])
def test_deepspeed_zero_keeps_fp32_master_shards(sharding, master, opt):
    m, out = mem(make_job(method="full", master_weights="auto", gpus=4, sharding=sharding))
    P = m.params_total
    s = states(out)
    assert s["master_weights_gib"] == pytest.approx(master * P)
    assert s["optimizer_gib"] == pytest.approx(opt * P)


def test_fsdp_bf16_shards_bf16_states():
    m, out = mem(make_job(method="full", master_weights="auto", gpus=4, sharding="fsdp"))
    P = m.params_total
    s = states(out)
    assert s["weights_gib"] == pytest.approx(2 * P / 4)
    assert s["gradients_gib"] == pytest.approx(2 * P / 4)
    assert s["master_weights_gib"] == 0.0
    assert s["optimizer_gib"] == pytest.approx(4 * P / 4)


def test_8bit_optimizer_states_unchanged_by_pure_bf16():
    m, out = mem(make_job(method="full", master_weights="auto", optimizer="adamw-8bit", gpus=1))
    assert out["optimizer_gib"] * G == pytest.approx(2 * m.params_total)
    m, out = mem(make_job(method="full", master_weights="auto", optimizer="sgd-momentum", gpus=1))
    assert out["optimizer_gib"] * G == pytest.approx(2 * m.params_total)  # one bf16 buffer


def test_fp32_training_has_no_master_and_fp32_moments():
    m, out = mem(make_job(method="full", master_weights="auto", precision="fp32", gpus=1))
    P = m.params_total
    s = states(out)
    assert s["weights_gib"] == pytest.approx(4 * P)
    assert s["master_weights_gib"] == 0.0
    assert s["optimizer_gib"] == pytest.approx(8 * P)


def test_lora_states_unaffected():
    from tuneplan.physics.terms import model_terms

    job = make_job(method="lora", gpus=1)
    m, out = mem(job)
    t = model_terms(m, job).params_trainable
    assert out["master_weights_gib"] == 0.0
    assert out["optimizer_gib"] * G == pytest.approx(8 * t)  # fp32 adapters, fp32 moments


def test_logits_bytes_per_element_prior():
    m, out = mem(make_job(method="lora", micro_batch=3, gpus=1), seq=50)
    # at the loss's peak: the fp32 upcast 4, its shifted copy 4 (transformers < 4.46), log-softmax's fp32
    # output 4, and in the backward their fp32 gradients (12-16; the bf16 logits are freed): 14 bytes
    assert DEFAULT_CONSTANTS.logits_bytes_per_element == 14.0
    assert out["logits_gib"] * G == pytest.approx(3 * 50 * 100 * 14.0)


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not present")
def test_ms_swift_qwen7b_full_single_a100_fits_as_measured():
    """ms-swift Jan-2024: Qwen-7B full fine-tuning on one A100-80GB, 73-79 GiB reserved (it ran);
    with fp32 masters (16 bytes/param, 115 GiB) it could not have."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.measured import training_set
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs
    from tuneplan.runs.io import read_runs

    df = read_runs(reference_dir() / "ms-swift.csv").df
    df = df[df["id"].isin(["ms-swift-68", "ms-swift-69", "ms-swift-70", "ms-swift-71"])]
    ts = training_set(df)
    assert len(ts) == 4
    p = predict_configs(ts.configs, get_estimator("tuneplan", "none"), with_max_batch=False)
    pred = memory_for_kind(p, ts.mem_kind)
    assert ts.mem_kind == ["reserved"] * 4
    assert bool(np.all(p["fits"]))
    P = 7.72e9
    assert all(x > 8 * P / G for x in pred)  # at least the 8 bytes/param states
    for x, y in zip(pred, ts.peak_mem_gib, strict=True):
        assert abs(math.log(x / y)) < math.log(1.15)


def test_nf4_linears_keep_their_fp32_cast_inputs():
    # tiny: hidden 64, q 64, intermediate 128, 4 layers; seq 128, micro-batch 4 (the default)
    # against LoRA with adapters in the compute dtype: NF4 layers' cast is counted by nf4_input_bytes
    _, lora = mem(make_job(method="lora", gpus=1, adapter_dtype="compute"))
    _, qlora = mem(make_job(method="qlora", gpus=1))
    extra = 4 * 128 * 4 * DEFAULT_CONSTANTS.nf4_input_bytes * (2 * 64 + 64 + 128)
    assert (qlora["activations_gib"] - lora["activations_gib"]) * G == pytest.approx(extra)
    _, gptq = mem(make_job(method="gptq-lora", gpus=1, adapter_dtype="compute"))
    assert gptq["activations_gib"] == pytest.approx(lora["activations_gib"])  # GPTQ kernels take 16-bit inputs
