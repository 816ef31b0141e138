"""Shipped YAML data files read without a YAML parser at start-up: each has a compact JSON twin
(`data/<stem>.json`) holding the parsed content and the CRC-32 of the YAML text it was generated from;
the GPU catalog's CSV likewise (its rows as csv.DictReader reads them, without the csv module).
A twin that does not match its YAML (edited since) is ignored and the YAML parsed, so a stale twin
costs speed, never a wrong figure; `python scripts/build_data_twins.py` regenerates the twins and
tests/test_datafiles.py checks that they are in sync."""

from __future__ import annotations

import json
import zlib
from typing import Any

from tuneplan import data as shipped

TWINS = ("frameworks.yaml", "source_defaults.yaml")
"""The YAML files read on every estimate (frameworks) or every runs file read (source defaults) that
have a JSON twin."""
TWIN_FORMAT = "tuneplan-yaml-twin"
CSV_TWINS = ("gpus.csv",)
"""The CSV files read on every estimate that have a JSON twin (their rows)."""


def twin_name(name: str) -> str:
    return name.rsplit(".", 1)[0] + ".json"


def parse_yaml_text(text: str) -> Any:
    """YAML text parsed safely (libyaml's loader when built)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def render_twin(name: str, text: str) -> str:
    """The JSON twin of a YAML file's text, keys in the file's order (deterministic: regenerating is byte for
    byte)."""
    return json.dumps({"format": TWIN_FORMAT, "source": name, "crc32": zlib.crc32(text.encode("utf-8")),
                       "data": parse_yaml_text(text)}, indent=1, ensure_ascii=False) + "\n"


def parse_csv_text(text: str) -> list[dict[str, str]]:
    """The rows of CSV text, as csv.DictReader gives them."""
    import csv

    return list(csv.DictReader(text.splitlines()))


def render_csv_twin(name: str, text: str) -> str:
    """The JSON twin of a CSV file's text: its rows (every row as long as the header: a longer or shorter
    one has no JSON form of DictReader's None key or values, so it is refused here)."""
    rows = parse_csv_text(text)
    for i, r in enumerate(rows, start=2):
        if None in r or None in r.values():
            raise ValueError(f"{name} row {i}: not as many fields as the header")
    return json.dumps({"format": TWIN_FORMAT, "source": name, "crc32": zlib.crc32(text.encode("utf-8")),
                       "data": rows}, indent=1, ensure_ascii=False) + "\n"


def _twin_data(name: str, text: str) -> tuple[bool, Any]:
    """(True, content) from the JSON twin of `name` when it was generated from this very text."""
    try:
        twin = json.loads(shipped.read_text(twin_name(name)))
    except (OSError, ValueError):
        return False, None
    if (isinstance(twin, dict) and twin.get("format") == TWIN_FORMAT
            and twin.get("crc32") == zlib.crc32(text.encode("utf-8"))):
        return True, twin["data"]
    return False, None


def load_yaml_data(name: str) -> Any:
    """The content of the shipped `data/<name>`: from its JSON twin when that was generated from this
    very text, else parsed from the YAML."""
    text = shipped.read_text(name)
    if name in TWINS:
        ok, data = _twin_data(name, text)
        if ok:
            return data
    return parse_yaml_text(text)


def load_csv_rows(name: str) -> list[dict[str, str]]:
    """The rows of the shipped `data/<name>` CSV: from its JSON twin when that was generated from this
    very text, else parsed."""
    text = shipped.read_text(name)
    if name in CSV_TWINS:
        ok, data = _twin_data(name, text)
        if ok:
            return data
    return parse_csv_text(text)
