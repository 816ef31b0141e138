"""The default calibration's twin (data/calibration/default.marshal): in sync with default.json, read as
the JSON reads, and ignored (the JSON parsed) when it no longer matches it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tuneplan.estimators import calibration as cal_mod
from tuneplan.estimators.calibration import TWIN_NAME, read_twin, render_twin

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "src" / "tuneplan" / "data" / "calibration"


def test_twin_is_in_sync_with_the_default_calibration():
    text = (FOLDER / "default.json").read_text(encoding="utf-8")
    doc = read_twin((FOLDER / TWIN_NAME).read_bytes(), text)
    assert doc is not None, "default.marshal is stale: run python scripts/build_data_twins.py"
    assert doc == json.loads(text)
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "build_data_twins.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_twin_document_is_the_json_document_value_for_value():
    """Types too (an int stays an int, a float a float): the estimator built from it is the JSON's."""
    text = json.dumps({"a": [1, 1.0, None, True, "x"], "b": {"c": [0.1, -2.5e-300]}}, indent=1)
    doc = read_twin(render_twin(text), text)
    assert doc == json.loads(text)
    assert [type(v) for v in doc["a"]] == [int, float, type(None), bool, str]


def test_a_stale_or_damaged_twin_is_ignored():
    text = json.dumps({"a": 1})
    twin = render_twin(text)
    assert read_twin(twin, text) == {"a": 1}
    assert read_twin(twin, json.dumps({"a": 2})) is None  # made from another text
    assert read_twin(twin[:-3], text) is None  # cut short
    assert read_twin(b"", text) is None
    assert read_twin(b"not a twin at all", text) is None
    assert read_twin(twin.replace(b"tuneplan-calibration-twin 1", b"tuneplan-calibration-twin 9"), text) is None


def test_default_calibration_reads_the_json_when_the_twin_is_stale(tmp_path, monkeypatch):
    from tuneplan import data

    folder = tmp_path / "calibration"
    folder.mkdir()
    real = (FOLDER / "default.json").read_text(encoding="utf-8")
    (folder / "default.json").write_text(real, encoding="utf-8")
    edited = json.loads(real)
    edited["notes"] = ["edited"]
    (folder / TWIN_NAME).write_bytes(render_twin(json.dumps(edited)))  # a twin of another text
    monkeypatch.setattr(data, "DIR", str(tmp_path))
    cal_mod.default_calibration.cache_clear()
    try:
        assert cal_mod.default_calibration().notes == json.loads(real)["notes"]
        (folder / TWIN_NAME).write_bytes(render_twin(real))
        cal_mod.default_calibration.cache_clear()
        assert cal_mod.default_calibration().payload == json.loads(real)["payload"]
        (folder / TWIN_NAME).unlink()
        cal_mod.default_calibration.cache_clear()
        assert cal_mod.default_calibration().payload == json.loads(real)["payload"]
    finally:
        cal_mod.default_calibration.cache_clear()


def test_saving_over_the_shipped_default_writes_its_twin(tmp_path, monkeypatch):
    from tuneplan import data
    from tuneplan.estimators.calibration import Calibration

    folder = tmp_path / "calibration"
    folder.mkdir()
    monkeypatch.setattr(data, "DIR", str(tmp_path))
    cal = Calibration(learner="tuneplan", payload={"constants": {}}, fingerprint="f", n_rows={"throughput": 1},
                      sources=["s"])
    cal.save(tmp_path / "elsewhere.json")
    assert not (folder / TWIN_NAME).exists()  # another file: no twin
    cal.save(folder / "default.json")
    text = (folder / "default.json").read_text(encoding="utf-8")
    assert read_twin((folder / TWIN_NAME).read_bytes(), text) == json.loads(text)
