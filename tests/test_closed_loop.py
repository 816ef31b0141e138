"""The loop closed on this machine: probe the CPU, profile a tiny Llama-style model, calibrate on those
runs, predict a configuration that was not measured. This checks that every step runs and answers; how
accurate the loop is, judged on tens of measured configurations, is benchmarks/closed_loop.py (run by hand)."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tuneplan.cli import main  # noqa: E402

OVERRIDE = "hidden_size=64,intermediate_size=128,vocab_size=512,num_attention_heads=4,num_key_value_heads=2"
COMMON = ["--model", "meta-llama/Llama-3.2-1B", "--config-override", OVERRIDE, "--steps", "2", "--warmup", "1",
          "--threads", "1", "--no-progress"]


def test_probe_profile_calibrate_predict_unmeasured(tmp_path, capsys):
    train, test = tmp_path / "train.csv", tmp_path / "test.csv"
    assert main(["probe", "--quick"]) == 0
    assert main(["profile", *COMMON, "--layers", "2", "--method", "full,lora", "--seq-len", "32,64",
                 "--micro-batch", "1", "--out", str(train)]) == 0
    assert main(["profile", *COMMON, "--layers", "3", "--method", "lora", "--seq-len", "48",
                 "--micro-batch", "2", "--out", str(test)]) == 0
    rows = pd.read_csv(train)
    assert len(rows) == 4 and (rows["status"] == "ok").all() and (rows["gpu"] == "local-cpu").all()
    assert (rows["tokens_per_s"] > 0).all()
    cal = tmp_path / "local.json"
    assert main(["calibrate", "--runs", str(train), "--out", str(cal)]) == 0
    err = capsys.readouterr().err
    assert "starting from the shipped calibration" in err  # 4 runs adapt the shipped one
    pred_path = tmp_path / "pred.csv"
    assert main(["predict", "--runs", str(test), "--calibration", str(cal), "--out", str(pred_path)]) == 0
    pred = pd.read_csv(pred_path)
    assert len(pred) == 1 and pred["error"].isna().all(), pred["error"].tolist()
    assert pred["pred_defaults_used"].str.contains("layers=").all()  # the truncation to 3 layers honoured
    assert (pred["pred_tokens_per_s"] > 0).all() and (pred["pred_peak_mem_gib"] > 0).all()
