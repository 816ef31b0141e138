"""A measured row that leaves activation checkpointing empty takes what its stack does by default:
the source's stated default (data/source_defaults.yaml: LLMFineTuningBench runs through IBM's ado
sfttrainer actuator, checkpointing on), else the framework's own default (data/frameworks.yaml:
LLaMA-Factory on, HF Trainer off), exactly as `tuneplan estimate --framework X` does; and the
fms-hf-tuning entry's kernels and weights."""

from __future__ import annotations

import csv
from pathlib import Path

from tuneplan.api import estimate
from tuneplan.learn.dataset import row_to_config
from tuneplan.runs import REFERENCE_COLUMNS, read_runs
from tuneplan.specs.framework import framework_for_text, get_framework

GRANITE = {"model": "granite-3.1-2b", "model_hf_id": "ibm-granite/granite-3.1-2b-base", "method": "full",
           "gpu": "A100-SXM4-80GB", "gpus": 1, "nodes": 1, "micro_batch_size": 4, "global_batch_size": 4,
           "seq_len": 4096, "tokens_per_s": 6875.0}


def _file(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(REFERENCE_COLUMNS)
        w.writerows([[r.get(c, "") for c in REFERENCE_COLUMNS] for r in rows])
    return path


def _row(**kw: object) -> dict:
    return {"model": "Llama-2-7b-hf", "model_hf_id": "meta-llama/Llama-2-7b-hf", "method": "lora", "lora_rank": 8,
            "lora_targets": "q,v", "precision": "bf16", "gpu": "A100-SXM4-80GB", "gpus": 1, "micro_batch_size": 4,
            "grad_accum": 1, "seq_len": 1024, **kw}


def test_row_takes_the_frameworks_checkpointing_default() -> None:
    cfg = row_to_config(_row(framework="llama-factory"))
    assert cfg.job.grad_ckpt is True
    assert any(d.startswith("grad_ckpt=1 (framework llama-factory's default: hparams/model_args.py")
               for d in cfg.defaults_used)
    assert row_to_config(_row(framework="llama-factory", grad_ckpt=0)).job.grad_ckpt is False  # stated wins
    off = row_to_config(_row(framework="hf-trainer"))  # HF Trainer's own default: off
    assert off.job.grad_ckpt is False and any(d.startswith("grad_ckpt=0 (") for d in off.defaults_used)


def test_llmftbench_rows_take_the_actuators_checkpointing(tmp_path: Path) -> None:
    src = _file(tmp_path / "llmftbench.csv", [{**GRANITE, "id": "b-1", "source": "llmftbench",
                                               "framework": "fms-hf-tuning (HF SFTTrainer)"}])
    r = read_runs([src]).df.iloc[0]
    assert r["grad_ckpt"] == 1 and "grad_ckpt=1(" in r["defaults_used"]
    assert row_to_config(r.to_dict()).job.grad_ckpt is True
    other = _file(tmp_path / "mine.csv", [{**GRANITE, "id": "m-1", "source": "mine", "framework": "fms-hf-tuning"}])
    assert read_runs([other]).df.iloc[0]["grad_ckpt"] == 0  # fms-hf-tuning on its own: TrainingArguments' off


def test_raw_llmftbench_file_fills_the_actuators_checkpointing(tmp_path: Path) -> None:
    header = ["model_name", "method", "gpu_model", "number_gpus", "number_nodes", "tokens_per_sample", "batch_size",
              "dataset_tokens_per_second", "train_runtime", "is_valid", "gpu_memory_utilization_peak", "error"]
    p = tmp_path / "bench.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerow(["granite-3.1-8b-instruct", "full", "NVIDIA-A100-SXM4-80GB", 4, 1, 4096, 16, 10000.5, 600, "True",
                    75, ""])
    r = read_runs([p]).df.iloc[0]
    assert r["grad_ckpt"] == 1 and "grad_ckpt=1(ado sfttrainer actuator default" in r["defaults_used"]


def test_fms_hf_tuning_entry() -> None:
    assert framework_for_text("fms-hf-tuning (HF SFTTrainer)") == "fms-hf-tuning"
    assert framework_for_text("HF SFTTrainer") == "trl"
    fw = get_framework("fms-hf-tuning")
    assert fw.attention == "flash2" and fw.master_weights == "none" and fw.grad_ckpt is None
    assert {"attention", "master_weights", "padding"} <= set(fw.sources)
    r = estimate("ibm-granite/granite-3.1-2b-base", "A100-SXM4-80GB", method="full", framework="fms-hf-tuning",
                 micro_batch=1, seq_len=2048, examples=100)
    fp32 = estimate("ibm-granite/granite-3.1-2b-base", "A100-SXM4-80GB", method="full", framework="hf-trainer",
                    micro_batch=1, seq_len=2048, examples=100)
    # bf16 weights trained in place: no 4-byte master copy, AdamW moments in bf16 (8 bytes/param less)
    assert fp32.memory_breakdown_gib["master_weights"] > 0 and r.memory_breakdown_gib["master_weights"] == 0
    assert r.memory_breakdown_gib["optimizer"] == fp32.memory_breakdown_gib["optimizer"] / 2
    assert any(a.startswith("Framework fms-hf-tuning: attention flash2") for a in r.assumptions)
    assert any(a.startswith("bf16 weights trained in place") for a in r.assumptions)


def test_ms_swift_defaults_follow_its_train_arguments() -> None:
    fw = get_framework("ms-swift")
    assert fw.job_defaults() == {"grad_ckpt": True, "micro_batch": 1}
    assert "gradient_checkpointing: bool = True" in fw.sources["grad_ckpt"]
    r = estimate("Qwen/Qwen2.5-7B", "A100-SXM4-80GB", method="lora", framework="ms-swift", seq_len=2048, examples=100)
    assert r.job.grad_ckpt and r.job.micro_batch == 1
    assert any("activation checkpointing on by default, micro-batch 1 by default" in a for a in r.assumptions)
    explicit = estimate("Qwen/Qwen2.5-7B", "A100-SXM4-80GB", method="lora", framework="ms-swift", seq_len=2048,
                        examples=100, micro_batch=4, grad_ckpt=False)
    assert not explicit.job.grad_ckpt and explicit.job.micro_batch == 4


def test_trl_checkpoints_by_default_and_is_hf_trainer_otherwise() -> None:
    trl, hf = get_framework("trl"), get_framework("hf-trainer")
    assert trl.job_defaults() == {"grad_ckpt": True} and hf.job_defaults() == {}
    assert "gradient_checkpointing: bool = True" in trl.sources["grad_ckpt"]
    same = ("attention", "cross_entropy", "fused_lora", "adapter_fp32", "master_weights", "padding", "moe_experts")
    assert all(getattr(trl, k) == getattr(hf, k) for k in same)
    on = estimate("Qwen/Qwen2.5-7B", "A100-SXM4-80GB", method="lora", framework="trl", seq_len=2048, examples=100)
    off = estimate("Qwen/Qwen2.5-7B", "A100-SXM4-80GB", method="lora", framework="hf-trainer", seq_len=2048,
                   examples=100)
    assert on.job.grad_ckpt and not off.job.grad_ckpt
    assert on.memory_per_gpu_gib < off.memory_per_gpu_gib and on.step_time_s > off.step_time_s
