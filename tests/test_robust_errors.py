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
    # curve's overlay: a missing or unreadable runs file is an error, not a note under an exit code 0
    *[(f"curve --model Llama-3.1-8B {GPU} --seq-len 512 --runs {r}", "runs: no runs read")
      for r in ("{empty}", "{bin}", "{tmp}/missing.csv")],
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
    # the skipped row comes back with its own cells (its id, its gpus as written), not as a bare error
    bad = df[df["error"].astype(str).str.contains("whole number")].iloc[0]
    assert str(bad["id"]) == cells[header.index("id")] and float(bad["gpus"]) == 1.5


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


# --- issue 34: nothing lost, nothing hangs, no internal error --------------------------------------

HUGE = "9" * 400


@pytest.fixture
def bad34(tmp_path: Path) -> dict[str, str]:
    """A FIFO (named .json/.yaml/.csv too), flow and block YAML 3,000 deep, JSON 3,000 deep, an alias bomb."""
    import os

    for name in ("fifo", "fifo.json", "fifo.yaml", "fifo.csv"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    (tmp_path / "deepblock.yaml").write_text("a:\n" + "".join(" " * i + "b:\n" for i in range(1, 300)))
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 3000 + "]" * 3000 + "}")
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines + ["base_model: Qwen/Qwen2.5-0.5B", "datasets: *i"]) + "\n")
    return {k.replace(".", "_"): str(tmp_path / k) for k in os.listdir(tmp_path)} | {"tmp": str(tmp_path)}


CASES_34 = [
    # hangs: deep or aliased config files, FIFOs as user paths
    (f"estimate --from {{deep_yaml}} {GPU}", "nested more than 64 levels"),
    (f"estimate --from {{deepblock_yaml}} {GPU}", "nested more than 64 levels"),
    (f"estimate --from {{deep_json}} {GPU}", "nested more than 64 levels"),
    (f"estimate --from {{bomb_yaml}} {GPU}", "alias bomb"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{bomb_yaml}}", "alias bomb"),
    (LLAMA + " --prices {bomb_yaml}", "alias bomb"),
    (LLAMA + " --prices {deep_yaml}", "nested more than 64 levels"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{deep_yaml}}", "nested more than 64 levels"),
    (f"estimate --model Llama-3.1-8B {WORK} --gpu-file {{fifo_yaml}}", "not a regular file (a FIFO)"),
    (LLAMA + " --prices {fifo_yaml}", "not a regular file (a FIFO)"),
    (LLAMA + " --calibration {fifo_json}", "not a regular file (a FIFO)"),
    (f"estimate --model {{fifo_json}} {GPU} {WORK}", "not a regular file (a FIFO)"),
    (f"estimate --from {{fifo_yaml}} {GPU}", "not a file"),
    ("predict --runs {fifo_csv} --out {tmp}/p.csv", "not a regular file"),
    ("predict --runs {runs} --out {fifo_csv}", "not a regular file (a FIFO)"),
    ("plan --model Llama-3.1-8B --runs {fifo_csv}", "not a regular file"),
    ("profile --model Qwen2.5-0.5B --budget 0 --out {tmp}/r.csv", "--auto"),
    ("profile --model {deep_json} --out {tmp}/r.csv", "nests too deeply"),
    ("profile --model Qwen2.5-0.5B --out {fifo_csv}", "not a regular file (a FIFO)"),
    # internal errors: integers too large for a float
    (f"estimate --model Llama-3.1-8B {GPU} --seq-len {HUGE}", "400 digits"),
    (LLAMA + f" --galore-rank {HUGE}", "400 digits"),
    (LLAMA + f" --ep {HUGE}", "400 digits"),
    (LLAMA + " --ep " + "9" * 25, "ep: 1e+25 is beyond"),
    (f"curve --model Llama-3.1-8B {GPU} --seq-len {HUGE}", "400 digits"),
    (f"curve --model Llama-3.1-8B {GPU} --seq-len " + "9" * 25, "seq-len: 1e+25 is beyond"),
    (f"plan --model Llama-3.1-8B --seq-len 512 --tokens 1e6 --gpu-counts {HUGE}", "gpu-counts"),
    (f"memory Llama-3.1-8B --gpus {HUGE}", "400 digits"),
    (f"validate --runs {{runs}} --split by-source --reveal {HUGE}", "reveal: an integer of 400 digits"),
    (f"validate --runs {{runs}} --seed {HUGE}", "seed: must be an integer in [0, 2^32) (got an integer of 400"),
    (f"profile --model Qwen2.5-0.5B --steps {HUGE} --out {{tmp}}/r.csv", "steps: an integer of 400 digits"),
    (f"profile --model Qwen2.5-0.5B --seq-len {HUGE} --out {{tmp}}/r.csv", "seq-len: an integer of 400 digits"),
    (f"profile --model Qwen2.5-0.5B --group-size {HUGE} --out {{tmp}}/r.csv", "at most 65,536"),
    (f"profile --model Qwen2.5-0.5B --seed -{HUGE} --out {{tmp}}/r.csv", "a negative integer of 400 digits"),
    # writers over their inputs
    ("plan --model Llama-3.1-8B --runs {runs} --out {runs}", "also an input"),
    ("plan --model Llama-3.1-8B --runs {runs} --out {runs} --force", "also an input"),
    ("calibrate --runs {runs} --out {runs} --force", "also an input"),
    ("predict --runs {runs} --out {runs} --force", "also an input"),
    ("predict --runs {tmp} --out {tmp}/other.csv", "also an input"),
]


@pytest.mark.parametrize(("command", "needle"), CASES_34, ids=[c[0][:60] for c in CASES_34])
def test_issue34_reproducer_is_one_line_exit_2(command, needle, bad34, small_runs, capsys):
    import shutil

    runs = shutil.copy(small_runs, Path(bad34["tmp"]) / "runs.csv")
    before = Path(runs).read_bytes()
    argv = [a.format(**bad34, runs=runs) for a in shlex.split(command)]
    rc, _, err = run_cli(argv, capsys)
    errors = [ln for ln in err.splitlines() if not ln.startswith("warning:")]
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert len(errors) == 1, err
    assert needle in errors[0], errors[0]
    assert Path(runs).read_bytes() == before  # nothing lost


def test_yaml_alias_expansion_is_counted(monkeypatch):
    """`b: [*a, *a]` where a holds 3 values: a counts 1 + 3 = 4 values, b 1 + 2 x 4 = 9, the root mapping
    1 + 2 keys + 4 + 9 = 16. A bound of 16 passes, 15 is refused at b's line."""
    import tuneplan.errors as errors

    text = "a: &a [1, 2, 3]\nb: [*a, *a]\n"
    monkeypatch.setattr(errors, "MAX_EXPANDED_NODES", 16)
    assert errors.load_bounded_yaml(text) == {"a": [1, 2, 3], "b": [[1, 2, 3], [1, 2, 3]]}
    monkeypatch.setattr(errors, "MAX_EXPANDED_NODES", 15)
    with pytest.raises(errors.TooComplexError, match="alias bomb") as exc:
        errors.load_bounded_yaml(text)
    assert exc.value.line == 2


def test_nesting_bound_is_exact(monkeypatch):
    """64 levels are read, 65 refused: in YAML flow, YAML block and JSON."""
    from tuneplan.errors import MAX_NESTING, TooComplexError, load_bounded_json, load_bounded_yaml

    def flow(n: int) -> str:
        return "[" * n + "]" * n

    assert load_bounded_yaml(flow(MAX_NESTING)) is not None
    assert load_bounded_json(flow(MAX_NESTING)) is not None
    block = "".join(" " * i + "k:\n" for i in range(MAX_NESTING)) + " " * MAX_NESTING + "k: 1\n"
    with pytest.raises(TooComplexError):
        load_bounded_yaml(block)  # 65 mappings
    assert load_bounded_yaml("".join(" " * i + "k:\n" for i in range(MAX_NESTING - 1)) + " " * 63 + "k: 1\n")
    for load in (load_bounded_yaml, load_bounded_json):
        with pytest.raises(TooComplexError, match="64 levels"):
            load(flow(MAX_NESTING + 1))


def test_yaml_tags_still_refused(tmp_path):
    from tuneplan.configs import ConfigError, read_configs

    p = tmp_path / "t.yaml"
    p.write_text("base_model: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="tag"):
        read_configs([p])


def test_plan_out_refuses_an_existing_file_unless_force(tmp_path, capsys):
    out = tmp_path / "cands.csv"
    out.write_text("keep me\n")
    base = ["plan", "--model", "Qwen2.5-0.5B", "--gpus", "H100-SXM5-80GB", "--methods", "lora", "--max-gpus", "1",
            "--micro-batches", "1", "--examples", "1000", "--tokens-per-example", "256", "--out", str(out)]
    rc, _, err = run_cli(base, capsys)
    assert rc == 2 and "--force" in err and out.read_text() == "keep me\n"
    rc, _, err = run_cli([*base, "--force"], capsys)
    assert rc == 0, err
    assert out.read_text().startswith("gpu") or "," in out.read_text().splitlines()[0]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_calibrate_and_probe_outs_refuse_an_existing_file(tmp_path, small_runs, capsys):
    out = tmp_path / "c.json"
    out.write_text("{}\n")
    rc, _, err = run_cli(["calibrate", "--runs", small_runs, "--out", str(out)], capsys)
    assert rc == 2 and "exists: give --force" in err and out.read_text() == "{}\n"
    gpu = tmp_path / "g.yaml"
    gpu.write_text("name: mine\n")
    rc, _, err = run_cli(["probe", "--quick", "--out", str(gpu)], capsys)
    assert rc == 2 and "exists: give --force" in err and gpu.read_text() == "name: mine\n"


def test_atomic_output_keeps_the_old_file_on_a_crash(tmp_path):
    from tuneplan.errors import atomic_output

    p = tmp_path / "out.csv"
    p.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_output(p, "out") as tmp:
        Path(tmp).write_text("half")
        raise RuntimeError("crash while writing")
    assert p.read_text() == "old\n"
    assert [x.name for x in tmp_path.iterdir()] == ["out.csv"]
    with atomic_output(p, "out") as tmp:
        assert tmp.endswith(".csv") and Path(tmp).parent == tmp_path  # the suffix kept: writers read the format
        Path(tmp).write_text("new\n")
    assert p.read_text() == "new\n"
    link = tmp_path / "link.csv"
    link.symlink_to(p)
    with atomic_output(link, "out") as tmp:
        Path(tmp).write_text("through the link\n")
    assert link.is_symlink() and p.read_text() == "through the link\n"


def test_check_output_path_inputs(tmp_path):
    """The same file through a link, and a runs file inside a folder given as input, are inputs."""
    import os

    from tuneplan.errors import InputError, check_output_path

    runs = tmp_path / "runs.csv"
    runs.write_text("id\n")
    os.symlink(runs, tmp_path / "link.csv")
    with pytest.raises(InputError, match="also an input"):
        check_output_path(tmp_path / "link.csv", "out", inputs=[str(runs)])
    with pytest.raises(InputError, match="also an input"):
        check_output_path(tmp_path / "new.csv", "out", inputs=[str(tmp_path)])
    assert check_output_path(tmp_path / "new.json", "out", inputs=[str(tmp_path)]) == str(tmp_path / "new.json")
    with pytest.raises(InputError, match="exists: give --force"):
        check_output_path(runs, "out", force=False)
    assert check_output_path(runs, "out", force=True) == str(runs)


def test_curve_table_is_bounded():
    from tuneplan.commands.plan import CURVE_TABLE_ROWS, shown_curve_rows

    rows = [{"micro_batch": m} for m in range(1, 65_537)]
    shown = [r["micro_batch"] for r in shown_curve_rows(rows, 686)]
    assert shown == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 685, 686, 687, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
    assert shown_curve_rows(rows[:CURVE_TABLE_ROWS], 3) == rows[:CURVE_TABLE_ROWS]


def test_curve_widest_sweep_answers(capsys):
    """The widest sweep allowed prints a bounded table; one point more is refused naming the bound."""
    from tuneplan.specs.limits import MAX_CURVE_POINTS

    base = ["curve", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8", "--max-micro-batch"]
    rc, out, err = run_cli([*base, str(MAX_CURVE_POINTS)], capsys)
    assert rc == 0, err
    assert f"of the {MAX_CURVE_POINTS:,} micro-batches shown" in " ".join(out.split())
    rc, _, err = run_cli([*base, str(MAX_CURVE_POINTS + 1)], capsys)
    assert rc == 2 and f"at most {MAX_CURVE_POINTS:,}" in err


def _append_rows(path: str, n: int) -> None:
    from tuneplan.runs import write_runs

    for i in range(n):
        write_runs({"source": "cb", "model": "m", "gpu": "local-cpu", "method": "lora", "notes": f"row {i}"}, path)


def test_concurrent_runs_appends_get_distinct_ids(tmp_path):
    """write_runs (the transformers callback's writer) reads the ids and appends under one lock."""
    import csv
    import multiprocessing

    out = str(tmp_path / "runs.csv")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_rows, args=(out, 20)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ids = [r["id"] for r in rows]
    assert len(rows) == 80 and len(set(ids)) == 80
    assert sorted(int(i.rsplit("-", 1)[1]) for i in ids) == list(range(1, 81))


def _quiet_main(argv: list[str]) -> None:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(argv)


PLAN_TO = ["plan", "--model", "Qwen2.5-0.5B", "--gpus", "H100-SXM5-80GB", "--methods", "lora", "--max-gpus", "2",
           "--micro-batches", "1,2", "--examples", "1000", "--tokens-per-example", "256", "--force", "--out"]


@pytest.mark.parametrize("command", ["plan", "predict", "calibrate"])
def test_concurrent_writers_leave_one_whole_file(command, tmp_path, small_runs):
    """Three `COMMAND --out F --force` at once: F is one whole output, as one run alone writes it (each
    writes a temporary file renamed over F), and no temporary file is left."""
    import multiprocessing
    import shutil

    runs = str(shutil.copy(small_runs, tmp_path / "runs.csv"))
    name = {"plan": "cands.csv", "predict": "pred.csv", "calibrate": "cal.json"}[command]
    out = str(tmp_path / name)
    argv = {"plan": PLAN_TO + [out],
            "predict": ["predict", "--runs", runs, "--interval", "0", "--force", "--out", out],
            "calibrate": ["calibrate", "--runs", runs, "--force", "--out", out]}[command]
    _quiet_main(argv)
    whole = Path(out).read_bytes()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_quiet_main, args=(argv,)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert Path(out).read_bytes() == whole
    assert sorted(x.name for x in tmp_path.iterdir() if x.name not in ("runs.csv", "small.csv")) == [name]


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("a.yml", "a: " + "[" * 3000 + "]" * 3000, "nested more than 64 levels"),
    ("a.json", '{"a": ' + "[" * 3000 + "]" * 3000 + "}", "nested more than 64 levels"),
    ("a.yml", "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
     + "datasets: *i\n", "alias bomb"),
    ("a.yml", "sequence_len: " + "9" * 400 + "\nbase_model: Qwen/Qwen2.5-0.5B\n", "an integer of 400 digits"),
])
def test_web_from_config_deep_or_aliased_is_422(web, name, text, needle):
    """Issue 34: these were RecursionErrors answered with HTTP 500."""
    r = web.post("/api/from-config", json={"files": [{"name": name, "text": text}]})
    assert r.status_code == 422, r.text[:300]
    assert needle in r.text


def test_web_body_nested_deeply_is_400(web):
    r = web.post("/api/estimate", content=b'{"model": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                 headers={"content-type": "application/json"})
    assert r.status_code == 400
