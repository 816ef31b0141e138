"""The JSON twins of shipped YAML data files: in sync with their YAML, read as the YAML reads, and
ignored (the YAML parsed) when they no longer match it."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from tuneplan.specs import datafiles
from tuneplan.specs.datafiles import TWINS, load_yaml_data, render_twin, twin_name

REPO = Path(__file__).resolve().parents[1]


def test_twins_are_in_sync_with_their_yaml():
    data = resources.files("tuneplan.data")
    for name in TWINS:
        text = data.joinpath(name).read_text(encoding="utf-8")
        assert data.joinpath(twin_name(name)).read_text(encoding="utf-8") == render_twin(name, text), (
            f"{twin_name(name)} is stale: run python scripts/build_data_twins.py")
        assert load_yaml_data(name) == yaml.safe_load(text)
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "build_data_twins.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_stale_twin_is_ignored(tmp_path, monkeypatch):
    (tmp_path / "frameworks.yaml").write_text("frameworks:\n  generic: {a: 1}\n", encoding="utf-8")
    (tmp_path / "frameworks.json").write_text(render_twin("frameworks.yaml", "frameworks:\n  generic: {a: 2}\n"),
                                              encoding="utf-8")
    monkeypatch.setattr(datafiles.shipped, "DIR", str(tmp_path))
    assert load_yaml_data("frameworks.yaml") == {"frameworks": {"generic": {"a": 1}}}
    (tmp_path / "frameworks.json").write_text("{not json", encoding="utf-8")
    assert load_yaml_data("frameworks.yaml") == {"frameworks": {"generic": {"a": 1}}}
    (tmp_path / "frameworks.json").write_text(render_twin("frameworks.yaml", "frameworks:\n  generic: {a: 1}\n")
                                              .replace('"a": 1', '"a": 3'), encoding="utf-8")
    assert load_yaml_data("frameworks.yaml") == {"frameworks": {"generic": {"a": 3}}}  # the twin, when it matches


def test_twin_keeps_the_order_of_the_yaml():
    """Mappings keep the file's order (the --framework choices are listed as frameworks.yaml lists them)."""
    text = resources.files("tuneplan.data").joinpath("frameworks.yaml").read_text(encoding="utf-8")
    assert list(load_yaml_data("frameworks.yaml")["frameworks"]) == list(yaml.safe_load(text)["frameworks"])


def test_the_gpu_catalogs_csv_twin_holds_its_rows_and_a_stale_one_is_ignored(tmp_path, monkeypatch):
    from tuneplan.specs.datafiles import CSV_TWINS, load_csv_rows, parse_csv_text, render_csv_twin

    data = resources.files("tuneplan.data")
    for name in CSV_TWINS:
        text = data.joinpath(name).read_text(encoding="utf-8")
        assert data.joinpath(twin_name(name)).read_text(encoding="utf-8") == render_csv_twin(name, text), (
            f"{twin_name(name)} is stale: run python scripts/build_data_twins.py")
        assert load_csv_rows(name) == parse_csv_text(text) and len(load_csv_rows(name)) > 40
    (tmp_path / "gpus.csv").write_text("name,memory_gib\nX,80\n", encoding="utf-8")
    (tmp_path / "gpus.json").write_text(render_csv_twin("gpus.csv", "name,memory_gib\nX,40\n"), encoding="utf-8")
    monkeypatch.setattr(datafiles.shipped, "DIR", str(tmp_path))
    assert load_csv_rows("gpus.csv") == [{"name": "X", "memory_gib": "80"}]  # the CSV: the twin is of another text
    with pytest.raises(ValueError):
        render_csv_twin("gpus.csv", "name,memory_gib\nX,80,extra\n")
