"""tuneplan.runs: reading (reference schema, LLMFineTuningBench, profiler output), problems with
file:line, strict mode, duplicates, OOM rows, catalog names, defaults, the append-only writer, and the
shared reference set."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from tuneplan.errors import DataFileError, TuneplanError
from tuneplan.runs import (
    ADDED_COLUMNS,
    REFERENCE_COLUMNS,
    Problem,
    RunTable,
    format_summary,
    load_defaults,
    load_reference_runs,
    read_runs,
    reference_runs_dir,
    summarise,
    write_runs,
)
from tuneplan.runs.defaults import parse_defaults
from tuneplan.runs.normalise import parallel_degrees

LLAMA = "meta-llama/Llama-2-7b-hf"


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


def ref_file(path: Path, rows: list[dict[str, object]]) -> Path:
    """A reference-schema CSV with the given cells (others empty)."""
    return write_csv(path, list(REFERENCE_COLUMNS),
                     [[r.get(c, "") for c in REFERENCE_COLUMNS] for r in rows])


def base(**kw: object) -> dict[str, object]:
    row: dict[str, object] = {"model": "Llama-2-7b-hf", "model_hf_id": LLAMA, "method": "lora",
                              "lora_rank": 8, "lora_targets": "q,v", "precision": "bf16",
                              "gpu": "A100-SXM4-80GB", "gpus": 1, "nodes": 1, "micro_batch_size": 4,
                              "grad_accum": 2, "seq_len": 1024}
    row.update(kw)
    return row


# --- problems ---------------------------------------------------------------------------------------

def test_problem_str() -> None:
    assert str(Problem("a.csv", 7, "bad")) == "a.csv:7: bad"
    assert str(Problem("a.csv", None, "bad")) == "a.csv: bad"


# --- reference schema -------------------------------------------------------------------------------

def test_reference_schema_types_lines_names_and_derivations(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "mine.csv", [
        base(id="mine-1", tokens_per_s_per_gpu=1000, gpus=2, gpu="NVIDIA-A100-SXM4-80GB"),
        base(id="mine-2", samples_per_s=2.0, notes="line one\nline two\nline three",
             peak_mem_gib=20.5, mem_kind="allocated"),
        base(id="mine-3", tokens_per_s=3000, peak_mem_gib=30),
    ])
    t = read_runs([p])
    assert t.problems == []
    assert len(t) == 3
    df = t.df
    assert list(df.columns[: len(REFERENCE_COLUMNS)]) == list(REFERENCE_COLUMNS)
    assert all(c in df.columns for c in ADDED_COLUMNS)
    assert df["tokens_per_s"].dtype == float and df["gpus"].dtype == float
    # header = line 1; the quoted notes of mine-2 span lines 3-5, so mine-3 starts on line 6
    assert df["line"].tolist() == [2, 3, 6]
    assert set(df["file"]) == {str(p)}
    assert df["source"].tolist() == ["mine"] * 3  # the file stem
    assert df["gpu_resolved"].tolist() == ["A100-SXM4-80GB"] * 3
    assert df["model_resolved"].tolist() == [LLAMA] * 3
    r1, r2, r3 = (df.iloc[i] for i in range(3))
    assert r1["tokens_per_s"] == pytest.approx(2000)
    assert "tokens_per_s=2000(derived tokens_per_s_per_gpu*gpus)" in r1["defaults_used"]
    assert r1["global_batch_size"] == 16  # 4 x 2 x dp 2
    assert r2["step_time_s"] == pytest.approx(8 / 2.0)  # global 8 samples at 2 samples/s
    assert pd.isna(r2["tokens_per_s"])  # samples vary in length: no tokens without avg_tokens_per_sample
    assert r3["mem_kind"] == "unknown" and "mem_kind=unknown(not stated)" in r3["defaults_used"]
    assert df["usable_throughput"].all()
    assert df["usable_memory"].tolist() == [False, True, True]
    assert df["status"].tolist() == ["ok"] * 3
    assert df["fits"].tolist() == [True] * 3


def test_avg_tokens_per_sample_gives_tokens(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "x.csv", [base(id="x-1", samples_per_s=2.0, avg_tokens_per_sample=500)])
    r = read_runs([p]).df.iloc[0]
    assert r["tokens_per_s"] == pytest.approx(1000)
    assert "derived samples_per_s*avg_tokens_per_sample" in r["defaults_used"]


def test_parallel_degrees_and_dp(tmp_path: Path) -> None:
    assert parallel_degrees("ddp+tp4+pp8+cp2") == {"tp": 4, "pp": 8, "cp": 2, "sp": 1, "ep": 1}
    p = ref_file(tmp_path / "x.csv", [base(id="x-1", gpus=64, sharding="ddp+tp4+pp2", micro_batch_size=1,
                                           grad_accum=4, tokens_per_s=1e5)])
    r = read_runs([p]).df.iloc[0]
    assert r["global_batch_size"] == 4 * 8  # dp = 64 / (4 x 2)


def test_extra_profiler_columns_pass_through(tmp_path: Path) -> None:
    header = list(REFERENCE_COLUMNS) + ["status", "peak_mem_reserved_gib", "layers"]
    ok = base(id="prof-1", step_time_s=1.5, peak_mem_gib=10, mem_kind="allocated")
    oom = base(id="prof-2", micro_batch_size=64)
    rows = [[ok.get(c, "") for c in REFERENCE_COLUMNS] + ["ok", 12.5, 4],
            [oom.get(c, "") for c in REFERENCE_COLUMNS] + ["oom", "", 4]]
    t = read_runs([write_csv(tmp_path / "profile.csv", header, rows)])
    assert t.problems == []
    df = t.df
    assert df["peak_mem_reserved_gib"].tolist()[0] == 12.5
    assert df["layers"].tolist() == [4.0, 4.0]
    assert df["is_oom"].tolist() == [False, True]
    assert df["fits"].tolist() == [True, False]
    assert df["usable_memory"].tolist() == [True, False]


# --- LLMFineTuningBench -----------------------------------------------------------------------------

LLMFT_HEADER = ["model_name", "method", "gpu_model", "number_gpus", "number_nodes", "tokens_per_sample",
                "batch_size", "dataset_tokens_per_second", "train_runtime", "is_valid",
                "gpu_memory_utilization_peak", "error"]


def test_llmftbench_schema_is_mapped(tmp_path: Path) -> None:
    p = write_csv(tmp_path / "bench.csv", LLMFT_HEADER, [
        ["granite-3.1-8b-instruct", "full", "NVIDIA-A100-SXM4-80GB", 4, 1, 4096, 16, 10000.5, 600, "True",
         75, ""],
        ["granite-3.1-8b-instruct", "lora", "NVIDIA-A100-SXM4-80GB", 2, 1, 4096, 8, "", "", "False",
         99.5, ""],
        ["granite-3.1-8b-instruct", "full", "NVIDIA-A100-SXM4-80GB", 8, 1, 4096, 8, "", "", "false",
         40, "CUDA out of memory. Tried to allocate"],
        ["granite-3.1-8b-instruct", "full", "NVIDIA-A100-SXM4-80GB", 8, 1, 4096, 8, "", "", "False", 30,
         "NCCL timeout"],
    ])
    t = read_runs([p])
    assert t.problems == []
    df = t.df
    r = df.iloc[0]
    assert r["source"] == "bench"
    assert r["model"] == "granite-3.1-8b-instruct"
    assert r["model_resolved"].startswith("ibm-granite/granite-3.1-8b")
    assert r["gpu_resolved"] == "A100-SXM4-80GB"
    assert r["gpus"] == 4 and r["seq_len"] == 4096
    assert r["global_batch_size"] == 16 and r["micro_batch_size"] == 4  # batch_size is total over GPUs
    assert r["grad_accum"] == 1 and "grad_accum=1(framework default hf-trainer)" in r["defaults_used"]
    assert r["tokens_per_s"] == pytest.approx(10000.5) and r["runtime_s"] == 600
    assert r["peak_mem_gib"] == pytest.approx(0.75 * 80)  # percent of the GPU's memory
    assert r["precision"] == "bf16" and "framework default fms-hf-tuning" in r["defaults_used"]
    assert r["framework"] == "fms-hf-tuning"
    assert r["params_b"] > 7 and "params_b=" in r["defaults_used"]
    assert r["status"] == "ok" and r["usable_throughput"] and r["usable_memory"]
    # failed runs: near-full memory -> oom; an OOM message -> oom; anything else -> failed
    assert df["status"].tolist() == ["ok", "oom", "oom", "failed"]
    assert df["is_oom"].tolist() == [False, True, True, False]
    assert df["fits"].tolist()[1:3] == [False, False] and pd.isna(df["fits"].tolist()[3])
    assert not df["usable_throughput"].iloc[1:].any() and not df["usable_memory"].iloc[1:].any()
    assert df.iloc[1]["lora_rank"] == 8 and df.iloc[1]["lora_targets"] == "q,v"


def test_llmftbench_batch_not_divisible_is_a_problem(tmp_path: Path) -> None:
    p = write_csv(tmp_path / "bench.csv", LLMFT_HEADER, [
        ["granite-3.1-8b-instruct", "full", "A100-SXM4-80GB", 4, 1, 4096, 6, 1000, 60, "True", 50, ""],
    ])
    t = read_runs([p])
    assert len(t) == 0
    assert [str(x) for x in t.problems] == [
        f"{p}:2: batch_size 6 is not a multiple of gpus x grad_accum (4 x 1)"]


def test_llmftbench_memory_units(tmp_path: Path) -> None:
    rows = [["granite-3.1-8b-instruct", "full", "A100-SXM4-80GB", 1, 1, 512, 1, 1000, 60, "True", mib, ""]
            for mib in (30720, 40960)]
    df = read_runs([write_csv(tmp_path / "b.csv", LLMFT_HEADER, rows)]).df
    assert df["peak_mem_gib"].tolist() == [30.0, 40.0]  # values > 100: MiB


# --- bad input ----------------------------------------------------------------------------------

def test_missing_required_columns_skips_the_file(tmp_path: Path) -> None:
    bad = write_csv(tmp_path / "bad.csv", ["id", "model", "tokens_per_s"], [["b-1", LLAMA, 100]])
    good = ref_file(tmp_path / "good.csv", [base(id="g-1", tokens_per_s=100)])
    t = read_runs([bad, good])
    assert len(t) == 1
    assert len(t.problems) == 1
    assert t.problems[0].path == str(bad) and t.problems[0].line == 1
    assert "missing required column(s): gpu" in t.problems[0].message
    none = write_csv(tmp_path / "none.csv", ["id", "model", "gpu"], [["n-1", LLAMA, "A100-SXM4-80GB"]])
    t = read_runs([none])
    assert "a measurement" in t.problems[0].message


def test_non_numeric_negative_and_zero_throughput(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "r.csv", [
        base(id="r-1", tokens_per_s=1000),
        base(id="r-2", tokens_per_s="fast"),
        base(id="r-3", samples_per_s=-2),
        base(id="r-4", step_time_s=0, gpus="two"),
        base(id="r-5", tokens_per_s=1200),
    ])
    t = read_runs([p])
    assert t.df["id"].tolist() == ["r-1", "r-5"]  # the good rows are still used
    lines = [str(x) for x in t.problems]
    assert lines == [
        f"{p}:3: column 'tokens_per_s': non-numeric value 'fast'",
        f"{p}:4: column 'samples_per_s': throughput must be > 0 (got -2)",
        f"{p}:5: column 'gpus': non-numeric value 'two'",
        f"{p}:5: column 'step_time_s': throughput must be > 0 (got 0)",
    ]


def test_wrong_field_count_and_empty_file(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "w.csv", [base(id="w-1", tokens_per_s=10)])
    with open(p, "a", encoding="utf-8") as f:
        f.write("w-2,too,few\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    t = read_runs([p, empty, tmp_path / "absent.csv"])
    assert len(t) == 1
    msgs = [str(x) for x in t.problems]
    assert msgs[0] == f"{p}:3: 3 fields where the header has {len(REFERENCE_COLUMNS)}; row skipped"
    assert msgs[1].startswith(f"{empty}: empty file")
    assert msgs[2] == f"{tmp_path / 'absent.csv'}: no such file"


def test_records_keep_their_physical_lines(tmp_path: Path) -> None:
    """Each record keeps the line it starts on: after a quoted line end (LF, CRLF, CR), a blank
    line, a record with too many or too few fields; trailing empty cells are dropped; a BOM is
    skipped; cells are text as written (not parsed as numbers)."""
    from tuneplan.runs.io import _csv_records

    p = tmp_path / "f.csv"
    p.write_bytes(b'\xef\xbb\xbfa,b,c\r\n1.50,"x\ny",3\n"p\r\nq",,\r\n\n7,8\n9,10,11,12\n"r\rs",2,3,,\n4,"5,6",7\n')
    header, records, delimiter = _csv_records(p)
    assert (header, delimiter) == (["a", "b", "c"], ",")
    assert records == [(2, ["1.50", "x\ny", "3"]), (4, ["p\r\nq", "", ""]), (6, []), (7, ["7", "8"]),
                       (8, ["9", "10", "11", "12"]), (9, ["r\rs", "2", "3", "", ""]), (11, ["4", "5,6", "7"])]


def test_a_bad_byte_in_a_short_record_and_an_open_quote_stay_on_their_records(tmp_path: Path) -> None:
    """A record with another number of fields keeps its bytes that are not UTF-8 (as surrogates); a
    quote left open takes the rest of the file into its cell, as Python's csv module does."""
    from tuneplan.runs.io import _csv_records

    p = tmp_path / "f.csv"
    p.write_bytes(b'a,b,c\n1,2,3\n\xff,2\n4,5,6\n"open,7\n8,9\n')
    assert _csv_records(p) == (["a", "b", "c"], [(2, ["1", "2", "3"]), (3, ["\udcff", "2"]), (4, ["4", "5", "6"]),
                                                 (5, ["open,7\n8,9\n"])], ",")


def test_rows_after_bad_records_are_read_on_their_lines(tmp_path: Path) -> None:
    rows = [base(id=f"r-{k}", tokens_per_s=100 + k, notes="two\nlines" if k == 0 else "") for k in range(4)]
    p = ref_file(tmp_path / "r.csv", rows)
    text = p.read_text(encoding="utf-8").splitlines(keepends=True)  # header, r-0 (2 lines), r-1, r-2, r-3
    text.insert(3, "x,y\n")  # line 4: too few fields
    text.insert(5, "\n")  # line 6: blank
    text[-1] = text[-1].rstrip("\n") + ",,\n"  # r-3: trailing empty cells
    p.write_text("".join(text), encoding="utf-8")
    t = read_runs([p], resolve=False)
    assert [str(x) for x in t.problems] == [f"{p}:4: 2 fields where the header has {len(REFERENCE_COLUMNS)}; "
                                            "row skipped"]
    assert t.df["id"].tolist() == ["r-0", "r-1", "r-2", "r-3"]
    assert t.df["line"].tolist() == [2, 5, 7, 8]


def test_duplicates(tmp_path: Path) -> None:
    a = ref_file(tmp_path / "a.csv", [
        base(id="a-1", tokens_per_s=1000),
        base(id="a-1", tokens_per_s=2000),                      # duplicate id
        base(id="a-3", tokens_per_s=1000),                      # same cells as a-1 but the id
        base(id="a-4", tokens_per_s=1000, notes="DUPLICATE of a-1 (the same run in another table)"),
    ])
    b = ref_file(tmp_path / "b.csv", [base(id="a-1", source="a", tokens_per_s=5)])  # id across files
    t = read_runs([a, b])
    assert t.df["id"].tolist() == ["a-1", "a-4"]
    assert t.df["is_duplicate"].tolist() == [False, True]
    assert t.df["usable_throughput"].tolist() == [True, False]  # counted once
    msgs = [str(x) for x in t.problems]
    assert msgs[0] == f"{a}:3: duplicate id 'a-1' (first at {a}:2); row skipped, first kept"
    assert msgs[1] == f"{a}:4: exact duplicate of the row at {a}:2; row skipped, first kept"
    assert msgs[2] == f"{b}:2: duplicate id 'a-1' (first at {a}:2); row skipped, first kept"
    assert summarise(t)["by_source"]["a"]["duplicates"] == 1


def test_oom_rows_are_kept(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "o.csv", [
        base(id="o-1", notes="OOM (source: 'OOM GPU' on A100 80GB)"),
        base(id="o-2", notes="settings x; source reports OOM (single A100)"),
        base(id="o-3", notes="micro batch 1; OutOfMemoryError"),
        # measured rows whose notes only discuss OOM are not OOM
        base(id="o-4", tokens_per_s=400, notes="params exceed memory, so the optimizer step should OOM"),
        base(id="o-5", peak_mem_gib=18.9, notes="single A100 (OOM where 72B bf16 did not fit)"),
    ])
    t = read_runs([p])
    assert t.problems == []
    assert t.df["is_oom"].tolist() == [True, True, True, False, False]
    assert t.df["fits"].tolist() == [False, False, False, True, True]
    assert t.df["status"].tolist() == ["oom", "oom", "oom", "ok", "ok"]
    assert summarise(t)["totals"]["oom"] == 3


def test_unresolvable_rows_are_reported_not_dropped_silently(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "u.csv", [
        base(id="u-1", tokens_per_s=100),
        base(id="u-2", model="granite-99b-zz", model_hf_id="", tokens_per_s=100),
        base(id="u-3", gpu="RTX 6000", tokens_per_s=100),  # ambiguous: the catalog names no default
        base(id="u-4", gpu="Z9000-7GB", tokens_per_s=100),
        base(id="u-5", model="", model_hf_id="", tokens_per_s=100),
        base(id="u-6", gpu="", peak_mem_gib=12),  # GPU not stated: kept, not usable for throughput
    ])
    t = read_runs([p])
    assert t.df["id"].tolist() == ["u-1", "u-6"]
    assert len(t) + len(t.problems) == 6
    by_line = {x.line: x.message for x in t.problems}
    assert set(by_line) == {3, 4, 5, 6}
    assert by_line[3].startswith("cannot resolve model 'granite-99b-zz': unknown model")
    assert "closest:" in by_line[3] and "ibm-granite/" in by_line[3]
    assert "cannot resolve GPU 'RTX 6000'" in by_line[4] and "RTX-6000-Ada-48GB" in by_line[4]
    assert "cannot resolve GPU 'Z9000-7GB'" in by_line[5]
    assert by_line[6].startswith("no model named")
    r6 = t.df.iloc[1]
    assert r6["gpu_resolved"] == "" and not r6["usable_throughput"] and r6["usable_memory"]
    assert summarise(t)["totals"]["no_gpu"] == 1


def test_resolve_false_skips_catalogs(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "u.csv", [base(id="u-1", model="granite-99b-zz", tokens_per_s=100)])
    t = read_runs([p], resolve=False)
    assert t.problems == [] and len(t) == 1
    assert t.df.iloc[0]["model_resolved"] == "" and t.df.iloc[0]["usable_throughput"]


def test_strict_raises_at_the_first_problem(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "s.csv", [base(id="s-1", tokens_per_s=10), base(id="s-2", tokens_per_s="x")])
    with pytest.raises(DataFileError) as e:
        read_runs([p], strict=True)
    assert e.value.path == str(p) and e.value.line == 3
    assert str(e.value) == f"{p}:3: column 'tokens_per_s': non-numeric value 'x'"
    bad = write_csv(tmp_path / "bad.csv", ["model", "tokens_per_s"], [[LLAMA, 1]])
    with pytest.raises(DataFileError, match="missing required"):
        read_runs([bad], strict=True)
    good = ref_file(tmp_path / "good.csv", [base(id="g-1", tokens_per_s=10)])
    assert len(read_runs([good], strict=True)) == 1  # never raises on a good file


# --- defaults ---------------------------------------------------------------------------------------

def test_source_and_framework_defaults_are_recorded(tmp_path: Path) -> None:
    nemo = ref_file(tmp_path / "nemo.csv", [base(id="n-1", lora_rank="", lora_targets="", tokens_per_s=5,
                                                 framework="nemo")])
    swift = ref_file(tmp_path / "ms-swift.csv", [base(id="s-1", gpu="A100-80GB", samples_per_s=1,
                                                      framework="ms-swift")])
    peft = ref_file(tmp_path / "mine.csv", [base(id="p-1", model="bigscience/bloom-7b1", model_hf_id="",
                                                 lora_rank="", lora_targets="", grad_accum="",
                                                 framework="hf-trainer+peft", peak_mem_gib=30)])
    df = read_runs([nemo, swift, peft]).df
    n, s, p = (df.iloc[i] for i in range(3))
    assert n["lora_rank"] == 32 and n["lora_targets"] == "qkv"
    assert "lora_rank=32(source default nemo)" in n["defaults_used"]
    assert s["gpu_resolved"] == "A100-SXM4-80GB" and s["gpu"] == "A100-80GB"
    assert "gpu=A100-SXM4-80GB(catalog default for 'A100-80GB'" in s["defaults_used"]
    assert p["lora_rank"] == 8 and p["lora_targets"] == "qkv"  # peft's mapping for bloom
    assert "lora_targets=qkv(framework default peft)" in p["defaults_used"]
    assert p["grad_accum"] == 1 and "grad_accum=1(framework default hf-trainer)" in p["defaults_used"]


def test_defaults_never_overwrite_a_value(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "nemo.csv", [base(id="n-1", lora_rank=16, tokens_per_s=5)])
    r = read_runs([p]).df.iloc[0]
    assert r["lora_rank"] == 16 and "lora_rank" not in r["defaults_used"]


def test_shipped_defaults_parse_and_cite() -> None:
    d = load_defaults()
    assert d.frameworks and d.sources
    for fw in d.frameworks:
        assert all(e.why for e in fw.defaults.values())
    for src in d.sources.values():
        assert all(e.why for e in src.defaults.values())
        assert all(f.why for f in src.flags)
    with pytest.raises(DataFileError, match="why"):
        parse_defaults({"sources": {"x": {"defaults": {"precision": {"value": "bf16"}}}}})


def test_estimates_are_flagged(tmp_path: Path) -> None:
    p = ref_file(tmp_path / "llama-factory.csv", [
        base(id="lf-1", gpu="", peak_mem_gib=120, notes="estimate, not measured; row Full"),
    ])
    t = read_runs([p])
    r = t.df.iloc[0]
    assert r["is_estimate"] and not r["usable_memory"] and r["status"] == ""
    assert summarise(t)["by_source"]["llama-factory"]["estimates"] == 1


# --- table --------------------------------------------------------------------------------------

def test_fingerprint_filter_sources(tmp_path: Path) -> None:
    rows = [base(id="f-1", tokens_per_s=1000.123456789, source="s1"),
            base(id="f-2", tokens_per_s=2000, source="s2")]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    t1 = read_runs([ref_file(tmp_path / "a" / "runs.csv", rows)])
    t2 = read_runs([ref_file(tmp_path / "b" / "runs.csv", list(reversed(rows)))])
    assert t1.fingerprint() == t2.fingerprint()  # independent of the folder and the row order
    assert len(t1.fingerprint()) == 64
    rows[1]["tokens_per_s"] = 2001
    t3 = read_runs([ref_file(tmp_path / "a" / "runs2.csv", rows)])
    assert t3.fingerprint() != t1.fingerprint()
    assert t1.sources() == ["s1", "s2"]
    assert len(t1.filter(source="s1")) == 1
    assert len(t1.filter(source=["s1", "s2"], usable_throughput=True)) == 2
    with pytest.raises(KeyError):
        t1.filter(nope=1)
    assert isinstance(t1.filter(source="s1"), RunTable)


# --- writer -------------------------------------------------------------------------------------

def test_writer_is_append_only(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "profile.csv"
    row = {**base(tokens_per_s=100.5, peak_mem_gib=10.25, mem_kind="allocated"), "source": "profile",
           "status": "ok", "peak_mem_reserved_gib": 11.0}
    assert write_runs([row, {**row, "tokens_per_s": 200}], out) == 2
    first = out.read_text(encoding="utf-8")
    assert first.splitlines()[0].startswith("id,source,source_ref,model")
    assert write_runs(pd.DataFrame([{**row, "micro_batch_size": 8}]), out) == 1
    text = out.read_text(encoding="utf-8")
    assert text.startswith(first)  # existing rows untouched
    t = read_runs([out])
    assert t.problems == []
    assert t.df["id"].tolist() == ["profile-1", "profile-2", "profile-3"]
    assert t.df["peak_mem_reserved_gib"].tolist() == [11.0] * 3
    with pytest.raises(DataFileError, match="already in the file"):
        write_runs([{**row, "id": "profile-2"}], out)
    with pytest.raises(DataFileError, match="refusing to overwrite"):
        write_runs([row], out, append=False)
    with pytest.raises(DataFileError, match="header lacks: surprise"):
        write_runs([{**row, "surprise": 1}], out)
    assert out.read_text(encoding="utf-8") == text  # refused writes leave the file as it was
    # a table read back can be appended to another file; read_runs' own columns are not written
    other = tmp_path / "copy.csv"
    write_runs(t, other)
    assert not set(ADDED_COLUMNS) & set(out.read_text().splitlines()[0].split(","))
    assert read_runs([other]).df["tokens_per_s"].tolist() == [100.5, 200.0, 100.5]


def test_writer_adds_missing_final_newline(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    write_runs([base(id="x-1", tokens_per_s=1)], out)
    out.write_text(out.read_text(encoding="utf-8").rstrip("\n"), encoding="utf-8")
    write_runs([base(id="x-2", tokens_per_s=2)], out)
    assert read_runs([out]).df["id"].tolist() == ["x-1", "x-2"]


# --- parquet ------------------------------------------------------------------------------------

def test_parquet(tmp_path: Path) -> None:
    rows = [base(id="pq-1", tokens_per_s=100), base(id="pq-2", tokens_per_s="oops")]
    p = tmp_path / "runs.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        p.write_bytes(b"PAR1")
        with pytest.raises(DataFileError, match="pyarrow"):
            read_runs([p])
        return
    pd.DataFrame([{c: r.get(c, None) for c in REFERENCE_COLUMNS} for r in rows]).astype(str).replace(
        "None", "").to_parquet(p)
    t = read_runs([p])
    assert t.df["id"].tolist() == ["pq-1"]
    assert [str(x) for x in t.problems] == [f"{p}:2: column 'tokens_per_s': non-numeric value 'oops'"]


# --- shared reference set -----------------------------------------------------------------------

def test_reference_dir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "reference" / "runs"
    runs.mkdir(parents=True)
    ref_file(runs / "one.csv", [base(id="one-1", tokens_per_s=10)])
    monkeypatch.setenv("TUNEPLAN_REFERENCE_DIR", str(tmp_path / "reference"))
    assert reference_runs_dir() == runs
    monkeypatch.setenv("TUNEPLAN_REFERENCE_DIR", str(runs))
    assert reference_runs_dir() == runs
    assert len(load_reference_runs()) == 1
    assert len(read_runs(runs)) == 1  # a folder stands for its runs files
    monkeypatch.setenv("TUNEPLAN_REFERENCE_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(TuneplanError, match="TUNEPLAN_REFERENCE_DIR"):
        reference_runs_dir()


def _reference_dir() -> Path | None:
    try:
        return reference_runs_dir()
    except TuneplanError:
        return None


@pytest.mark.skipif(_reference_dir() is None, reason="shared/reference/runs not found")
def test_shared_reference_set_loads() -> None:
    t = load_reference_runs()
    summary = summarise(t)
    print("\n" + format_summary(summary))
    for line in t.problem_lines():
        print(line)
    df = t.df
    assert len(df) > 700
    # every problem in the shared set is a name the catalogs cannot resolve (no malformed rows)
    assert all(p.message.startswith(("cannot resolve model", "cannot resolve GPU", "no model named"))
               for p in t.problems), [str(p) for p in t.problems if "cannot resolve" not in p.message]
    # no row is lost: kept + reported = rows in the files
    n_rows = sum(len(pd.read_csv(f, dtype=str)) for f in sorted(reference_runs_dir().glob("*.csv")))
    assert len(df) + len(t.problems) == n_rows
    assert df["id"].is_unique
    by = summary["by_source"]
    for src in ("litgpt", "ms-swift", "llmftbench", "stsxxx-finetune"):
        assert by[src]["usable_throughput"] > 0
    # vectorlm's throughputs are 0.5th-percentile first steps (Table A) or steps without an optimizer
    # (Table B): none is a steady-state throughput; its rows are kept for the OOM verdicts
    assert by["vectorlm"]["usable_throughput"] == 0
    assert by["llm-foundry"]["usable_throughput"] == 300  # MPT sizes from the architecture in the notes
    assert by["ms-swift"]["duplicates"] == 6 and by["ms-swift-2023v1"]["duplicates"] == 5
    assert by["vectorlm"]["oom"] == 35
    assert by["ms-swift-2023v1"]["usable_throughput"] == 0  # wall time includes loading
    assert df.loc[df["is_oom"], "usable_memory"].eq(False).all()
    assert t.fingerprint() == load_reference_runs().fingerprint()
    # llama-factory's VRAM table is estimates (kept when names are not resolved)
    lf = read_runs([reference_runs_dir() / "llama-factory.csv"], resolve=False)
    assert lf.df["is_estimate"].sum() == 24
