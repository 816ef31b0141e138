"""The default calibration's twin (data/calibration/default.marshal): in sync with default.json, read as
the JSON reads, and ignored (the JSON parsed) when it no longer matches it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

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


def test_shipped_forest_tables_are_the_compiled_ones(calibrated_estimator):
    from tuneplan.estimators.base import get_estimator
    from tuneplan.plan import fastforest as ff

    # the shipped default's forests (none: fitted on several sources it keeps no residual trees,
    # learners.residual_fit.RESIDUAL_MAX_SOURCES) are the ones default.tables holds
    assert set(ff.shipped_tables()) == {f.key for f in ff.estimator_forests(get_estimator("tuneplan", None))}, (
        "default.tables is stale: run python scripts/build_data_twins.py")
    # a calibration with trees (a user's own stack): its rendered tables read back as the compiled ones
    forests = ff.estimator_forests(calibrated_estimator)
    tables = ff.read_tables(ff.render_tables(calibrated_estimator))
    assert forests and set(tables) == {f.key for f in forests}
    for f in forests:
        shipped = [ff._unpack(t) for t in tables[f.key]]
        compiled = [f._compile(root, internal) for root, internal in f.trees]
        assert len(shipped) == len(compiled)
        for a, b in zip(shipped, compiled, strict=True):
            assert (a is None) == (b is None)
            if a is None:
                continue
            assert [j for j, _ in a[0]] == [j for j, _ in b[0]]
            for (_, x), (_, y) in zip(a[0], b[0], strict=True):
                assert x.dtype == y.dtype and np.array_equal(x, y)
            assert a[1].dtype == b[1].dtype and np.array_equal(a[1], b[1], equal_nan=True)


def test_tables_of_another_forest_or_a_damaged_file_are_not_used(tmp_path, monkeypatch, calibrated_estimator):
    from tuneplan import data
    from tuneplan.plan import fastforest as ff

    assert ff.read_tables(b"") == {} and ff.read_tables(b"junk") == {}
    assert ff.read_tables(ff.TABLES_MAGIC + b"not zlib") == {}
    est = calibrated_estimator
    blob = ff.render_tables(est)
    assert set(ff.read_tables(blob)) == {f.key for f in ff.estimator_forests(est)}
    (tmp_path / "calibration").mkdir()
    monkeypatch.setattr(data, "DIR", str(tmp_path))
    ff.shipped_tables.cache_clear()
    try:
        assert ff.shipped_tables() == {}  # no file: every forest compiles its own
        forest = ff.estimator_forests(est)[0]
        fresh = ff.FastForest(forest)
        fresh.key = "another forest"
        assert len(fresh.tables()) == len(fresh.trees)
        ff.refresh_shipped_tables(str(tmp_path / "elsewhere.json"), est)  # not the shipped default: nothing
        assert not (tmp_path / "calibration" / ff.TABLES_NAME).exists()
        (tmp_path / "calibration" / "default.json").write_text("{}", encoding="utf-8")
        ff.refresh_shipped_tables(str(tmp_path / "calibration" / "default.json"), est)
        assert set(ff.shipped_tables()) == {f.key for f in ff.estimator_forests(est)}
    finally:
        ff.shipped_tables.cache_clear()
