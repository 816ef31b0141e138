"""Both peaks (torch's allocated and reserved): predict's columns, the profiler's and the callback's."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.runs import read_runs


def test_predict_writes_both_peaks_and_judges_each_row_on_its_kind(tmp_path):
    """One configuration measured three ways: pred_peak_mem_gib is the allocated peak for the
    `allocated` row, the reserved peak for the `reserved` row and nvidia-smi's (reserved + CUDA
    context) for the `unknown` one; the two peak columns are the same on every row."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.predict_table import predict_frame

    head = "id,source,model,method,lora_rank,precision,gpu,gpus,micro_batch_size,grad_accum,seq_len,peak_mem_gib,mem_kind"
    body = [f"t-{i},t,meta-llama/Llama-3.1-8B,lora,16,bf16,H100-SXM5-80GB,1,2,1,1024,30,{k}"
            for i, k in enumerate(("allocated", "reserved", "unknown"))]
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([head, *body]) + "\n")
    est = get_estimator("tuneplan")
    out = predict_frame(read_runs([str(path)]).df, est, with_max_batch=False)
    assert out["error"].isna().all() or (out["error"].fillna("") == "").all()
    alloc, res = out["pred_peak_mem_allocated_gib"].to_numpy(float), out["pred_peak_mem_reserved_gib"].to_numpy(float)
    assert np.ptp(alloc) == 0 and np.ptp(res) == 0 and 0 < alloc[0] < res[0]
    got = out["pred_peak_mem_gib"].to_numpy(float)
    assert got[0] == pytest.approx(alloc[0]) and got[1] == pytest.approx(res[1])
    assert got[2] == pytest.approx(res[2] + est.constants.cuda_context_gib)


GIB = 1024**3


def _tiny_model(tmp_path) -> str:
    import json

    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
           "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": False}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_profiler_row_on_the_cpu_has_rss_and_its_longest_batch(tmp_path):
    """On the CPU there is no allocator peak (RSS only); every micro-batch is micro_batch x seq_len."""
    pytest.importorskip("transformers")
    from tuneplan.profile.config import ProfileConfig
    from tuneplan.profile.rows import COLUMNS
    from tuneplan.profile.runner import run_one

    row = run_one(ProfileConfig(model=_tiny_model(tmp_path), method="full", seq_len=24, micro_batch=3, layers=1,
                                steps=1, warmup=1, threads=1))
    assert row["status"] == "ok", row.get("error")
    assert row["longest_batch_tokens"] == 3 * 24
    assert row["mem_kind"] == "rss" and row["peak_mem_gib"] > 0 and row["peak_mem_allocated_gib"] is None
    assert {"peak_mem_allocated_gib", "peak_mem_reserved_gib", "longest_batch_tokens"} <= set(COLUMNS)


def test_profiler_row_on_cuda_carries_both_peaks(tmp_path, monkeypatch):
    """A CUDA measurement of 2 GiB allocated and 3 GiB reserved: the row says both, in GiB."""
    from tuneplan.profile import runner as runner_mod
    from tuneplan.profile.config import ProfileConfig

    monkeypatch.setattr(runner_mod, "device_name", lambda device: "test GPU")
    cfg = ProfileConfig(model=_tiny_model(tmp_path), method="full", seq_len=16, micro_batch=2, layers=1)
    m = runner_mod.Measured(step_times=[0.5, 0.5], peak_bytes=2 * GIB, peak_reserved_bytes=3 * GIB,
                            longest_batch_tokens=32)
    row = runner_mod.result_row(cfg, None, "cuda:0", m)
    assert row["mem_kind"] == "allocated" and row["peak_mem_gib"] == 2.0
    assert row["peak_mem_allocated_gib"] == 2.0 and row["peak_mem_reserved_gib"] == 3.0
    assert row["longest_batch_tokens"] == 32


def test_trl_hook_counts_training_forwards_only():
    """The longest training forward's input_ids; a forward without gradients (generation, a
    reference pass) or in eval mode does not count."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from tuneplan.profile.stages import LongestBatch

    lin = torch.nn.Embedding(10, 2)
    hook = LongestBatch()
    lin.register_forward_pre_hook(hook, with_kwargs=True)
    lin(torch.zeros(2, 5, dtype=torch.long))  # 10 tokens, training
    with torch.no_grad():
        lin(torch.zeros(4, 8, dtype=torch.long))  # 32, no gradients: not counted
    lin.eval()
    lin(torch.zeros(3, 9, dtype=torch.long))  # 27, eval: not counted
    lin.train()
    lin(torch.zeros(1, 7, dtype=torch.long))  # 7 < 10
    assert hook.tokens == 10


def test_callback_records_the_longest_micro_batch(tmp_path):
    """Rows of 6..16 tokens padded per batch: the row's longest batch is the largest input_ids the
    collator handed the model (samples x the batch's longest row)."""
    import csv

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from conftest import tiny_llama_config
    from tuneplan.integrations.transformers import TuneplanCallback

    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(3, 100, (int(torch.randint(6, 17, (1,), generator=g)),), generator=g) for _ in range(12)]
    seen: list[int] = []

    def collate(batch):
        n = max(len(b) for b in batch)
        ids = torch.zeros(len(batch), n, dtype=torch.long)
        for i, b in enumerate(batch):
            ids[i, : len(b)] = b
        seen.append(ids.numel())
        return {"input_ids": ids, "labels": ids}

    cfg = transformers.LlamaConfig(**{k: v for k, v in tiny_llama_config().items() if k != "architectures"})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=3, gradient_accumulation_steps=1, max_steps=4,
        logging_steps=100, save_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    out = tmp_path / "runs.csv"
    cb = TuneplanCallback(out=out, warmup_steps=1, predict=False)
    transformers.Trainer(model=model, args=args, train_dataset=rows, data_collator=collate, callbacks=[cb]).train()
    (r,) = list(csv.DictReader(out.open()))
    assert len(seen) >= 4 and int(float(r["longest_batch_tokens"])) == max(seen[:4])
    assert r["mem_kind"] == "rss" and r.get("peak_mem_allocated_gib", "") == ""


def test_callback_on_cuda_keeps_both_peaks(tmp_path, monkeypatch):
    """torch's 1.5 GiB allocated and 2.5 GiB reserved peaks: both columns, peak_mem_gib the reserved."""
    torch = pytest.importorskip("torch")
    from tuneplan.integrations.transformers import TuneplanCallback

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: int(1.5 * GIB))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a, **k: int(2.5 * GIB))
    cb = TuneplanCallback(out=tmp_path / "runs.csv", predict=False)
    cb._device = "cuda"
    assert cb._memory() == {"peak_mem_gib": 2.5, "mem_kind": "reserved", "peak_mem_reserved_gib": 2.5,
                            "peak_mem_allocated_gib": 1.5}
