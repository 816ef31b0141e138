"""callback -> calibrate -> predict for a model outside the catalog (issue 34 point 6): a tiny random
Llama trained on the CPU, recorded by TuneplanCallback under a name no catalog knows and under no name,
read back from the rows' stored model_config_json."""

from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from test_callback import _train  # noqa: E402
from tuneplan.cli import main  # noqa: E402
from tuneplan.integrations.transformers import TuneplanCallback  # noqa: E402

LOCAL_CPU = {"name": "local-cpu", "peak_tflops": {"fp32": 0.2, "bf16": 0.2}, "memory_gib": 16,
             "memory_bandwidth_gbs": 20}


def test_callback_rows_calibrate_and_predict(tmp_path, monkeypatch, capsys):
    from tuneplan.profile.device import save_entry
    from tuneplan.specs.gpu import gpu_from_dict

    monkeypatch.setenv("TUNEPLAN_HOME", str(tmp_path / "home"))
    save_entry(dict(LOCAL_CPU))  # what `tuneplan probe` saves for this machine
    runs = tmp_path / "runs.csv"
    cpu = gpu_from_dict(dict(LOCAL_CPU))
    _train(tmp_path, TuneplanCallback(out=runs, warmup_steps=1, gpu=cpu, model_name="tiny-llama", predict=False),
           lora=True, steps=3)
    rows = list(csv.DictReader(runs.open()))
    assert len(rows) == 1 and rows[0]["model"] == "tiny-llama"  # no catalog knows the name
    # a model built from a config with no name: the callback writes "unknown" (one Trainer run is enough)
    rows.append({**rows[0], "id": rows[0]["id"] + "-unnamed", "model": "unknown"})
    with runs.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert all(json.loads(r["model_config_json"])["hidden_size"] == 64 for r in rows)

    calib = tmp_path / "c.json"
    assert main(["calibrate", "--runs", str(runs), "--out", str(calib)]) == 0
    captured = capsys.readouterr()
    assert "row skipped" not in captured.err and "2 throughput rows" in captured.out + captured.err

    pred = tmp_path / "p.csv"
    assert main(["predict", "--runs", str(runs), "--out", str(pred), "--calibration", str(calib)]) == 0
    out = list(csv.DictReader(pred.open()))
    assert len(out) == 2 and all(not r["error"] for r in out)
    assert all(float(r["pred_tokens_per_s"]) > 0 and float(r["pred_peak_mem_gib"]) > 0 for r in out)


def test_stored_config_decides_the_model_whatever_the_name():
    from conftest import tiny_llama_config
    from tuneplan.specs.catalog import resolve_run_model

    cfg = json.dumps(tiny_llama_config())
    spec = resolve_run_model("TinyLlama", "", config_json=cfg)  # a catalog-like name: the stored config wins
    assert spec.hidden_size == 64 and spec.name == "TinyLlama"
    from tuneplan.errors import InputError

    with pytest.raises(InputError, match="model_config_json"):
        resolve_run_model("tiny", "", config_json="{not json")
