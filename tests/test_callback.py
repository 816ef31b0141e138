"""TuneplanCallback: a real (tiny) transformers Trainer run on CPU recorded as a runs row."""

from __future__ import annotations

import csv
import json
import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from conftest import tiny_llama_config  # noqa: E402
from tuneplan.integrations.transformers import TuneplanCallback  # noqa: E402
from tuneplan.runs import read_runs  # noqa: E402
from tuneplan.specs.gpu import gpu_from_dict  # noqa: E402

SEQ = 16


class _Data(torch.utils.data.Dataset):
    """Variable-length token rows (padded per batch by the collator: real < padded tokens)."""

    def __init__(self, n: int = 12) -> None:
        g = torch.Generator().manual_seed(0)
        self.rows = [torch.randint(3, 100, (int(torch.randint(6, SEQ + 1, (1,), generator=g)),), generator=g)
                     for _ in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i]}


def _collate(batch):
    n = max(len(b["input_ids"]) for b in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.long)
    for i, b in enumerate(batch):
        ids[i, : len(b["input_ids"])] = b["input_ids"]
        mask[i, : len(b["input_ids"])] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _train(tmp_path, cb, lora: bool = True, steps: int = 3):
    cfg = transformers.LlamaConfig(**{k: v for k, v in tiny_llama_config().items() if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    if lora:
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                           task_type="CAUSAL_LM"))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, gradient_accumulation_steps=2,
        max_steps=steps, logging_steps=100, save_strategy="no", report_to=[], use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Data(), data_collator=_collate,
                                   callbacks=[cb])
    trainer.train()
    return model


def test_tiny_trainer_run_is_recorded(tmp_path, caplog):
    out = tmp_path / "runs.csv"
    cpu = gpu_from_dict({"name": "local-cpu", "peak_tflops": {"fp32": 0.2, "bf16": 0.2}, "memory_gib": 16,
                         "memory_bandwidth_gbs": 20})
    cb = TuneplanCallback(out=out, warmup_steps=1, gpu=cpu)
    with caplog.at_level(logging.WARNING, logger="tuneplan"):
        _train(tmp_path, cb)
    assert len(cb.steps) == 3
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 1
    r = rows[0]
    assert (r["source"], r["method"], r["lora_rank"], r["lora_targets"]) == ("callback", "lora", "4", "q,v")
    assert (r["micro_batch_size"], r["grad_accum"], r["gpus"], r["global_batch_size"]) == ("2", "2", "1", "4")
    assert r["gpu"] == "local-cpu" and r["mem_kind"] == "rss" and float(r["peak_mem_gib"]) > 0
    assert r["n_steps"] == "2" and r["warmup_steps"] == "1"
    # tokens from the batches: 2 micro-batches of 2 samples, padded to their longest
    padded, real = float(r["tokens_per_step_padded"]), float(r["tokens_per_step_real"])
    assert 4 * 6 <= real <= padded <= 4 * SEQ
    assert float(r["tokens_per_s"]) == pytest.approx(padded / float(r["step_time_s"]), rel=1e-3)
    assert json.loads(r["model_config_json"])["hidden_size"] == 64
    assert json.loads(r["peft_config_json"])["r"] == 4
    assert json.loads(r["training_args_json"])["per_device_train_batch_size"] == 2
    assert cb.prediction is not None and cb.prediction["step_time_s"] > 0
    assert "predicted vs measured on local-cpu" in caplog.text
    # the row reads back as a measured run; a second run appends, never overwrites
    _train(tmp_path, TuneplanCallback(out=out, warmup_steps=1, predict=False), lora=False, steps=2)
    rows = list(csv.DictReader(out.open()))
    assert [x["method"] for x in rows] == ["lora", "full"] and rows[0]["id"] != rows[1]["id"]
    table = read_runs([out], resolve=False)
    assert len(table.df) == 2


def test_default_path_and_no_gpu_prediction(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("TUNEPLAN_HOME", str(tmp_path / "home"))
    cb = TuneplanCallback(warmup_steps=1)
    with caplog.at_level(logging.WARNING, logger="tuneplan"):
        _train(tmp_path, cb, steps=2)
    assert (tmp_path / "home" / "runs" / "runs.csv").is_file()
    assert "no prediction for this run" in caplog.text


def test_calibrate_without_runs_uses_the_recorded_file(tmp_path, monkeypatch, capsys):
    import pandas as pd

    from conftest import reference_dir
    from tuneplan.cli import main

    home = tmp_path / "home"
    monkeypatch.setenv("TUNEPLAN_HOME", str(home))
    assert main(["calibrate", "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "no recorded runs at" in err and "TuneplanCallback" in err and "\n" not in err.strip()
    ref = reference_dir()
    if ref is None:
        pytest.skip("reference runs not available")
    (home / "runs").mkdir(parents=True)
    rows = pd.concat([pd.read_csv(ref / f"{s}.csv") for s in ("peft", "xia2024", "philschmid-dlph", "xtuner")])
    rows.to_csv(home / "runs" / "runs.csv", index=False)
    assert main(["calibrate", "--out", str(tmp_path / "c.json")]) == 0
    assert "recorded by TuneplanCallback" in capsys.readouterr().err
    assert (tmp_path / "c.json").is_file()


def test_under_trl_sft_trainer(tmp_path):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(100)} | {"<pad>": 100}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w1"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="w2")
    ds = datasets.Dataset.from_list([{"input_ids": r.tolist()} for r in _Data().rows])
    cfg = transformers.LlamaConfig(**{k: v for k, v in tiny_llama_config(vocab_size=128).items()
                                      if k != "architectures"})
    torch.manual_seed(0)
    args = trl.SFTConfig(output_dir=str(tmp_path / "sft"), per_device_train_batch_size=2, gradient_accumulation_steps=2,
                         max_steps=3, logging_steps=100, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
                         max_length=32, disable_tqdm=True, gradient_checkpointing=False)
    cb = TuneplanCallback(out=tmp_path / "runs.csv", warmup_steps=1, predict=False)
    trl.SFTTrainer(model=transformers.LlamaForCausalLM(cfg), args=args, train_dataset=ds, processing_class=tok,
                   callbacks=[cb]).train()
    r = cb.row
    assert (r["framework"], r["method"], r["micro_batch_size"], r["grad_accum"]) == ("trl", "full", 2, 2)
    assert 4 * 6 <= r["tokens_per_step_real"] <= r["tokens_per_step_padded"] <= 4 * SEQ
    assert json.loads(r["training_args_json"])["max_length"] == 32
