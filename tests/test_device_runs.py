"""tuneplan's own GPU measurements (reference/runs) and the script that takes them
(benchmarks/device_profile.py): the rows load as runs with their device, OOM rows are kept, and the
script's code path runs end to end (its --smoke mode, on this CPU)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "reference" / "runs" / "tuneplan-h200.csv"
FACTS = ROOT / "reference" / "devices" / "h200-2026-11-30.json"


def test_h200_rows_are_measured_runs_with_their_device_facts():
    from tuneplan.runs.io import read_runs

    rows = list(csv.DictReader(H200.open()))
    assert len(rows) == 37 and len({r["id"] for r in rows}) == 37
    assert {r["gpu"] for r in rows} == {"H200-SXM-141GB"} and {r["device_name"] for r in rows} == {"NVIDIA H200"}
    assert {r["source"] for r in rows} == {"tuneplan-h200"}
    ok = [r for r in rows if r["status"] == "ok"]
    oom = [r for r in rows if r["status"] == "oom"]
    assert len(ok) == 32 and len(oom) == 5
    for r in ok:  # tokens/s is what the timed steps measured: tokens per step over the median step
        tokens = int(r["micro_batch_size"]) * int(r["grad_accum"]) * int(r["seq_len"])
        assert float(r["tokens_per_s"]) == pytest.approx(tokens / float(r["step_time_s"]), rel=1e-4)
        assert 0 < float(r["peak_mem_gib"]) < 141
    facts = json.loads(FACTS.read_text())
    for call in facts.values():
        assert call["device"]["gpu_name"] == "NVIDIA H200" and call["device"]["compute_capability"] == "9.0"
        assert 700 < call["probe"]["peak_tflops"]["bf16"] < 990  # achievable, under the datasheet's dense peak

    loaded = read_runs([H200])
    assert len(loaded.df) == 37 and not loaded.problems
    assert loaded.df["gpu_resolved"].eq("H200-SXM-141GB").all()
    assert int(loaded.df["is_oom"].sum()) == 5  # failed runs are kept: they train the fit verdict


def test_device_profile_script_smoke(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    spec = importlib.util.spec_from_file_location("device_profile", ROOT / "benchmarks" / "device_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out-dir", str(tmp_path), "--smoke", "--deadline", "120"]) == 0
    facts = json.loads((tmp_path / "device.json").read_text())
    assert facts["torch"] and "cpu_count" in facts
    assert "peak_tflops" in (tmp_path / "probe.yaml").read_text()
    rows = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [r["method"] for r in rows] == ["lora", "dora", "full", "full"]
    assert all(r["status"] == "ok" and float(r["tokens_per_s"]) > 0 for r in rows)
    log = (tmp_path / "log.txt").read_text()
    assert "skip never fits" in log  # an item whose cost does not fit the time left is skipped, and said
