"""`validate`'s interval coverage by group (GPU family, scale, stage, MoE) and for memory: a table of
interval rows whose coverage is counted by hand, the group keys of catalog GPUs, and the structure
of the report on the shared runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from tests.conftest import reference_dir

from tuneplan.learn.validate import GROUPINGS, _memory_note, coverage_by_group, gpu_family, scale_bucket
from tuneplan.specs.gpu import gpu_catalog


def _row(metric, source, fam, scale, stage, moe, measured, low, high):
    return {"metric": metric, "source": source, "gpu_family": fam, "scale": scale, "stage": stage, "moe": moe,
            "measured": measured, "low": low, "high": high}


HITS = pd.DataFrame([
    _row("throughput", "s1", "H100", "1", "sft", "dense", 10.0, 8.0, 12.0),  # inside
    _row("throughput", "s1", "H100", "2-8", "sft", "dense", 13.0, 8.0, 12.0),  # above the high bound
    _row("throughput", "s2", "A100", "2-8", "dpo", "moe", 5.0, 6.0, 9.0),  # below the low bound
    _row("throughput", "s2", "A100", "65+", "dpo", "moe", 6.0, 6.0, 9.0),  # on the low bound: inside
    _row("memory", "s1", "H100", "1", "sft", "dense", 20.0, 10.0, 18.0),  # above
])


def test_coverage_by_group_counted_by_hand():
    got = {(r["metric"], r["group"], r["value"]): (r["rows"], r["coverage"], r["above"], r["below"])
           for r in coverage_by_group(HITS)}
    assert got[("throughput", "all", "all")] == (4, 0.5, 0.25, 0.25)
    assert got[("throughput", "source", "s1")] == (2, 0.5, 0.5, 0.0)
    assert got[("throughput", "source", "s2")] == (2, 0.5, 0.0, 0.5)
    assert got[("throughput", "gpu_family", "H100")] == (2, 0.5, 0.5, 0.0)
    assert got[("throughput", "scale", "1")] == (1, 1.0, 0.0, 0.0)
    assert got[("throughput", "scale", "2-8")] == (2, 0.0, 0.5, 0.5)
    assert got[("throughput", "scale", "65+")] == (1, 1.0, 0.0, 0.0)
    assert got[("throughput", "stage", "dpo")] == (2, 0.5, 0.0, 0.5)
    assert got[("throughput", "moe", "dense")] == (2, 0.5, 0.5, 0.0)
    assert got[("memory", "all", "all")] == (1, 0.0, 1.0, 0.0)
    assert ("memory", "stage", "dpo") not in got
    scales = [r["value"] for r in coverage_by_group(HITS) if r["metric"] == "throughput" and r["group"] == "scale"]
    assert scales == ["1", "2-8", "65+"]  # size order, not name order
    assert coverage_by_group(pd.DataFrame()) == []


def test_memory_note_only_without_memory_rows():
    from tuneplan.learn.measured import TrainingSet

    thr = HITS[HITS["metric"] == "throughput"].to_dict("records")
    ts = TrainingSet(df=pd.DataFrame(), configs=[], tokens_per_s=pd.Series([1.0]).to_numpy(),
                     peak_mem_gib=pd.Series([3.0, float("nan")]).to_numpy(), mem_kind=[], is_oom=None,
                     source=None, skipped=[])
    note = _memory_note(thr, ts)
    assert len(note) == 1 and "memory interval coverage not reported" in note[0] and "the 1 rows" in note[0]
    assert _memory_note(HITS.to_dict("records"), ts) == []


@pytest.mark.parametrize(("name", "family"), [
    ("A100-SXM4-80GB", "A100"), ("A800-SXM4-80GB", "A100"), ("H100-SXM5-80GB", "H100"), ("H800-SXM5-80GB", "H100"),
    ("H200-SXM-141GB", "H200"), ("H20", "H20"), ("B200-180GB", "B200"), ("GB200", "GB200"), ("GB300", "GB300"),
    ("MI300X-192GB", "MI300"), ("MI325X-256GB", "MI300"), ("MI355X-288GB", "MI350"), ("Gaudi3", "Gaudi"),
    ("RTX4090-24GB", "consumer"), ("RTX3090-24GB", "consumer"), ("L40S-48GB", "L40S"), ("TPU v5e", "TPU"),
])
def test_gpu_family_of_catalog_parts(name, family):
    assert gpu_family(gpu_catalog()[name]) == family


def test_scale_buckets():
    assert [scale_bucket(n) for n in (1, 2, 8, 9, 64, 65, 512)] == ["1", "2-8", "2-8", "9-64", "9-64", "65+", "65+"]


@pytest.mark.skipif(reference_dir() is None, reason="the shared reference runs are not beside the repository")
def test_validate_json_carries_coverage_by_group_on_shared_runs(capsys):
    from tuneplan.cli import main

    assert main(["validate", "--split", "random", "--learners", "tuneplan", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    groups = d["coverage_by_group"]
    assert groups
    for metric in {g["metric"] for g in groups}:
        mine = [g for g in groups if g["metric"] == metric]
        (total,) = [g for g in mine if g["group"] == "all"]
        for grouping in GROUPINGS:  # every row falls in exactly one value of each grouping
            assert sum(g["rows"] for g in mine if g["group"] == grouping) == total["rows"]
        for g in mine:
            assert g["rows"] > 0 and g["coverage"] + g["above"] + g["below"] == pytest.approx(1.0)
    (thr,) = [g for g in groups if g["metric"] == "throughput" and g["group"] == "all"]
    assert thr["coverage"] == pytest.approx(d["coverage"]["tuneplan"])
    for g in groups:
        if g["metric"] == "throughput" and g["group"] == "source":
            assert g["coverage"] == pytest.approx(d["coverage"][f"tuneplan source={g['value']}"])
    if not any(g["metric"] == "memory" for g in groups):
        assert any("memory interval coverage not reported" in m for m in d["messages"])
