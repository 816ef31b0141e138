"""What FSDP holds of the gradients beyond a shard per GPU (physics/fsdp.py, physics/memory.py gradient_bytes).

- `--grad-accum-sync no-sync`: FSDP.no_sync on all but the last micro-batch (HF Trainer / accelerate,
  Lightning Fabric) accumulates the unsharded gradients ("FSDP will accumulate the full model gradients
  (instead of gradient shards) until the eventual sync", torch's docstring); the last micro-batch
  reduce-scatters them once.
- `--fsdp-adapter-wrap with-block`: adapters inside each block's FSDP1 flat parameter (use_orig_params=True):
  the whole flat parameter's gradient is allocated, the frozen weights' share too.

Checked by hand on Llama-2-7B (6.74e9 weights) and against litgpt's published peaks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.constants import BYTES_PER_GIB
from tuneplan.physics.fsdp import gradient_reductions
from tuneplan.physics.memory import memory
from tuneplan.physics.step import step_time
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.framework import (
    FSDP_ADAPTER_WRAPS,
    GRAD_ACCUM_SYNCS,
    _parse,
    get_framework,
    load_frameworks,
)
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

A100 = gpu_catalog()["A100-SXM4-80GB"]
LLAMA7 = resolve_model("meta-llama/Llama-2-7b-hf")
FSDP4 = {"gpus": 4, "sharding": "fsdp", "micro_batch": 4, "seq_len": 512}


def _arrays(**kw) -> dict:
    job = make_job(**{"method": "full", "master_weights": "none", **FSDP4, **kw})
    return build_arrays([(LLAMA7, A100, job, job.seq_len)])


def _mem(**kw) -> dict:
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in memory(_arrays(**kw)).items()}


def test_no_sync_holds_the_unsharded_gradients_by_hand() -> None:
    p = model_terms(LLAMA7, make_job(method="full")).params_trainable
    nosync = _mem(grad_accum=4, grad_accum_sync="no-sync")
    synced = _mem(grad_accum=4, grad_accum_sync="every-micro-batch")
    # bf16 gradients: 2 bytes a weight, on every GPU under no_sync, a quarter of them otherwise
    assert nosync["gradients_gib"] == pytest.approx(2 * p / BYTES_PER_GIB, rel=1e-6)
    assert synced["gradients_gib"] == pytest.approx(2 * p / 4 / BYTES_PER_GIB, rel=1e-6)
    # the last micro-batch reduce-scatters and frees them: the step holds the shards either way
    assert nosync["step_peak_gib"] == pytest.approx(synced["step_peak_gib"])
    assert nosync["allocated_gib"] - synced["allocated_gib"] == pytest.approx(2 * p * 0.75 / BYTES_PER_GIB, rel=1e-6)


def test_no_sync_needs_fsdp_accumulation_and_sharding() -> None:
    synced = _mem(grad_accum=4, grad_accum_sync="every-micro-batch")["gradients_gib"]
    # one micro-batch a step: nothing to accumulate
    assert _mem(grad_accum=1, grad_accum_sync="no-sync")["gradients_gib"] == pytest.approx(synced)
    # DeepSpeed ZeRO reduces every micro-batch into its partitions whatever the trainer (accelerate skips no_sync)
    assert _mem(grad_accum=4, grad_accum_sync="no-sync", sharding="zero3")["gradients_gib"] == pytest.approx(synced)
    # one GPU: no shards to begin with
    one = {"gpus": 1, "grad_accum": 4}
    assert _mem(grad_accum_sync="no-sync", **one)["gradients_gib"] == pytest.approx(
        _mem(grad_accum_sync="every-micro-batch", **one)["gradients_gib"])


def test_no_sync_reduces_once_a_step() -> None:
    a_sync, a_nosync = _arrays(grad_accum=8, grad_accum_sync="every-micro-batch"), _arrays(grad_accum=8, grad_accum_sync="no-sync")
    assert float(gradient_reductions(a_sync)[0]) == 8.0 and float(gradient_reductions(a_nosync)[0]) == 1.0
    assert float(step_time(a_nosync)["communication_total_s"][0]) < float(step_time(a_sync)["communication_total_s"][0])


def test_adapters_in_block_units_allocate_the_frozen_gradients_by_hand() -> None:
    lora = {"method": "lora", "lora_rank": 8, "lora_targets": "q,v", "adapter_dtype": "compute", "grad_accum": 1}
    t = model_terms(LLAMA7, make_job(method="lora", lora_rank=8, lora_targets=("q", "v")))
    own = _mem(fsdp_adapter_wrap="separate", **lora)
    block = _mem(fsdp_adapter_wrap="with-block", **lora)
    # separate: the adapters' fp32 gradients (peft's grads follow the adapters: 4 bytes) over 4 GPUs
    assert own["gradients_gib"] == pytest.approx(t.params_trainable * 4 / 4 / BYTES_PER_GIB, rel=1e-6)
    # with-block: the flat parameter's gradient, bf16, adapters and the blocks' frozen weights, over 4 GPUs
    whole = (t.params_trainable + t.params_frozen_linear) * 2
    assert block["gradients_gib"] == pytest.approx(whole / 4 / BYTES_PER_GIB, rel=1e-6)
    # under no_sync the whole of it on every GPU
    held = _mem(fsdp_adapter_wrap="with-block", grad_accum_sync="no-sync", **{**lora, "grad_accum": 4})
    assert held["gradients_gib"] == pytest.approx(whole / BYTES_PER_GIB, rel=1e-6)
    # full fine-tuning trains whole blocks: the wrap changes nothing
    assert _mem(fsdp_adapter_wrap="with-block")["allocated_gib"] == pytest.approx(_mem(fsdp_adapter_wrap="separate")["allocated_gib"])


def test_frameworks_say_how_they_accumulate_with_a_source() -> None:
    for name in load_frameworks():
        fw = get_framework(name)
        assert fw.grad_accum_sync in GRAD_ACCUM_SYNCS and fw.fsdp_adapter_wrap in FSDP_ADAPTER_WRAPS
    for name in ("hf-trainer", "trl", "axolotl", "llama-factory", "unsloth", "ms-swift", "fms-hf-tuning", "litgpt"):
        assert get_framework(name).grad_accum_sync == "no-sync", name
        assert get_framework(name).sources.get("grad_accum_sync"), name
    for name in ("torchtune", "torchtitan", "llm-foundry", "generic", "megatron", "deepspeed"):
        assert get_framework(name).grad_accum_sync == "every-micro-batch", name
    assert get_framework("litgpt").fsdp_adapter_wrap == "separate"  # FSDP2 for LoRA since litgpt 0.5.11
    from conftest import framework_entry

    with pytest.raises(ValueError, match="grad_accum_sync"):
        _parse("x", framework_entry(grad_accum_sync="sometimes", sources={"grad_accum_sync": "s"}))
    with pytest.raises(ValueError, match="needs its source"):
        _parse("x", framework_entry(fsdp_adapter_wrap="with-block"))


def test_job_and_runs_rows_take_the_settings() -> None:
    from tuneplan.learn.dataset import row_to_config

    assert make_job(method="full", framework="hf-trainer").grad_accum_sync == "no-sync"
    assert make_job(method="full", framework="generic").grad_accum_sync == "every-micro-batch"  # FSDP's own
    assert make_job(method="full").grad_accum_sync == "no-sync"  # no framework given: hf-trainer's
    with pytest.raises(InputError, match="grad-accum-sync"):
        make_job(method="full", grad_accum_sync="sometimes")
    with pytest.raises(InputError, match="fsdp-adapter-wrap"):
        make_job(method="lora", fsdp_adapter_wrap="inside")
    row = {"model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-SXM4-80GB", "method": "full", "seq_len": "512",
           "micro_batch_size": "4", "grad_accum": "4", "gpus": "4", "sharding": "fsdp-full", "framework": "litgpt"}
    assert row_to_config(row).job.grad_accum_sync == "no-sync"
    assert row_to_config({**row, "grad_accum_sync": "every-micro-batch"}).job.grad_accum_sync == "every-micro-batch"
    with pytest.raises(InputError, match="grad_accum_sync"):
        row_to_config({**row, "grad_accum_sync": "sometimes"})
    with pytest.raises(InputError, match="fsdp_adapter_wrap"):
        row_to_config({**row, "fsdp_adapter_wrap": "inside"})


def test_litgpt_published_peaks() -> None:
    """litgpt's own tables (torch.cuda.max_memory_allocated): full fine-tuning of Llama-2-7B on 4 x A100
    with FSDP and 4 accumulation steps (litgpt-11: 24.97 GiB, 15.9 predicted before no_sync was modelled)
    and lit-gpt's 2023 LoRA tables (FSDPStrategy, Block units: litgpt-136 20.66 GiB on 2 GPUs, litgpt-140
    33.13 GiB on 4, 8.4 and 8.8 predicted before); litgpt-139 (13B on 2 x 40 GB) and -141 (Falcon-40B on
    4 x 40 GB) ran out of memory."""
    from conftest import SHARED
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
    from tuneplan.learn.measured import training_set
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs
    from tuneplan.runs import read_runs

    df = read_runs([SHARED / "reference" / "runs" / "litgpt.csv"]).df
    ts = training_set(df)
    p = predict_configs(ts.configs, TuneplanEstimator(), with_max_batch=False)
    mem = memory_for_kind(p, ts.mem_kind)
    ids = list(ts.df["id"].astype(str))
    for rid in ("litgpt-11", "litgpt-136", "litgpt-140"):
        i = ids.index(rid)
        assert mem[i] == pytest.approx(ts.peak_mem_gib[i], rel=0.05), rid
    for rid in ("litgpt-139", "litgpt-141"):
        assert ts.is_oom[ids.index(rid)] and not bool(p["fits"][ids.index(rid)]), rid


def test_cli_web_and_config(capsys, tmp_path) -> None:
    from tuneplan.cli import main
    from tuneplan.configs import read_configs

    base = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-SXM4-80GB", "--method", "full",
            "--gpus", "4", "--sharding", "fsdp", "--grad-accum", "4", "--seq-len", "512", "--tokens", "100000",
            "--calibration", "none", "--json", "--framework", "hf-trainer"]
    assert main(base) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("FSDP gradient accumulation no-sync (hf-trainer (transformers 5.25)'s default: transformers 5.24.0 "
               "trainer.py" in x for x in out["assumptions"])
    assert main(base + ["--grad-accum-sync", "every-micro-batch"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_per_gpu_gib"] < out["memory_per_gpu_gib"]
    with pytest.raises(SystemExit) as exc:
        main(base + ["--grad-accum-sync", "sometimes"])
    assert exc.value.code == 2 and "--grad-accum-sync" in capsys.readouterr().err
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: meta-llama/Llama-2-7b-hf\nbf16: true\ngradient_accumulation_steps: 4\n"
                   "accelerator_config:\n  gradient_accumulation_kwargs:\n    sync_each_batch: true\n")
    assert read_configs([cfg]).job_kwargs()["grad_accum_sync"] == "every-micro-batch"
    from conftest import SHARED

    # axolotl's FSDP QLoRA recipe (gradient_accumulation_steps 4): transformers' Trainer accumulates under no_sync
    fsdp = read_configs([SHARED / "fixtures" / "training-configs" / "axolotl" / "llama3-70b-qlora-fsdp.yaml"])
    assert fsdp.job_kwargs()["grad_accum_sync"] == "no-sync" and any("no_sync" in x for x in fsdp.assumed())
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    body = {"model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-SXM4-80GB", "method": "full", "gpus": 4,
            "sharding": "fsdp", "grad_accum": 4, "seq_len": 512, "examples": 100, "tokens_per_example": 512}
    with TestClient(create_app(warm_up=False), raise_server_exceptions=False) as c:
        opts = c.get("/api/options").json()
        assert "no-sync" in opts["grad_accum_syncs"] and "with-block" in opts["fsdp_adapter_wraps"]
        held = c.post("/api/estimate", json={**body, "grad_accum_sync": "no-sync"})
        synced = c.post("/api/estimate", json={**body, "grad_accum_sync": "every-micro-batch"})
        assert held.status_code == synced.status_code == 200
        assert held.json()["memory_per_gpu_gib"] > synced.json()["memory_per_gpu_gib"]
        bad = c.post("/api/estimate", json={**body, "fsdp_adapter_wrap": "inside"})
        assert bad.status_code == 422 and "fsdp_adapter_wrap" in bad.text


def test_expert_weights_shard_over_expert_data_parallel_by_hand() -> None:
    """Megatron-Core's distributed optimizer shards dense weights' states over data parallel and expert
    weights' over the expert-data-parallel ranks (data parallel / ep): Qwen3-30B-A3B on 16 GPUs with tp 2
    and ep 8 has 8 data-parallel ranks and 1 expert-data-parallel rank, so the experts' master copy and
    moments are not divided (ms-swift-megatron-4: 60 GiB measured, 19.7 predicted when they were)."""
    from tuneplan.physics.memory import expert_sharding

    moe = resolve_model("Qwen/Qwen3-30B-A3B")
    job = make_job(method="full", gpus=16, nodes=2, tp=2, ep=8, framework="megatron", micro_batch=1, seq_len=2048)
    t = model_terms(moe, job)
    out = memory(build_arrays([(moe, A100, job, 2048)]))
    share = t.params_expert / t.params_total
    dense, expert = (1 - share) * t.params_trainable / 2, share * t.params_trainable / 8 / 2  # per GPU: tp 2, ep 8
    # fp32 master copy (4 bytes) and fp32 moments (8): dense over 8 ranks, experts over 1
    want = (dense / 8 + expert / 1) * 12 / BYTES_PER_GIB
    got = float(out["master_weights_gib"][0] + out["optimizer_gib"][0])
    assert got == pytest.approx(want, rel=1e-6)
    assert float(expert_sharding(np.array(8.0), np.array(8.0), np.array(0.0))) == 8.0  # dense only
    assert float(expert_sharding(np.array(1.0), np.array(8.0), np.array(1.0))) == 1.0  # nothing sharded
