"""LoRA adapters in fp32 over 16-bit weights (peft >= 0.12's autocast_adapter_dtype): every adapted module
casts its input to fp32 for lora_A and keeps that copy for backward. Measured on an H200 (reference/):
Llama-3.1-8B LoRA at 4 x 2048 tokens peaks at 99.4 GiB allocated, full fine-tuning of the same batch
at 106 GiB with 48 GiB more of weights, gradients and AdamW states."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import reference_dir

from tuneplan.errors import InputError
from tuneplan.physics.constants import DEFAULT_CONSTANTS
from tuneplan.physics.memory import memory
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H200 = gpu_catalog()["H200-SXM-141GB"]
LLAMA8 = resolve_model("meta-llama/Llama-3.1-8B")
GIB = 1024.0**3


def acts(**job) -> float:
    out = memory(build_arrays([(LLAMA8, H200, make_job(gpus=1, micro_batch=4, **job), 2048)]), DEFAULT_CONSTANTS)
    return float(np.asarray(out["activations_gib"])[0])


def test_fp32_adapters_keep_an_fp32_copy_of_every_adapted_input():
    # all-linear on Llama-3.1-8B: q, k, v, o, gate, up take 4096 wide inputs, down 14336; 32 layers
    by_hand = 4.0 * (6 * 4096 + 14336) * 4 * 2048 * 32 * DEFAULT_CONSTANTS.activation_scale / GIB
    assert by_hand == pytest.approx(38.0, abs=0.1)
    diff = acts(method="lora", precision="bf16") - acts(method="lora", precision="bf16", adapter_dtype="compute")
    # a 16-bit lora_A on down keeps the MLP product (act(gate) x up) the frozen down does not: 2 bytes x
    # 14,336 per token per layer that the fp32 adapters' own copy replaces (activations.frozen_product_saving)
    product = 2.0 * 14336 * 4 * 2048 * 32 * DEFAULT_CONSTANTS.activation_scale / GIB
    assert diff == pytest.approx(by_hand - product)
    assert diff == pytest.approx(31.0, abs=0.1)
    # only the adapted modules' inputs: q and v alone take two 4096-wide inputs
    qv = acts(method="lora", precision="bf16", lora_targets=("q", "v")) - acts(
        method="lora", precision="bf16", lora_targets=("q", "v"), adapter_dtype="compute")
    assert qv == pytest.approx(4.0 * 2 * 4096 * 4 * 2048 * 32 * DEFAULT_CONSTANTS.activation_scale / GIB)


@pytest.mark.parametrize("job", [
    {"method": "full", "precision": "bf16"},  # no adapters
    {"method": "lora", "precision": "fp32"},  # fp32 weights: the inputs already are fp32
    {"method": "qlora", "precision": "bf16"},  # NF4 layers keep their own fp32 input copy (nf4_input_bytes)
])
def test_no_copy_where_nothing_is_cast(job):
    assert acts(**job) == pytest.approx(acts(**job, adapter_dtype="compute"))


def test_checkpointing_keeps_only_one_layer_of_copies():
    with_ckpt = acts(method="lora", precision="bf16", grad_ckpt=True) - acts(
        method="lora", precision="bf16", grad_ckpt=True, adapter_dtype="compute")
    assert 0 < with_ckpt < 2.0  # one layer recomputed at a time: 38 GiB / 32 layers


def test_bad_adapter_dtype_is_a_named_error(capsys):
    from tuneplan.cli import main
    from tuneplan.learn.dataset import row_to_config

    with pytest.raises(InputError) as exc:
        make_job(method="lora", adapter_dtype="fp16")
    assert "adapter-dtype" in str(exc.value) and "compute" in str(exc.value)
    row = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": 512,
           "micro_batch_size": 1, "gpus": 1}
    assert row_to_config(row).job.adapter_dtype == "fp32"
    assert row_to_config({**row, "adapter_dtype": "compute"}).job.adapter_dtype == "compute"
    with pytest.raises(InputError, match="adapter_dtype"):
        row_to_config({**row, "adapter_dtype": "fp8"})
    args = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--gpu", "H200-SXM-141GB",
            "--examples", "100", "--seq-len", "2048", "--micro-batch", "4", "--precision", "bf16", "--json",
            "--calibration", "none"]
    assert main(args) == 0
    fp32 = json.loads(capsys.readouterr().out)
    assert main(args + ["--adapter-dtype", "compute"]) == 0
    compute = json.loads(capsys.readouterr().out)
    assert fp32["memory_breakdown_gib"]["activations"] - compute["memory_breakdown_gib"]["activations"] == \
        pytest.approx(31.0, abs=0.1)  # 38 GiB of fp32 copies less the 16-bit product a 16-bit lora_A keeps
    assert any("fp32 copy" in a for a in fp32["assumptions"])
    with pytest.raises(SystemExit) as exit_:
        main(args + ["--adapter-dtype", "fp16"])
    assert exit_.value.code == 2
    assert "compute" in capsys.readouterr().err


def test_profiler_records_its_peft_adapter_dtype(monkeypatch):
    peft = pytest.importorskip("peft")
    from tuneplan.profile.runner import adapter_dtype

    monkeypatch.setattr(peft, "__version__", "0.11.1")
    assert adapter_dtype() == "compute"
    monkeypatch.setattr(peft, "__version__", "0.12.0")
    assert adapter_dtype() == "fp32"


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not beside the checkout")
def test_sources_before_peft_012_keep_adapters_in_the_compute_dtype():
    from tuneplan.runs.io import read_runs

    for name in ("litgpt", "ms-swift", "ms-swift-2023v1", "vectorlm", "peft"):
        df = read_runs(reference_dir() / f"{name}.csv").df
        assert df["adapter_dtype"].eq("compute").all(), name
        assert df["defaults_used"].str.contains("adapter_dtype=compute").all(), name


def test_plan_and_web_take_the_adapter_dtype(capsys):
    from fastapi.testclient import TestClient

    from tuneplan.cli import main
    from tuneplan.web.app import create_app

    args = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--methods", "lora", "--gpus", "H100-SXM5-80GB",
            "--gpu-counts", "1", "--micro-batches", "4", "--examples", "30000", "--tokens-per-example", "1000",
            "--json", "--calibration", "none"]
    mem = {}
    for d in ("fp32", "compute"):
        assert main(args + ["--adapter-dtype", d]) == 0
        mem[d] = json.loads(capsys.readouterr().out)["recommended"]["memory_per_gpu_gib"]
    assert mem["fp32"] - mem["compute"] > 15  # 4 x 1000 tokens of fp32 copies: ~18.6 GiB before overheads
    client = TestClient(create_app(warm_up=False))
    assert client.get("/api/options").json()["adapter_dtypes"] == ["fp32", "compute"]
    body = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM5-80GB", "method": "lora", "examples": 1000,
            "tokens_per_example": 1000, "micro_batch": 4}
    a = client.post("/api/estimate", json=body).json()
    b = client.post("/api/estimate", json={**body, "adapter_dtype": "compute"}).json()
    assert a["memory_per_gpu_gib"] > b["memory_per_gpu_gib"]
    assert "--adapter-dtype compute" in b["command"] and "--adapter-dtype" not in a["command"]
    bad = client.post("/api/estimate", json={**body, "adapter_dtype": "fp16"})
    assert bad.status_code == 422 and "adapter_dtype" in bad.text
