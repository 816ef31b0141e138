"""The optimizer step's own memory peak (physics/memory.py optimizer_step_bytes, settle_peaks).

torch.optim.AdamW's default multi-tensor path (`_multi_tensor_adam`) computes
`exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)` for every parameter at once: one second moment's
bytes held next to every gradient and both moments, after the backward freed the activations. A fused
step holds none. The step's tensors reuse the blocks the backward freed, so the step adds no allocator
fragmentation of its own. Checked by hand on Llama-3.1-8B (8.03e9 weights), and through the frameworks'
defaults, the runs rows, the CLI, the web API and the profiler's rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.memory import memory
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.framework import OPTIMIZER_IMPLS, _parse, get_framework, load_frameworks
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H200 = gpu_catalog()["H200-SXM-141GB"]
A100 = gpu_catalog()["A100-SXM4-80GB"]
LLAMA8 = resolve_model("meta-llama/Llama-3.1-8B")


def _mem(gpu=H200, **kw) -> dict:
    job = make_job(**{"method": "full", "master_weights": "none", "micro_batch": 1, "seq_len": 128, **kw})
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in memory(build_arrays([(LLAMA8, gpu, job, 128)])).items()}


def test_foreach_step_holds_one_more_moment_by_hand() -> None:
    p = model_terms(LLAMA8, make_job(method="full")).params_trainable
    ws = DEFAULT_CONSTANTS.workspace_gib
    fe = _mem(optimizer_impl="foreach")
    # bf16 weights trained in place: weights 2, every gradient 2, two bf16 moments 4, the foreach sqrt 2 bytes
    assert fe["allocated_gib"] == pytest.approx(10 * p / BYTES_PER_GIB + ws, rel=1e-6)
    assert fe["optimizer_step_gib"] > 0
    fu = _mem(optimizer_impl="fused")
    # fused: no temporary; at 128 tokens the step (8 bytes a weight) is still above the backward's peak
    assert fu["allocated_gib"] == pytest.approx(8 * p / BYTES_PER_GIB + ws, rel=1e-6)
    assert fe["allocated_gib"] - fu["allocated_gib"] == pytest.approx(fu["optimizer_gib"] / 2, rel=1e-6)
    # a per-parameter loop holds one tensor's at a time: counted as none, like fused
    assert _mem(optimizer_impl="for-loop")["allocated_gib"] == pytest.approx(fu["allocated_gib"])


def test_step_adds_no_fragmentation_and_decides_the_fit() -> None:
    fe = _mem(gpu=A100, optimizer_impl="foreach")
    ctx = DEFAULT_CONSTANTS.cuda_context_gib
    # the step's blocks come from those the backward freed: reserved = allocated at the step
    assert fe["reserved_gib"] == pytest.approx(fe["allocated_gib"])
    assert fe["nvidia_smi_gib"] == pytest.approx(fe["allocated_gib"] + ctx)
    assert bool(fe["fits"]) == (fe["allocated_gib"] + ctx <= 80.0)  # 74.8 + 0.25 + 0.6 GiB: fits in 80
    assert bool(fe["fits"])
    # the breakdown still adds up: the backward's parts, the step's share above them, the allocator, the context
    parts = ("weights_gib", "gradients_gib", "master_weights_gib", "optimizer_gib", "gathered_params_gib",
             "activations_gib", "logits_gib", "workspace_gib", "optimizer_step_gib", "allocator_gib", "cuda_context_gib")
    assert sum(fe[k] for k in parts) == pytest.approx(fe["nvidia_smi_gib"])


def test_lora_and_long_sequences_keep_the_backward_peak() -> None:
    for kw in ({"method": "lora", "lora_rank": 16}, {"seq_len": 128, "micro_batch": 64}):
        fe, fu = _mem(optimizer_impl="foreach", **kw), _mem(optimizer_impl="fused", **kw)
        assert fe["optimizer_step_gib"] == 0.0 and fe["allocated_gib"] == pytest.approx(fu["allocated_gib"])
        # as before the step was modelled: the backward's peak with the allocator's overhead
        assert fe["reserved_gib"] == pytest.approx(fe["allocated_gib"] * (1 + DEFAULT_CONSTANTS.allocator_overhead)
                                                   + fe["variable_shape_gib"])


def test_eight_bit_and_offloaded_states_have_no_foreach_temporary() -> None:
    assert _mem(optimizer="adamw-8bit", optimizer_impl="foreach")["allocated_gib"] == pytest.approx(
        _mem(optimizer="adamw-8bit", optimizer_impl="fused")["allocated_gib"])
    off = {"gpus": 2, "sharding": "zero3-offload"}
    assert _mem(optimizer_impl="foreach", **off)["allocated_gib"] == pytest.approx(
        _mem(optimizer_impl="fused", **off)["allocated_gib"])


def test_every_framework_says_its_step_with_a_source() -> None:
    for name in load_frameworks():
        fw = get_framework(name)
        assert fw.optimizer_impl in OPTIMIZER_IMPLS
        assert fw.sources.get("optimizer_impl"), name
    assert get_framework("hf-trainer").optimizer_impl == "fused"  # transformers >= 4.55 with torch >= 2.8
    assert get_framework("trl").optimizer_impl == "fused"  # merges hf-trainer's entry
    assert get_framework("litgpt").optimizer_impl == "foreach"
    assert get_framework("llm-foundry").optimizer_impl == "for-loop"  # composer's DecoupledAdamW loop
    assert get_framework("generic").optimizer_impl == "foreach"  # torch's default
    from conftest import framework_entry

    with pytest.raises(ValueError, match="optimizer_impl"):
        _parse("x", framework_entry(optimizer_impl="magic", sources={"optimizer_impl": "s"}))
    with pytest.raises(ValueError, match="needs its source"):
        _parse("x", framework_entry(optimizer_impl="fused"))


def test_job_takes_the_frameworks_step() -> None:
    assert make_job(method="full", framework="hf-trainer").optimizer_impl == "fused"
    assert make_job(method="full", framework="litgpt").optimizer_impl == "foreach"
    assert make_job(method="full", framework="generic").optimizer_impl == "foreach"
    assert make_job(method="full").optimizer_impl == "fused"  # no framework given: hf-trainer's
    assert make_job(method="full", framework="hf-trainer", optimizer_impl="foreach").optimizer_impl == "foreach"
    with pytest.raises(InputError, match="optimizer-impl"):
        make_job(method="full", optimizer_impl="magic")


def test_runs_rows_read_the_step(tmp_path) -> None:
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H200-SXM-141GB", "method": "full", "seq_len": "2048",
           "micro_batch_size": "1", "gpus": "1", "framework": "hf-trainer"}
    assert row_to_config(row).job.optimizer_impl == "fused"  # the framework's default
    assert row_to_config({**row, "optimizer_impl": "foreach"}).job.optimizer_impl == "foreach"
    with pytest.raises(InputError, match="optimizer_impl"):
        row_to_config({**row, "optimizer_impl": "magic"})


def test_sources_state_their_step(tmp_path) -> None:
    """Sources measured on transformers' Trainer before 4.55 (adamw_torch) and IBM's actuator (its
    default --optim adamw_torch) fill the empty cell with foreach, and say so."""
    import csv

    from tuneplan.runs import REFERENCE_COLUMNS, read_runs

    p = tmp_path / "llmftbench.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(REFERENCE_COLUMNS)
        row = {"id": "b-1", "source": "llmftbench", "model": "granite-3.1-8b", "model_hf_id": "ibm-granite/granite-3.1-8b-base",
               "method": "full", "gpu": "A100-SXM4-80GB", "gpus": 1, "nodes": 1, "micro_batch_size": 1,
               "global_batch_size": 1, "seq_len": 4096, "tokens_per_s": 1437.0, "framework": "fms-hf-tuning (HF SFTTrainer)"}
        w.writerow([row.get(c, "") for c in REFERENCE_COLUMNS])
    r = read_runs([p]).df.iloc[0]
    assert r["optimizer_impl"] == "foreach" and "optimizer_impl=foreach(" in r["defaults_used"]


def test_cli_option_assumption_and_bad_value(capsys) -> None:
    from tuneplan.cli import main

    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H200-SXM-141GB", "--method", "full",
            "--seq-len", "2048", "--micro-batch", "1", "--tokens", "100000", "--calibration", "none", "--json"]
    assert main(base + ["--optimizer-impl", "foreach"]) == 0
    fe = json.loads(capsys.readouterr().out)
    assert fe["memory_breakdown_gib"]["optimizer_step"] > 0
    assert any("the peak is the optimizer step's" in x for x in fe["assumptions"])
    assert main(base + ["--optimizer-impl", "fused"]) == 0
    fu = json.loads(capsys.readouterr().out)
    assert fu["memory_per_gpu_gib"] < fe["memory_per_gpu_gib"]
    assert main(base + ["--framework", "hf-trainer"]) == 0
    assert any("AdamW step fused (hf-trainer (transformers 5.25)'s default: transformers 4.55.4 training_args.py"
               in x for x in json.loads(capsys.readouterr().out)["assumptions"])
    with pytest.raises(SystemExit) as exc:
        main(base + ["--optimizer-impl", "magic"])
    assert exc.value.code == 2
    assert "--optimizer-impl" in capsys.readouterr().err


def test_web_api_takes_the_step() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    body = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H200-SXM-141GB", "method": "full", "micro_batch": 1,
            "seq_len": 2048, "examples": 100, "tokens_per_example": 2048}
    with TestClient(create_app(warm_up=False), raise_server_exceptions=False) as c:
        assert "fused" in c.get("/api/options").json()["optimizer_impls"]
        fe = c.post("/api/estimate", json={**body, "optimizer_impl": "foreach"})
        fu = c.post("/api/estimate", json={**body, "optimizer_impl": "fused"})
        assert fe.status_code == fu.status_code == 200
        assert fe.json()["memory_per_gpu_gib"] > fu.json()["memory_per_gpu_gib"]
        bad = c.post("/api/estimate", json={**body, "optimizer_impl": "magic"})
        assert bad.status_code == 422 and "optimizer_impl" in bad.text


def test_profile_rows_say_how_the_step_ran(monkeypatch) -> None:
    from tuneplan.profile import runner
    from tuneplan.profile.config import ProfileConfig
    from tuneplan.profile.rows import EXTRA_COLUMNS
    from tuneplan.profile.runner import config_row

    assert "optimizer_impl" in EXTRA_COLUMNS
    cpu = config_row(ProfileConfig(model="tiny", method="full"), None, "cpu")
    assert cpu["optimizer_impl"] == "for-loop"  # torch takes the foreach path on CUDA only
    monkeypatch.setattr(runner, "device_name", lambda device: "NVIDIA H200")  # no CUDA here
    assert config_row(ProfileConfig(model="tiny", method="full"), None, "cuda:0")["optimizer_impl"] == "foreach"
    assert config_row(ProfileConfig(model="tiny", method="full", optimizer="sgd"), None, "cpu")["optimizer_impl"] is None


def test_training_configs_name_their_step(tmp_path) -> None:
    from conftest import SHARED
    from tuneplan.configs import read_configs

    def impl(text: str, name: str = "train.yaml") -> str:
        p = tmp_path / name
        p.write_text(text)
        return read_configs([p]).job_kwargs()["optimizer_impl"]

    hf = "model_name_or_path: Qwen/Qwen2.5-7B\nbf16: true\n"
    assert impl(hf) == "fused"  # optim not set: adamw_torch_fused (transformers >= 4.55, torch >= 2.8)
    assert impl(hf + "optim: adamw_torch\n") == "foreach"
    assert impl(hf + "optim: adamw_torch_fused\n") == "fused"
    assert impl(hf + "optim: adamw_hf\n") == "for-loop"
    tt = SHARED / "fixtures" / "training-configs" / "torchtune" / "llama3_1-8B_full.yaml"
    assert read_configs([tt]).job_kwargs()["optimizer_impl"] == "fused"  # torch.optim.AdamW with fused: True
    plain = tt.read_text().replace("  fused: True\n", "")
    assert impl(plain, "tt.yaml") == "foreach"  # torch.optim.AdamW with torch's defaults
