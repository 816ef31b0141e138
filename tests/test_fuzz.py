"""Fuzz (issue 19 "done when", issue 16 part 6, issue 34 point 7): every subcommand's main() and the web
API driven with random and extreme inputs (and, issue 34: deep nesting, alias expansion, FIFOs and
devices, huge integers, outputs named as inputs). Asserted: no traceback, exit 0 or 2 (1 where a command
documents it: `calibrate` when the rows cannot support a fit; `plan` answers "nothing fits" with 0), every number in
JSON output finite; the web never answers 500. Bounded: few examples each, small search spaces."""

from __future__ import annotations

import json
import math
import string
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import reference_dir  # noqa: E402
from tuneplan.cli import main  # noqa: E402

FUZZ = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

EXTREME = ["0", "-1", "1", "1.5", "nan", "inf", "-inf", "1e308", "1e-308", "99999999999999999999", "", "abc",
           "2", "64", "1024", "1e9", "0x10", " 7 ", "1,2", "\u00e9", "-0"]
number = st.one_of(st.sampled_from(EXTREME), st.integers(-10, 10**12).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
name = st.one_of(st.sampled_from(["Llama-3.1-8B", "Qwen2.5-0.5B", "H100-SXM5-80GB", "A100-SXM4-80GB", "", "zz",
                                  "x" * 2000, "../../etc/passwd", "meta-llama/Llama-3.1-8B", "/dev/null"]),
                 st.text(string.printable, max_size=30))

ESTIMATE_FLAGS = ["--epochs", "--examples", "--tokens-per-example", "--tokens", "--seq-len", "--micro-batch",
                  "--grad-accum", "--gpus", "--nodes", "--tp", "--pp", "--cp", "--ep", "--lora-rank",
                  "--trainable-layers", "--rate", "--grid-gco2-kwh", "--disk-gbs", "--load-time-s", "--interval",
                  "--peak-tflops", "--memory-gib", "--bandwidth-gbs", "--eval-every", "--eval-examples"]
CHOICE_FLAGS = {"--method": ["full", "lora", "qlora", "freeze", "dora", "zz"], "--precision": ["bf16", "fp8", "fp32"],
                "--sharding": ["ddp", "fsdp", "zero3", "zz"], "--lora-targets": ["q,v", "q,zz", "all-linear", ""],
                "--quant": ["none", "nf4", "zz"], "--optimizer": ["adamw", "sgd"]}


def flags(pool: list[str], k: int = 4):
    return st.lists(st.tuples(st.sampled_from(pool), number), max_size=k).map(
        lambda pairs: [x for f, v in pairs for x in (f, v)])


choices = st.lists(st.sampled_from(sorted(CHOICE_FLAGS)), max_size=2, unique=True).flatmap(
    lambda names: st.tuples(*[st.sampled_from(CHOICE_FLAGS[n]) for n in names]).map(
        lambda vals, names=names: [x for n, v in zip(names, vals, strict=True) for x in (n, v)]))


def non_finite(obj) -> list:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in non_finite(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in non_finite(v)]
    return [obj] if isinstance(obj, float) and not math.isfinite(obj) else []


def run(argv: list[str], capsys, allowed=(0, 2)) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out, err[-2000:]
    assert "internal error" not in err, (argv, err[-500:])  # the last-resort guard must never be reached
    assert rc in allowed, (argv, rc, err[-500:])
    if rc == 0 and "--json" in argv and out.strip().startswith(("{", "[")):
        assert not non_finite(json.loads(out)), argv
    return rc, out, err


@FUZZ
@given(model=name, gpu=name, extra=flags(ESTIMATE_FLAGS), pick=choices, as_json=st.booleans())
def test_fuzz_estimate(model, gpu, extra, pick, as_json, capsys):
    argv = ["estimate", "--model", model, "--gpu", gpu, "--seq-len", "512", "--examples", "1000", *extra, *pick]
    run(argv + (["--json"] if as_json else []), capsys)


@FUZZ
@given(extra=flags(["--mfu", "--params", "--peak-tflops", "--examples", "--tokens-per-example", "--gpus",
                    "--epochs", "--bytes-per-param", "--flops-per-param-token", "--memory-gib"], 5))
def test_fuzz_planner_seed(extra, capsys):
    run(["estimate", "--estimator", "planner", "--params", "7e9", "--peak-tflops", "989", "--examples", "1000",
         "--tokens-per-example", "512", *extra, "--json"], capsys)


@FUZZ
@given(extra=flags(["--max-gpus", "--examples", "--tokens-per-example", "--seq-len", "--global-batch",
                    "--micro-batch", "--epochs", "--deadline", "--budget", "--gpus-per-node", "--top"], 3),
       model=st.sampled_from(["Qwen2.5-0.5B", "Llama-3.1-8B", "zz"]))
def test_fuzz_plan(extra, model, capsys):
    argv = ["plan", "--model", model, "--gpus", "H100-SXM5-80GB", "--methods", "lora", "--max-gpus", "2",
            "--micro-batches", "1,4", "--examples", "1000", "--tokens-per-example", "512", *extra, "--json"]
    run(argv, capsys, allowed=(0, 2))  # nothing fits is an answer (exit 0)


@FUZZ
@given(extra=flags(["--max-micro-batch", "--seq-len", "--gpus", "--micro-batch", "--lora-rank"], 3))
def test_fuzz_curve(extra, capsys):
    run(["curve", "--model", "Qwen2.5-0.5B", "--gpu", "H100-SXM5-80GB", "--seq-len", "256", *extra, "--json"],
        capsys)


@FUZZ
@given(cmd=st.sampled_from(["models", "gpus", "serve", "probe", "profile", "calibrate", "validate", "predict",
                            "nosuch"]),
       extra=flags(["--search", "--port", "--threads", "--layers", "--timeout", "--max-mem-gib", "--steps",
                    "--warmup", "--seed", "--interval", "--reveal", "--split", "--learners", "--out", "--runs"], 2))
def test_fuzz_other_commands_bad_values(cmd, extra, tmp_path_factory, capsys):
    """Commands that run long or bind ports are driven with values that must be refused up front (or
    cheap ones: the catalogs)."""
    if cmd in ("serve", "probe", "profile", "calibrate", "validate", "predict"):
        # a guaranteed-bad value first, so nothing long starts
        bad = {"serve": ["--port", "-5"], "probe": ["--threads", "0"],
               "profile": ["--model", "Qwen2.5-0.5B", "--timeout", "nan"],
               "calibrate": ["--runs", "/nonexistent.csv", "--out", "/nonexistent-dir/c.json"],
               "validate": ["--runs", "/nonexistent.csv"],
               "predict": ["--runs", "/nonexistent.csv", "--out", str(tmp_path_factory.mktemp("p") / "o.csv")]}[cmd]
        extra = [x for x in extra if x not in ("--runs", "--out", "--port", "--threads", "--timeout")][:0]
        run([cmd, *bad, *extra], capsys)
    else:
        run([cmd, *extra], capsys)


# --- the web API ----------------------------------------------------------------------------------

web_value = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**20), st.floats(allow_nan=False),
                      st.sampled_from([1e308, -1e308, 0, 1e9, 2e8]), st.text(max_size=20), st.lists(st.integers(), max_size=3))
ESTIMATE_KEYS = ["model", "gpu", "method", "gpus", "micro_batch", "grad_accum", "seq_len", "examples",
                 "tokens_per_example", "tokens", "epochs", "tp", "pp", "cp", "lora_rank", "lora_targets", "rate",
                 "precision", "sharding", "interval", "max_gpus", "methods", "gpu_counts", "micro_batches"]


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    with TestClient(create_app(warm_up=False), raise_server_exceptions=False) as c:
        yield c


BASE = {"model": "Qwen2.5-0.5B", "gpu": "H100-SXM5-80GB", "seq_len": 512, "examples": 1000}


@FUZZ
@given(body=st.dictionaries(st.sampled_from(ESTIMATE_KEYS), web_value, max_size=4),
       endpoint=st.sampled_from(["/api/estimate", "/api/plan", "/api/models"]))
def test_fuzz_web(client, body, endpoint):
    payload = {**BASE, **body}
    if endpoint == "/api/plan":
        payload = {"gpus": ["H100-SXM5-80GB"], "methods": ["lora"], "max_gpus": 2, "micro_batches": [1, 4],
                   **{k: v for k, v in payload.items() if k != "gpu"}}
    if endpoint == "/api/models":
        r = client.get(endpoint, params={"q": str(body.get("model", ""))[:300]})
    else:
        r = client.post(endpoint, json=payload)
    assert r.status_code < 500, (endpoint, payload, r.text[:300])
    assert not non_finite(r.json()), (endpoint, payload)


config_value = st.one_of(st.integers(-5, 10**12), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                         st.sampled_from([2e8, 1e9, 1e308, 10**30]))


@FUZZ
@given(over=st.dictionaries(st.sampled_from(["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size",
                                             "num_attention_heads", "num_key_value_heads", "layer_types"]),
                            config_value, max_size=3))
def test_fuzz_web_model_config(client, over):
    from conftest import tiny_llama_config

    cfg = {**tiny_llama_config(), **over}
    r = client.post("/api/model-config", content=json.dumps({"config_json": cfg}, allow_nan=True),
                    headers={"content-type": "application/json"})
    assert r.status_code < 500, (over, r.text[:300])


# --- runs files (issue 16 part 6) -----------------------------------------------------------------

def _reference_lines() -> list[str]:
    ref = reference_dir()
    if ref is None:
        pytest.skip("no shared reference runs")
    return (ref / "llmftbench.csv").read_text(encoding="utf-8").splitlines()[:8]


def _mutate(lines: list[str], ops: list[tuple[str, int, str]]) -> bytes:
    out = list(lines)
    for op, i, text in ops:
        i = i % max(len(out), 1)
        if op == "truncate" and out:
            out[i] = out[i][: len(out[i]) // 2]
        elif op == "drop" and len(out) > 1:
            out.pop(i)
        elif op == "cell" and out:
            cells = out[i].split(",")
            cells[hash(text) % len(cells)] = text
            out[i] = ",".join(cells)
        elif op == "quote" and out:
            out[i] = '"' + out[i]
    data = ("\n".join(out) + "\n").encode("utf-8", "surrogatepass")
    if any(op == "byte" for op, _, _ in ops):
        data = data[: len(data) // 3] + b"\xff\xfe" + data[len(data) // 3:]
    return data


ops = st.lists(st.tuples(st.sampled_from(["truncate", "drop", "cell", "quote", "byte", "header"]),
                         st.integers(0, 7), st.sampled_from(["", "nan", "-1", "1.5", "1e308", "x" * 70_000, "a;b",
                                                             "\"", "0", "abc"])), max_size=4)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=ops, header_only=st.booleans(), cmd=st.sampled_from(["predict", "calibrate", "validate"]))
def test_fuzz_runs_files(ops, header_only, cmd, tmp_path_factory, capsys):
    lines = _reference_lines()
    if header_only:
        lines = lines[:1]
    if any(op == "header" for op, _, _ in ops):
        lines = [lines[0].replace("tokens_per_s", "tps")] + lines[1:]
    d = tmp_path_factory.mktemp("runs")
    p = Path(d) / "runs.csv"
    p.write_bytes(_mutate(lines, [o for o in ops if o[0] != "header"]))
    argv = {"predict": ["predict", "--runs", str(p), "--out", str(d / "pred.csv"), "--interval", "0"],
            "calibrate": ["calibrate", "--runs", str(p), "--out", str(d / "cal.json")],
            "validate": ["validate", "--runs", str(p), "--learners", "kavier", "--json"]}[cmd]
    run(argv, capsys, allowed=(0, 1, 2) if cmd == "calibrate" else (0, 2))


# --- issue 34: depth, alias expansion, FIFOs, huge integers, writers over inputs ----------------------

PATH_FLAGS = {"--from": "estimate --gpu H100-SXM5-80GB",
              "--gpu-file": "estimate --model Qwen2.5-0.5B --seq-len 256 --examples 100",
              "--prices": "estimate --model Qwen2.5-0.5B --gpu H100-SXM5-80GB --seq-len 256 --examples 100",
              "--model": "estimate --gpu H100-SXM5-80GB --seq-len 256 --examples 100",
              "--calibration": "estimate --model Qwen2.5-0.5B --gpu H100-SXM5-80GB --seq-len 256 --examples 100"}
"""Flags that name a file a command reads, each with a command line that reads it."""
SUFFIX = {"--from": ".yaml", "--gpu-file": ".yaml", "--prices": ".yaml", "--model": ".json", "--calibration": ".json"}


def _deep_text(style: str, depth: int) -> str:
    if style == "flow":
        return "a: " + "[" * depth + "]" * depth + "\n"
    if style == "flow-map":
        return "a: " + "{b: " * depth + "1" + "}" * depth + "\n"
    if style == "block":
        return "".join(" " * i + "k:\n" for i in range(depth)) + " " * depth + "k: 1\n"
    return '{"a": ' + "[" * depth + "]" * depth + "}"


@FUZZ
@given(flag=st.sampled_from(sorted(PATH_FLAGS)), style=st.sampled_from(["flow", "flow-map", "block", "json"]),
       depth=st.one_of(st.integers(1, 80), st.integers(80, 5000)))
def test_fuzz_depth(flag, style, depth, tmp_path_factory, capsys):
    depth = min(depth, 400) if style == "block" else depth  # block text grows as depth^2
    p = tmp_path_factory.mktemp("deep") / ("cfg" + (".json" if style == "json" else SUFFIX[flag]))
    p.write_text(_deep_text(style, depth))
    run([*PATH_FLAGS[flag].split(), flag, str(p)], capsys)


@FUZZ
@given(flag=st.sampled_from(["--from", "--gpu-file", "--prices"]), fan=st.integers(1, 12), levels=st.integers(1, 10),
       key=st.sampled_from(["datasets", "base_model", "prices", "peak_tflops", "x"]))
def test_fuzz_alias_expansion(flag, fan, levels, key, tmp_path_factory, capsys):
    lines = ["l0: &l0 [" + ", ".join(['"x"'] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]")
    lines += ["base_model: Qwen/Qwen2.5-0.5B", "name: mine", f"{key}: *l{levels - 1}"]
    p = tmp_path_factory.mktemp("alias") / "cfg.yaml"
    p.write_text("\n".join(lines) + "\n")
    run([*PATH_FLAGS[flag].split(), flag, str(p)], capsys)


@FUZZ
@given(flag=st.sampled_from(sorted(PATH_FLAGS)), kind=st.sampled_from(["fifo", "fifo-suffix", "/dev/null", "/dev/zero",
                                                                      "/dev/full", "/proc/self/fd/0"]))
def test_fuzz_fifo_and_devices(flag, kind, tmp_path_factory, capsys):
    import os

    if kind.startswith("fifo"):
        path = str(tmp_path_factory.mktemp("fifo") / ("f" + (SUFFIX[flag] if kind == "fifo-suffix" else "")))
        os.mkfifo(path)
    else:
        path = kind
    run([*PATH_FLAGS[flag].split(), flag, path], capsys)


INT_FLAGS = {"estimate --model Qwen2.5-0.5B --gpu H100-SXM5-80GB --examples 100": [
    "--seq-len", "--micro-batch", "--grad-accum", "--gpus", "--nodes", "--tp", "--pp", "--cp", "--ep", "--lora-rank",
    "--galore-rank", "--trainable-layers", "--eval-every", "--eval-examples", "--save-every"],
    "curve --model Qwen2.5-0.5B --gpu H100-SXM5-80GB": ["--seq-len", "--max-micro-batch", "--gpus", "--lora-rank"],
    "plan --model Qwen2.5-0.5B --gpus H100-SXM5-80GB --methods lora --max-gpus 1 --micro-batches 1 --examples 100 "
    "--tokens-per-example 256": ["--max-gpus", "--gpu-counts", "--micro-batches", "--global-batch", "--top",
                                 "--gpus-per-node", "--grad-accums"],
    "memory Qwen2.5-0.5B": ["--seq-len", "--micro-batch", "--gpus"]}
int_case = st.sampled_from(sorted(INT_FLAGS)).flatmap(lambda cmd: st.tuples(st.just(cmd), st.sampled_from(INT_FLAGS[cmd])))


@FUZZ
@given(case=int_case, digits=st.one_of(st.integers(19, 40), st.integers(300, 5000)), sign=st.sampled_from(["", "-"]))
def test_fuzz_huge_integers(case, digits, sign, capsys):
    cmd, flag = case
    run([*cmd.split(), flag, sign + "9" * digits, "--json"], capsys, allowed=(0, 1, 2) if cmd.startswith("plan") else (0, 2))


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cmd=st.sampled_from(["predict", "plan", "calibrate", "plan-runs"]),
       target=st.sampled_from(["runs", "runs-folder", "calibration", "from", "prices"]), force=st.booleans())
def test_fuzz_writer_over_its_input(cmd, target, force, tmp_path_factory, capsys):
    """A command's output named as one of its inputs is refused (--force or not) and the input kept."""
    lines = _reference_lines()[:4]
    d = Path(tmp_path_factory.mktemp("over"))
    runs = d / "runs.csv"
    runs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cal, cfg, prices = d / "cal.json", d / "cfg.yaml", d / "prices.yaml"
    cal.write_text("{}\n")
    cfg.write_text("base_model: Qwen/Qwen2.5-0.5B\nsequence_len: 256\n")
    prices.write_text("prices: []\n")
    out = {"runs": runs, "runs-folder": d / "other.csv", "calibration": cal, "from": cfg, "prices": prices}[target]
    argv = {"predict": ["predict", "--runs", str(runs if target != "runs-folder" else d)],
            "calibrate": ["calibrate", "--runs", str(runs if target != "runs-folder" else d)],
            "plan": ["plan", "--model", "Qwen2.5-0.5B", "--gpus", "H100-SXM5-80GB", "--methods", "lora"],
            "plan-runs": ["plan", "--runs", str(runs)]}[cmd]
    if target == "calibration":
        argv += ["--base" if cmd == "calibrate" else "--calibration", str(cal)]
    if target == "from" and cmd.startswith("plan"):
        argv += ["--from", str(cfg)]
    if target == "prices" and cmd.startswith("plan"):
        argv += ["--prices", str(prices)]
    is_input = target in ("runs", "calibration") or (target == "runs-folder" and cmd in ("predict", "calibrate")) or (
        target in ("from", "prices") and cmd.startswith("plan"))
    if target == "runs-folder" and cmd == "plan-runs":
        is_input = False
    before = {p: p.read_bytes() for p in (runs, cal, cfg, prices)}
    rc, _, err = run([*argv, "--out", str(out), *(["--force"] if force else [])], capsys, allowed=(0, 1, 2))
    if is_input:
        assert rc == 2 and "also an input" in err, (argv, err)
    if is_input:
        assert {p: p.read_bytes() for p in before} == before
