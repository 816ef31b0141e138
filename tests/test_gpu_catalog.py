"""The GPU catalog (data/gpus.csv): sources and gaps of every figure, the family-name rule, --strict-names."""

from __future__ import annotations

import csv
import json
from importlib import resources

import pytest

from tuneplan.errors import AmbiguousNameError, InputError, UnknownNameError
from tuneplan.specs.gpu import (
    FIGURE_COLUMNS,
    OPTIONAL_COLUMNS,
    PRECISIONS,
    gpu_assumptions,
    gpu_catalog,
    gpu_families,
    gpu_from_dict,
    parse_figure_sources,
    resolve_gpu,
)

EXAMPLE = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--gpus", "4", "--examples",
           "30000", "--tokens-per-example", "1000", "--epochs", "3", "--micro-batch", "4"]
"""The README's estimate example, without its --gpu."""


def catalog_rows() -> list[dict[str, str]]:
    text = resources.files("tuneplan.data").joinpath("gpus.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def _precision_column(p: str) -> str:
    return "int8_tops" if p == "int8" else f"{p}_tflops"


@pytest.mark.parametrize("row", catalog_rows(), ids=lambda r: r["name"])
def test_every_figure_has_a_source_and_every_gap_is_listed(row: dict[str, str]) -> None:
    sources = parse_figure_sources(row["figure_sources"])
    missing = {m.split("(")[0].strip() for m in row["missing"].split(";") if m.strip()}
    absent = {_precision_column(p.strip()) for p in row["not_in_hardware"].split(";") if p.strip()}
    assert absent <= {_precision_column(p) for p in (*PRECISIONS, "int8")}
    assert set(sources) <= set(FIGURE_COLUMNS), set(sources) - set(FIGURE_COLUMNS)
    assert missing <= set(FIGURE_COLUMNS), missing - set(FIGURE_COLUMNS)
    for col in FIGURE_COLUMNS:
        if row[col].strip():
            float(row[col])
            assert sources.get(col, "").strip(), f"{row['name']}: {col} = {row[col]} has no source"
            assert col not in missing and col not in absent, f"{row['name']}: {col} has a value and is listed empty"
        elif col not in OPTIONAL_COLUMNS:  # an empty cell with a meaning (not measured; a PCIe host link)
            assert col in missing or col in absent, f"{row['name']}: empty {col} not in missing/not_in_hardware"
            assert col not in sources
    assert row["source"].strip()


def test_catalog_covers_the_accelerators_of_mlperf_training_and_the_clouds() -> None:
    wanted = ["V100", "V100-PCIe-16GB", "A100-SXM4-80GB", "A100-PCIe-40GB", "A800", "A10", "A10G", "A40", "T4",
              "L4", "L20", "L40", "L40S", "RTX 6000 Ada", "RTX PRO 6000", "RTX A4000", "RTX A5000", "RTX A6000",
              "RTX 3090", "RTX 4090", "RTX 5090", "H100", "H100 PCIe", "H100 NVL", "H100-SXM5-94GB",
              "H100-SXM5-96GB", "H200", "H200 NVL", "H800", "H20", "B200", "GB200", "B300", "GB300", "MI250X",
              "MI300X", "MI325X", "MI350X", "MI355X", "Gaudi 2", "Gaudi 3", "TPU v5e", "TPU v5p", "TPU v6e"]
    for name in wanted:
        assert resolve_gpu(name).name in gpu_catalog()
    assert len(gpu_catalog()) >= 50


def test_dense_peaks_not_sparse() -> None:
    cat = gpu_catalog()
    assert cat["H100-SXM5-80GB"].tflops("bf16") == 989 and cat["H100-SXM5-80GB"].tflops("fp8") == 1979
    assert cat["L4-24GB"].tflops("bf16") == 121
    assert cat["B300-SXM-288GB"].tflops("fp4") == 15000


@pytest.mark.parametrize("precision", ["fp4", "nvfp4", "mxfp4"])
def test_fp4_precisions_read_the_fp4_column(precision: str) -> None:
    b300, gb200, mi355x = (gpu_catalog()[n] for n in ("B300-SXM-288GB", "GB200", "MI355X-288GB"))
    assert b300.peak_used(precision) == ("fp4", 15000.0)
    assert gb200.tflops(precision) == 10000
    assert mi355x.tflops(precision) == 10100
    h100 = gpu_catalog()["H100-SXM5-80GB"]
    assert h100.peak_used(precision) == ("fp8", 1979.0)  # no fp4 units on Hopper: at its fp8 peak, said
    assert any("has no fp4 units" in a and "fp8 peak" in a for a in gpu_assumptions(h100, precision))


# --- the family rule --------------------------------------------------------------------------

EXPECTED_DEFAULTS = {
    "A100": "A100-SXM4-80GB", "A100-80GB": "A100-SXM4-80GB", "A100 80GB": "A100-SXM4-80GB",
    "NVIDIA A100": "A100-SXM4-80GB", "A100-40GB": "A100-SXM4-40GB", "A100-PCIe": "A100-PCIe-80GB",
    "H100": "H100-SXM5-80GB", "H100-80GB": "H100-SXM5-80GB", "H100 SXM": "H100-SXM5-80GB",
    "H100-94GB": "H100-NVL-94GB", "H200": "H200-SXM-141GB", "A800-80GB": "A800-SXM4-80GB",
    "V100": "V100-SXM2-16GB", "V100-32GB": "V100-SXM2-32GB", "MI300": "MI300X-192GB",
    "RTX PRO 6000": "RTX-PRO-6000-Blackwell-Server-96GB",
}


@pytest.mark.parametrize("name,default", EXPECTED_DEFAULTS.items())
def test_family_names_resolve_to_their_default_with_the_assumption(name: str, default: str) -> None:
    g = resolve_gpu(name)
    assert g.name == default
    assert g.resolved_as.startswith(f"GPU '{name}' read as {default}: ")
    said = gpu_assumptions(g)
    assert said[0] == g.resolved_as + "." and "--strict-names" in said[0]


@pytest.mark.parametrize("family", sorted(gpu_families()))
def test_every_catalog_family_has_a_reason_and_strict_refuses_it(family: str) -> None:
    fam = gpu_families()[family]
    assert fam.default in gpu_catalog() and len(fam.reason) > 20
    g = resolve_gpu(family)
    assert g.name == fam.default and fam.reason in g.resolved_as
    with pytest.raises(InputError) as e:
        resolve_gpu(family, strict=True)
    msg = str(e.value)
    assert e.value.field == "gpu" and "\n" not in msg
    assert msg.startswith(f"gpu: '{family}' names a GPU family (") and "--strict-names" in msg


def test_exact_and_unique_names_are_not_assumptions() -> None:
    for name in ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "B300", "MI355X", "L40", "GB300-288GB", "GB200-186GB",
                 "NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA GeForce RTX 4090"):
        g = resolve_gpu(name, strict=True)
        assert g.resolved_as == ""
    assert resolve_gpu("L40").name == "L40-48GB" and resolve_gpu("L40S").name == "L40S-48GB"
    assert resolve_gpu("GB300-288GB").name == "GB300"


def test_unknown_and_ambiguous_names_are_one_line_errors() -> None:
    with pytest.raises(UnknownNameError) as e:
        resolve_gpu("H100-SXM9")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("gpu: unknown GPU 'H100-SXM9'; closest: ")
    assert "H100-SXM5-80GB" in msg and "--gpu-file" in msg and "--peak-tflops --memory-gib --bandwidth-gbs" in msg
    with pytest.raises(AmbiguousNameError) as e:
        resolve_gpu("RTX 6000")  # a generation apart: no default
    assert set(e.value.candidates) >= {"RTX-6000-Ada-48GB", "RTX-PRO-6000-Blackwell-WS-96GB"}


def test_the_source_defaults_no_longer_map_names_the_rule_covers() -> None:
    from tuneplan.runs.defaults import load_defaults

    defaults = load_defaults()
    for name in ("ms-swift", "ms-swift-2023v1", "peft", "stsxxx-finetune"):
        for written in defaults.source(name).gpu_names:
            with pytest.raises(InputError):
                resolve_gpu(written)  # a mapping is kept only where the catalog's rule cannot resolve


def test_runs_rows_record_the_catalog_default_and_strict_names_refuses(tmp_path) -> None:
    from tuneplan.runs import read_runs

    p = tmp_path / "mine.csv"
    p.write_text("id,model,gpu,gpus,method,seq_len,micro_batch_size,tokens_per_s\n"
                 "r-1,meta-llama/Llama-3.1-8B,A100-80GB,1,lora,512,1,1000\n"
                 "r-2,meta-llama/Llama-3.1-8B,H100-SXM5-80GB,1,lora,512,1,1000\n", encoding="utf-8")
    df = read_runs([p]).df
    assert df["gpu_resolved"].tolist() == ["A100-SXM4-80GB", "H100-SXM5-80GB"]
    assert "gpu=A100-SXM4-80GB(catalog default for 'A100-80GB': the common cloud part" in df["defaults_used"][0]
    assert not any(x.startswith("gpu=") for x in df["defaults_used"][1].split(";"))
    t = read_runs([p], strict_names=True)
    assert t.df["id"].tolist() == ["r-2"]
    assert "names a GPU family" in t.problems[0].message


# --- fill-ins are said ------------------------------------------------------------------------

def test_fill_from_and_missing_power_are_said() -> None:
    g = gpu_catalog()["H100-SXM5-94GB"]
    assert g.filled["bf16_tflops"] == "H100-SXM5-80GB" and g.tflops("bf16") == 989 and g.tdp_w == 700
    assert any("taken from H100-SXM5-80GB" in a and "memory_bandwidth_gbs" in a for a in gpu_assumptions(g))
    tpu = gpu_catalog()["TPU v5e"]
    assert tpu.tdp_w == 0 and any("no source gives its TDP; energy assumes 300 W" in a for a in gpu_assumptions(tpu))
    ada = gpu_catalog()["RTX-6000-Ada-48GB"]
    assert ada.tflops("bf16") == 364.25 and any("derived, not a datasheet figure" in a for a in gpu_assumptions(ada))
    t4 = gpu_catalog()["T4-16GB"]
    assert any("has no bf16 units: bf16 matmuls costed at its fp16 peak" in a for a in gpu_assumptions(t4))
    apu = gpu_catalog()["MI300A-128GB"]
    with pytest.raises(InputError, match="no peak TFLOP/s figure.*--peak-tflops"):
        apu.tflops("bf16")


def test_energy_objective_leaves_out_gpus_without_power() -> None:
    from tuneplan.plan.search import gpus_with_power

    nopower = gpu_from_dict({"name": "mystery", "peak_tflops": 100, "memory_gib": 24, "memory_bandwidth_gbs": 900})
    a100 = gpu_catalog()["A100-SXM4-80GB"]
    notes: list[str] = []
    assert gpus_with_power([a100, nopower], "energy", notes) == [a100]
    assert "mystery left out: no source gives their power (TDP)" in notes[0]
    assert gpus_with_power([a100, nopower], "cheapest", []) == [a100, nopower]
    with pytest.raises(InputError, match="objective: energy: no source gives the power"):
        gpus_with_power([nopower], "energy", [])


def test_gpus_json_shows_missing_and_sources(capsys) -> None:
    from tuneplan.cli import main

    assert main(["gpus", "--json"]) == 0
    rows = {g["name"]: g for g in json.loads(capsys.readouterr().out)}
    assert "tdp_w (Google does not publish TPU power)" in rows["TPU v5e"]["missing"]
    assert rows["A100-SXM4-80GB"]["not_in_hardware"] == ["fp8", "fp4"]
    assert rows["B300-SXM-288GB"]["peak_tflops"]["fp4"] == 15000
    assert "stas00" in rows["B300-SXM-288GB"]["sources"]["fp4_tflops"]


# --- the CLI and the API ----------------------------------------------------------------------

def _estimate_json(capsys, gpu: str) -> dict:
    from tuneplan.cli import main

    assert main([*EXAMPLE, "--gpu", gpu, "--json", "--interval", "0"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_estimate_family_name_says_the_variant(capsys) -> None:
    d = _estimate_json(capsys, "A100-80GB")
    assert d["gpu"] == "A100-SXM4-80GB"
    assert any(a.startswith("GPU 'A100-80GB' read as A100-SXM4-80GB: the common cloud part") for a in d["assumptions"])


@pytest.mark.parametrize("gpu,name,power", [("B300", "B300-SXM-288GB", 1000), ("MI355X", "MI355X-288GB", 1400)])
def test_cli_estimate_new_parts_answer_with_assumptions(capsys, gpu: str, name: str, power: int) -> None:
    d = _estimate_json(capsys, gpu)
    assert d["gpu"] == name and d["wall_clock_s"] > 0 and d["fits"]
    line = next(a for a in d["assumptions"] if a.startswith(f"GPU {name}: "))
    assert "dense bf16 peak" in line and f"{power} W TDP" in line and "tuneplan gpus --json" in line


@pytest.mark.parametrize("command", [
    [*EXAMPLE, "--gpu", "A100-80GB"],
    ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "H100", "--examples", "1000",
     "--tokens-per-example", "512", "--rate", "2"],
    ["curve", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100", "--seq-len", "512"],
])
def test_strict_names_exits_2_with_one_line(capsys, command: list[str]) -> None:
    from tuneplan.cli import main

    assert main([*command, "--strict-names"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "names a GPU family" in err and "--strict-names" in err


def test_cli_predict_strict_names_refuses_family_rows(tmp_path, capsys) -> None:
    from tuneplan.cli import main

    p = tmp_path / "mine.csv"
    p.write_text("id,model,gpu,gpus,method,seq_len,micro_batch_size,tokens_per_s\n"
                 "r-1,meta-llama/Llama-3.1-8B,A100-80GB,1,lora,512,1,1000\n", encoding="utf-8")
    out = tmp_path / "pred.csv"
    assert main(["predict", "--runs", str(p), "--out", str(out), "--interval", "0"]) == 0
    assert "catalog default for 'A100-80GB'" in out.read_text()
    assert main(["predict", "--runs", str(p), "--out", str(out), "--interval", "0", "--strict", "--strict-names", "--force"]) == 2
    err = capsys.readouterr().err
    assert "names a GPU family" in err


def test_api_strict() -> None:
    import tuneplan

    kw = dict(method="lora", examples=1000, tokens_per_example=256, interval=None)
    r = tuneplan.estimate("meta-llama/Llama-3.1-8B", "H100", **kw)
    assert r.gpu == "H100-SXM5-80GB" and any("read as H100-SXM5-80GB" in a for a in r.assumptions)
    with pytest.raises(InputError, match="names a GPU family"):
        tuneplan.estimate("meta-llama/Llama-3.1-8B", "H100", strict=True, **kw)


def test_web_estimate_shows_the_family_assumption() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    with TestClient(create_app(warm_up=False)) as c:
        r = c.post("/api/estimate", json={"model": "meta-llama/Llama-3.1-8B", "gpu": "A100-80GB", "method": "lora",
                                          "examples": 1000, "tokens_per_example": 512})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["gpu"] == "A100-SXM4-80GB"
    assert any(a.startswith("GPU 'A100-80GB' read as A100-SXM4-80GB") for a in d["assumptions"])


def test_gpus_table_marks_gaps_and_fill_ins() -> None:
    from tuneplan.commands.catalogs import _fig

    cat = gpu_catalog()
    assert _fig(cat["TPU v5e"], "tdp_w", "") == "?"  # no source gives it
    assert _fig(cat["A100-SXM4-80GB"], "fp8_tflops", "") == "-"  # no fp8 units on Ampere
    assert _fig(cat["A800-SXM4-80GB"], "tdp_w", "400 W") == "400 W*"  # from A100-SXM4-80GB
    assert _fig(cat["B300-SXM-288GB"], "fp4_tflops", "15000") == "15000"


def test_plan_notes_say_the_variant_and_the_old_price() -> None:
    import tuneplan

    res = tuneplan.plan_run("meta-llama/Llama-3.1-8B", gpus=["A100"], methods=["lora"], max_gpus=1, examples=1000,
                        tokens_per_example=256, interval=None)
    assert res.gpus == ["A100-SXM4-80GB"]
    assert any(n.startswith("GPU 'A100' read as A100-SXM4-80GB") for n in res.notes)
    assert any("years old" in n for n in res.notes)  # the default A100 price is Lambda's of 2023-02-01
    assert any(n.startswith("GPU 'A100' read as") for n in res.to_dict()["notes"])
