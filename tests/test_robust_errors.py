"""Issue 19 point 1 and issue 16 part 6: every reproducer is one line on stderr with exit code 2, never a
traceback; issue 19 points 2-4: sizes bounded, impossible configurations refused naming the constraint."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from conftest import reference_dir, tiny_llama_config
from tuneplan.cli import main

GPU = "--gpu H100-SXM5-80GB"
WORK = "--seq-len 512 --examples 1000"
LLAMA = f"estimate --model Llama-3.1-8B {GPU} {WORK}"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Malformed inputs: binary, latin-1, deep nesting, huge sizes, empty/header-only runs files."""
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00binary\x00\x80")
    (tmp_path / "latin.json").write_bytes('{"model_type": "caf\xe9"}'.encode("latin-1"))
    (tmp_path / "nest.json").write_text("[" * 100_000)
    (tmp_path / "huge.json").write_text(json.dumps(tiny_llama_config(hidden_size=1e308)))
    (tmp_path / "layers.json").write_text(json.dumps(tiny_llama_config(num_hidden_layers=1e9)))
    (tmp_path / "neg.json").write_text(json.dumps(tiny_llama_config(num_attention_heads=-4)))
    (tmp_path / "gpu-neg.yaml").write_text("name: neg\nmemory_gib: 80\nmemory_bandwidth_gbs: 2000\n"
                                           "peak_tflops: 500\ntdp_w: -700\n")
    (tmp_path / "gpu-nan.yaml").write_text("name: nan\nmemory_gib: 80\nmemory_bandwidth_gbs: .nan\n"
                                           "peak_tflops: 500\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("id,source,model,gpu,method,tokens_per_s\n")
    (tmp_path / "tiny.json").write_text(json.dumps(tiny_llama_config()))
    return {p.stem if p.is_file() else p.name: str(p) for p in tmp_path.iterdir()} | {"tmp": str(tmp_path)}


CASES = [
    # config.json files
    ("estimate --model {bin} " + f"{GPU} {WORK}", "not UTF-8"),
    ("estimate --model {latin} " + f"{GPU} {WORK}", "not UTF-8"),
    ("estimate --model {nest} " + f"{GPU} {WORK}", "nests too deeply"),
    ("estimate --model {huge} " + f"{GPU} {WORK}", "hidden_size"),
    ("estimate --model {layers} " + f"{GPU} {WORK}", "num_hidden_layers"),
    ("estimate --model {neg} " + f"{GPU} {WORK}", "num_attention_heads"),
    ("estimate --model " + "x" * 100_000 + f" {GPU} {WORK}", "characters"),
    ("estimate --model " + "x" * 300 + f" {GPU} {WORK}", "model"),
    # work sizes, planner seed
    (LLAMA + " --epochs 1e308", "epochs"),
    (LLAMA.replace("--examples 1000", "--examples 1e300"), "examples"),
    (f"estimate --model Llama-3.1-8B {GPU} --seq-len 512 --examples 1000 --tokens-per-example 1e308",
     "tokens-per-example"),
    ("estimate --estimator planner --params 7e9 --peak-tflops 989 --examples 1000 --tokens-per-example 512 "
     "--mfu 1e308", "mfu"),
    ("estimate --estimator planner --params 7e9 --peak-tflops 989 --examples 1000 --tokens-per-example 512 "
     "--mfu 5", "mfu"),
    ("estimate --estimator planner --params 7e9 --peak-tflops 989 --examples 1000 --tokens-per-example 1e308",
     "tokens-per-example"),
    (LLAMA + " --gpus 100000000000000000000", "gpus"),
    # calibration, prices and GPU files
    (LLAMA + " --calibration ''", "calibration"),
    (LLAMA + " --calibration {adir}", "folder"),
    (LLAMA + " --calibration {bin}", "not UTF-8"),
    (LLAMA + " --calibration {tiny}", "not a tuneplan calibration"),
    (LLAMA + " --prices ''", "prices"),
    (LLAMA + " --prices {adir}", "folder"),
    (LLAMA + " --prices {bin}", "not UTF-8"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{adir}}", "folder"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{bin}}", "not UTF-8"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{gpu-neg}}", "tdp_w"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{gpu-nan}}", "memory_bandwidth_gbs"),
    # impossible configurations
    (LLAMA + " --tp 64 --gpus 64", "heads"),
    (LLAMA + " --pp 64 --gpus 64", "layers"),
    (f"estimate --model Llama-3.1-8B {GPU} --seq-len 1000 --examples 10 --cp 1024 --gpus 1024", "seq-len"),
    (LLAMA + " --lora-targets q,zz", "zz"),
    (LLAMA + " --tokens 1e6", "not both"),
    (LLAMA + " --method freeze --trainable-layers 100", "trainable-layers"),
    # plan and curve sizes
    ("plan --model Llama-3.1-8B --max-gpus 99999999999999999999 --examples 1000 --tokens-per-example 512",
     "max-gpus"),
    ("plan --model Llama-3.1-8B --gpu-counts 1,99999999999999999999 --examples 1000 --tokens-per-example 512",
     "gpu-counts"),
    ("plan --model Llama-3.1-8B --micro-batches 1,100000000000 --examples 1000 --tokens-per-example 512",
     "micro-batches"),
    (f"curve --model Llama-3.1-8B {GPU} --seq-len 512 --max-micro-batch 99999999999999999999", "max-micro-batch"),
    (f"curve --model Llama-3.1-8B {GPU} --seq-len 512 --max-micro-batch 100000000", "max-micro-batch"),
    # predict
    ("predict --runs {runs} --out {adir}", "folder"),
    ("predict --runs {runs} --out ''", "empty path"),
    ("predict --runs {runs} --out /dev/full", "not a regular file (a character device)"),
    ("predict --runs {runs} --out {tmp}/nope/p.csv", "does not exist"),
    ("predict --runs {runs} --out {tmp}/p.csv --interval nan", "interval"),
    ("predict --runs {runs} --out {runs}", "overwrite"),
    # runs files: missing, empty, header-only, binary (issue 16 part 6)
    *[(f"{cmd} --runs {{{f}}}{out}", "no runs read")
      for cmd, out in (("calibrate", " --out {tmp}/c.json"), ("validate", ""), ("predict", " --out {tmp}/p.csv"))
      for f in ("empty", "header", "bin")],
    ("calibrate --runs {tmp}/missing.csv --out {tmp}/c.json", "no such file"),
    ("validate --runs {tmp}/missing.csv", "no such file"),
    ("predict --runs {tmp}/missing.csv --out {tmp}/p.csv", "no such file"),
    # output paths checked before the fit
    ("calibrate --runs {runs} --out {adir}", "folder"),
    ("calibrate --runs {runs} --out {tmp}/nope/c.json", "does not exist"),
    ("validate --runs {runs} --seed -1", "seed"),
    ("validate --runs {runs} --plot {tmp}/v.txt", "plot"),
    # probe and profile values
    ("probe --threads -1 --quick", "threads"),
    ("profile --model {tiny} --config-override hidden_size=abc --out {tmp}/prof.csv", "hidden_size"),
    ("profile --model {tiny} --config-override zzz=3 --out {tmp}/prof.csv", "zzz"),
    ("profile --model {tiny} --config-override num_hidden_layers=1000000000 --out {tmp}/prof.csv",
     "num_hidden_layers"),
    ("profile --model {tiny} --layers 0 --out {tmp}/prof.csv", "layers"),
    ("profile --model {tiny} --max-mem-gib nan --out {tmp}/prof.csv", "max-mem-gib"),
    ("profile --model {tiny} --timeout -1 --out {tmp}/prof.csv", "timeout"),
]


@pytest.fixture
def small_runs(tmp_path: Path) -> str:
    """A valid runs file of a few reference rows (fast to read and predict)."""
    ref = reference_dir()
    if ref is None:
        pytest.skip("no shared reference runs")
    lines = (ref / "llmftbench.csv").read_text(encoding="utf-8").splitlines()
    p = tmp_path / "small.csv"
    p.write_text("\n".join(lines[:6]) + "\n", encoding="utf-8")
    return str(p)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(("command", "needle"), CASES, ids=[c[0][:60] for c in CASES])
def test_reproducer_is_one_line_exit_2(command, needle, files, small_runs, capsys):
    argv = [a.format(**files, runs=small_runs) for a in shlex.split(command)]
    rc, _, err = run_cli(argv, capsys)
    errors = [ln for ln in err.splitlines() if not ln.startswith("warning:")]
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert len(errors) == 1, err
    assert needle in errors[0], errors[0]
    assert len(errors[0]) < 600


def test_calibrate_skipped_rows_do_not_crash(tmp_path, small_runs, capsys):
    """issue 16: `TypeError: ufunc 'bitwise_and'` in learn/measured.py training_set when rows are skipped."""
    import pandas as pd

    from tuneplan.learn.measured import training_set
    from tuneplan.runs import read_runs

    table = read_runs([small_runs])
    empty = training_set(table.df.iloc[0:0])
    assert len(empty) == 0
    # rows whose flags are missing (object columns of None) configure or are skipped, never crash
    df = table.df.copy()
    df["is_duplicate"] = None
    df.loc[0, "model"] = "no-such-model"
    ts = training_set(pd.concat([df, df.iloc[0:0]]))
    assert len(ts) <= len(df)


def test_output_path_checked_before_fit(tmp_path, small_runs, capsys, monkeypatch):
    """calibrate --out in a missing folder is refused before any fitting starts."""
    import tuneplan.learn.calibration as calibration

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("fitted before checking --out")

    monkeypatch.setattr(calibration, "fit_calibration", boom)
    rc, _, err = run_cli(["calibrate", "--runs", small_runs, "--out", str(tmp_path / "no" / "c.json")], capsys)
    assert rc == 2 and "does not exist" in err


def test_predict_refuses_to_overwrite_its_input(small_runs, capsys):
    before = Path(small_runs).read_bytes()
    rc, _, err = run_cli(["predict", "--runs", small_runs, "--out", small_runs], capsys)
    assert rc == 2 and "overwrite" in err
    assert Path(small_runs).read_bytes() == before


def test_legal_but_odd_is_a_warning(capsys):
    """Grad-accum larger than the data: legal, warned about in the output."""
    from tuneplan.api import estimate

    r = estimate("Llama-3.1-8B", "H100-SXM5-80GB", seq_len=512, examples=10, micro_batch=4, grad_accum=8,
                 interval=None)
    assert any("partial step" in w for w in r.warnings)
    r = estimate("Llama-3.1-8B", "H100-SXM5-80GB", seq_len=512, examples=1000, tp=3, gpus=3, interval=None)
    assert any("does not divide" in w for w in r.warnings)


def test_limits_documented():
    """Every bound has a docstring line (its unit and the figure it leaves headroom over)."""
    import ast

    import tuneplan.specs.limits as limits

    tree = ast.parse(Path(limits.__file__).read_text(encoding="utf-8"))
    body = tree.body
    names = [n.targets[0].id for n in body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
             and n.targets[0].id.startswith("MAX_")]
    documented = {body[i].targets[0].id for i in range(len(body) - 1)
                  if isinstance(body[i], ast.Assign) and isinstance(body[i].targets[0], ast.Name)
                  and isinstance(body[i + 1], ast.Expr) and isinstance(body[i + 1].value, ast.Constant)}
    assert names and set(names) <= documented


# --- runs files (issue 19 point 5) ---------------------------------------------------------------

def _runs_lines(n: int = 6) -> list[str]:
    ref = reference_dir()
    if ref is None:
        pytest.skip("no shared reference runs")
    return (ref / "llmftbench.csv").read_text(encoding="utf-8").splitlines()[:n]


def test_bad_byte_loses_only_its_row(tmp_path):
    from tuneplan.runs import read_runs

    lines = _runs_lines()
    data = ("\n".join(lines) + "\n").encode()
    bad = data.replace(lines[2].encode(), lines[2].encode().replace(b"granite", b"gr\xe9nite", 1))
    p = tmp_path / "bad.csv"
    p.write_bytes(bad)
    t = read_runs([p], resolve=False)
    assert len(t.df) == len(lines) - 2
    assert [pr.line for pr in t.problems] == [3] and "not UTF-8" in t.problems[0].message


def test_huge_cell_loses_only_its_row(tmp_path):
    from tuneplan.runs import read_runs

    lines = _runs_lines()
    header = lines[0].split(",")
    cells = lines[3].split(",")
    cells[header.index("dataset")] = "x" * 200_000
    lines[3] = ",".join(cells)
    p = tmp_path / "huge.csv"
    p.write_text("\n".join(lines) + "\n")
    t = read_runs([p], resolve=False)
    assert len(t.df) == len(lines) - 2
    assert [pr.line for pr in t.problems] == [4] and "characters" in t.problems[0].message


def test_semicolon_file_is_read_and_said(tmp_path):
    from tuneplan.runs import read_runs

    lines = _runs_lines()
    p = tmp_path / "semi.csv"
    import csv

    with p.open("w", newline="") as f:
        csv.writer(f, delimiter=";").writerows(csv.reader(lines))
    t = read_runs([p], resolve=False)
    assert [pr.message for pr in t.problems if "semicolon" in pr.message]
    assert len(t.df) == len(lines) - 1


def test_fractional_gpus_refused_for_that_row(tmp_path):
    from tuneplan.runs import read_runs

    lines = _runs_lines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("gpus")] = "1.5"
    lines[2] = ",".join(cells)
    p = tmp_path / "frac.csv"
    p.write_text("\n".join(lines) + "\n")
    t = read_runs([p], resolve=False)
    assert len(t.df) == len(lines) - 2
    assert t.problems[0].line == 3 and "whole number" in t.problems[0].message


def test_predict_writes_unreadable_rows_back(tmp_path, capsys):
    import pandas as pd

    lines = _runs_lines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("gpus")] = "1.5"
    lines[2] = ",".join(cells)
    p = tmp_path / "frac.csv"
    p.write_text("\n".join(lines) + "\n")
    out = tmp_path / "pred.csv"
    rc, stdout, _ = run_cli(["predict", "--runs", str(p), "--out", str(out), "--interval", "0"], capsys)
    assert rc == 0
    df = pd.read_csv(out)
    assert len(df) == len(lines) - 1
    assert df["error"].astype(str).str.contains("whole number").sum() == 1


# --- the web server (issue 19 points 2 and 8) ----------------------------------------------------

@pytest.fixture(scope="module")
def web():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    with TestClient(create_app(warm_up=False), raise_server_exceptions=False) as c:
        yield c


def test_chunked_body_over_the_limit_is_413(web):
    def chunks():
        for _ in range(4):
            yield b"x" * (1024 * 1024)

    r = web.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_model_config_with_huge_layers_is_refused_fast(web):
    import time

    cfg = tiny_llama_config(num_hidden_layers=2e8)
    t0 = time.perf_counter()
    r = web.post("/api/model-config", json={"config_json": cfg})
    assert r.status_code == 422 and "num_hidden_layers" in r.text
    assert time.perf_counter() - t0 < 5.0


def test_lanes_bound_concurrency():
    import threading
    import time

    from tuneplan.web.pool import Busy, lane

    inside = []
    with lane("heavy"):
        def other():
            try:
                with lane("heavy", timeout=0.05):
                    inside.append("got")
            except Busy:
                inside.append("busy")

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert inside == ["busy"]
    with lane("heavy", timeout=0.05):  # freed again
        time.sleep(0)


# --- profile's runs file (issue 19 point 6) -------------------------------------------------------

def _write_rows(path: str, n: int) -> None:
    from tuneplan.profile.rows import RowWriter

    w = RowWriter(path)
    for i in range(n):
        w.write({"model": "m", "gpu": "local-cpu", "method": "full", "notes": f"pid-row {i}"})


def test_concurrent_writers_get_distinct_ids(tmp_path):
    import multiprocessing

    from tuneplan.profile.rows import read_rows

    out = str(tmp_path / "runs.csv")
    _write_rows(out, 1)  # the header exists before the writers start
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_rows, args=(out, 25)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    rows = read_rows(out)
    ids = [r["id"] for r in rows]
    assert len(rows) == 76 and len(set(ids)) == 76


def test_profile_out_refuses_a_non_csv_file(tmp_path, capsys):
    from tuneplan.errors import InputError
    from tuneplan.profile.rows import RowWriter

    p = tmp_path / "notes.json"
    p.write_text('{"keep": "me"}\n')
    with pytest.raises(InputError, match="not a runs CSV"):
        RowWriter(p)
    assert p.read_text() == '{"keep": "me"}\n'


def test_profile_rewrite_keeps_the_file_mode(tmp_path):
    import os
    import stat

    from tuneplan.profile.rows import RowWriter

    p = tmp_path / "runs.csv"
    p.write_text("id,model\nprofile-1,m\n")
    os.chmod(p, 0o644)
    RowWriter(p).write({"model": "m2", "gpu": "x"})  # new columns: the file is rewritten once
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
