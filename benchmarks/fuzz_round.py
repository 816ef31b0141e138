"""Issue 34's fuzz round: thousands of CLI cases and web requests of bad and extreme input, counted.

    python benchmarks/fuzz_round.py [--cli 1600] [--web 1600] [--seed 0] [--workers 2] [--json FILE]

CLI cases run `tuneplan.cli.main(argv)` in long-lived worker processes (one case at a time each, its
stdout and stderr captured); web requests go to a `tuneplan serve` started here on 127.0.0.1 (a free
port) and are sent one at a time over HTTP. Cases are drawn deterministically from `--seed`: every
command with random flags and extreme values, integers of up to 5,000 digits, config and GPU/price
files nested up to 5,000 levels or holding alias bombs, FIFOs and devices as paths, outputs named as
inputs (and the input checked unchanged afterwards), mutated runs files; on the web, every endpoint
with random bodies, deep and aliased configs, bodies nested deeply.

Counted: cases; internal errors (the CLI's last-resort "internal error", a traceback, an exit code
other than 0, 1 or 2, an input file changed by a writer); HTTP 500s; hangs (a case over 5 s; one
over 60 s is killed and its worker restarted). Prints the totals and the first failures of each kind.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HANG_S = 5.0
KILL_S = 60.0
HERE = Path(__file__).resolve().parent
REFERENCE = HERE.parent.parent / "shared" / "reference" / "runs"

EXTREME = ["0", "-1", "1", "1.5", "nan", "inf", "-inf", "1e308", "1e-308", "99999999999999999999", "", "abc",
           "2", "64", "1024", "1e9", "0x10", " 7 ", "1,2", "\u00e9", "-0", "9" * 25, "9" * 400, "9" * 5000,
           "-" + "9" * 400, "1_000", "٣", "1e400", "4096", "65536"]
MODELS = ["Qwen2.5-0.5B", "Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "zz", "", "x" * 2000, "/dev/null",
          "../../etc/passwd", "Mixtral-8x7B-v0.1"]
GPUS = ["H100-SXM5-80GB", "A100-SXM4-80GB", "L40S-48GB", "A100", "zz", "", "local-cpu"]
EST_FLAGS = ["--epochs", "--examples", "--tokens-per-example", "--tokens", "--seq-len", "--micro-batch",
             "--grad-accum", "--gpus", "--nodes", "--tp", "--pp", "--cp", "--ep", "--lora-rank", "--galore-rank",
             "--trainable-layers", "--rate", "--grid-gco2-kwh", "--disk-gbs", "--load-time-s", "--interval",
             "--peak-tflops", "--memory-gib", "--bandwidth-gbs", "--eval-every", "--eval-examples", "--save-every"]
CHOICES = {"--method": ["full", "lora", "qlora", "freeze", "dora", "zz"], "--precision": ["bf16", "fp8", "fp32", "zz"],
           "--sharding": ["ddp", "fsdp", "zero3", "zz"], "--lora-targets": ["q,v", "q,zz", "all-linear", ""]}
PLAN_BASE = ["plan", "--gpus", "H100-SXM5-80GB,A100-SXM4-80GB", "--methods", "lora,qlora", "--max-gpus", "4",
             "--micro-batches", "1,4"]
PLAN_FLAGS = ["--max-gpus", "--examples", "--tokens-per-example", "--seq-len", "--global-batch", "--micro-batch",
              "--epochs", "--deadline", "--budget", "--gpus-per-node", "--top", "--gpu-counts", "--interval"]


# --- files the cases read ------------------------------------------------------------------------

def make_files(d: Path) -> dict[str, str]:
    """Bad and good input files in `d` (FIFOs included), by name."""
    f: dict[str, str] = {}

    def put(name: str, text: str) -> None:
        (d / name).write_text(text, encoding="utf-8")
        f[name] = str(d / name)

    for depth in (10, 63, 65, 100, 1000, 3000, 5000):
        put(f"flow{depth}.yaml", "a: " + "[" * depth + "]" * depth + "\n")
        put(f"map{depth}.yaml", "a: " + "{b: " * depth + "1" + "}" * depth + "\n")
        put(f"deep{depth}.json", '{"a": ' + "[" * depth + "]" * depth + "}")
    for depth in (63, 65, 300):
        put(f"block{depth}.yaml", "".join(" " * i + "k:\n" for i in range(depth)) + " " * depth + "k: 1\n")
    for fan, levels in ((9, 9), (4, 12), (30, 5), (2, 30)):
        lines = ["l0: &l0 [" + ", ".join(['"x"'] * fan) + "]"]
        lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]" for i in range(1, levels)]
        for key in ("datasets", "base_model", "prices", "peak_tflops"):
            put(f"bomb{fan}x{levels}-{key}.yaml", "\n".join(
                lines + ["base_model: Qwen/Qwen2.5-0.5B", "name: mine", f"{key}: *l{levels - 1}"]) + "\n")
    put("axolotl.yaml", "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nsequence_len: 512\nmicro_batch_size: 2\n")
    put("gpu.yaml", "name: mine\nmemory_gib: 80\nmemory_bandwidth_gbs: 2000\npeak_tflops: 500\n")
    put("tag.yaml", "base_model: !!python/object/apply:os.system ['true']\n")
    put("bin.json", "\x00\x01binary")
    for name in ("fifo", "fifo.yaml", "fifo.json", "fifo.csv"):
        os.mkfifo(d / name)
        f[name] = str(d / name)
    lines = (REFERENCE / "llmftbench.csv").read_text(encoding="utf-8").splitlines()
    put("runs.csv", "\n".join(lines[:6]) + "\n")
    (d / "runsdir").mkdir()
    (d / "runsdir" / "a.csv").write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")
    f["runsdir"] = str(d / "runsdir")
    return f


PATH_VALUES = ["fifo", "fifo.yaml", "fifo.json", "fifo.csv", "/dev/zero", "/dev/null", "/dev/full", "/proc/self/fd/0"]


# --- the CLI cases ------------------------------------------------------------------------------

def value(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.6:
        return rng.choice(EXTREME)
    if r < 0.8:
        return str(rng.randint(-10, 10**6))
    if r < 0.9:
        return "9" * rng.randint(19, 5000)
    return repr(rng.uniform(-1e6, 1e6))


def cli_cases(n: int, rng: random.Random, files: dict[str, str]) -> list[dict]:
    """`n` cases: {"argv": [...], "keep": [paths that must be unchanged]}."""
    def fp(name: str) -> str:
        return files.get(name, name)

    deep = [k for k in files if k.startswith(("flow", "map", "deep", "block", "bomb")) or k in ("tag.yaml", "bin.json")]
    kinds = ["estimate"] * 30 + ["curve"] * 6 + ["memory"] * 8 + ["plan"] * 8 + ["path"] * 20 + ["huge"] * 12 + \
        ["writer"] * 8 + ["catalog"] * 4 + ["runs"] * 4 + ["profile"] * 4 + ["validate"] * 2
    out: list[dict] = []
    for _ in range(n):
        kind = rng.choice(kinds)
        keep: list[str] = []
        expect_refusal = False
        if kind == "estimate":
            argv = ["estimate", "--model", rng.choice(MODELS), "--gpu", rng.choice(GPUS), "--seq-len", "512",
                    "--examples", "1000"]
            for _ in range(rng.randint(0, 4)):
                argv += [rng.choice(EST_FLAGS), value(rng)]
            for flag in rng.sample(sorted(CHOICES), rng.randint(0, 2)):
                argv += [flag, rng.choice(CHOICES[flag])]
            argv += ["--json"] if rng.random() < 0.5 else []
        elif kind == "curve":
            argv = ["curve", "--model", rng.choice(MODELS[:3]), "--gpu", rng.choice(GPUS[:3]), "--seq-len",
                    rng.choice(["8", "256", "2048", value(rng)]), "--max-micro-batch",
                    rng.choice(["16", "4096", "8192", "8193", "65536", value(rng)])]
            argv += ["--json"] if rng.random() < 0.5 else []
        elif kind == "memory":
            argv = ["memory", rng.choice(MODELS)]
            for _ in range(rng.randint(0, 3)):
                argv += [rng.choice(["--seq-len", "--micro-batch", "--gpus", "--lora-rank"]), value(rng)]
        elif kind == "plan":
            argv = [*PLAN_BASE, "--model", rng.choice(MODELS[:3]), "--examples", "1000", "--tokens-per-example", "512"]
            for _ in range(rng.randint(0, 3)):
                argv += [rng.choice(PLAN_FLAGS), value(rng)]
            argv += ["--json"]
        elif kind == "path":  # a config, GPU, price, calibration or model file: deep, aliased, a FIFO, a device
            flag = rng.choice(["--from", "--gpu-file", "--prices", "--model", "--calibration"])
            path = fp(rng.choice(deep + PATH_VALUES))
            cmd = rng.choice(["estimate", "curve"] if flag != "--from" else ["estimate", "curve", "plan"])
            argv = [cmd, flag, path]
            if flag != "--model" and flag != "--from":
                argv += ["--model", "Qwen2.5-0.5B"]
            if cmd in ("estimate", "curve") and flag not in ("--gpu-file", "--from"):
                argv += ["--gpu", "H100-SXM5-80GB"]
            if cmd == "plan":
                argv += ["--gpus", "H100-SXM5-80GB", "--methods", "lora", "--max-gpus", "2", "--json"]
            argv += ["--seq-len", "256", "--examples", "100"] if flag != "--from" else []
        elif kind == "huge":
            cmd = rng.choice(["estimate", "curve", "memory", "plan"])
            digits = "9" * rng.choice([19, 25, 40, 309, 400, 4300, 5000])
            if cmd == "estimate":
                argv = ["estimate", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "512",
                        "--examples", "100", rng.choice(EST_FLAGS), digits]
            elif cmd == "curve":
                argv = ["curve", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM5-80GB",
                        rng.choice(["--seq-len", "--max-micro-batch", "--gpus", "--lora-rank"]), digits]
            elif cmd == "memory":
                argv = ["memory", "Llama-3.1-8B", rng.choice(["--seq-len", "--micro-batch", "--gpus"]), digits]
            else:
                argv = [*PLAN_BASE, "--model", "Qwen2.5-0.5B", "--examples", "100", "--tokens-per-example", "256",
                        rng.choice(["--max-gpus", "--gpu-counts", "--micro-batches", "--global-batch", "--top"]),
                        digits, "--json"]
        elif kind == "writer":  # an output named as one of the command's inputs: refused, the input unchanged
            force = ["--force"] if rng.random() < 0.5 else []
            cmd = rng.choice(["predict", "calibrate", "plan-runs", "plan-from"])
            in_dir = rng.random() < 0.5
            runs = files["runsdir"] if in_dir else files["runs.csv"]
            out_path = str(Path(files["runsdir"]) / "x.csv") if in_dir else files["runs.csv"]
            if cmd == "predict":
                argv = ["predict", "--runs", runs, "--out", out_path, *force]
            elif cmd == "calibrate":
                argv = ["calibrate", "--runs", runs, "--learner", "kavier", "--from-scratch", "--out", out_path, *force]
            elif cmd == "plan-runs":
                argv = ["plan", "--runs", files["runs.csv"], "--out", files["runs.csv"], *force]
            else:
                argv = ["plan", "--from", files["axolotl.yaml"], "--gpus", "H100-SXM5-80GB", "--out",
                        files["axolotl.yaml"], *force]
            keep = [files["runs.csv"], files["axolotl.yaml"], str(Path(files["runsdir"]) / "a.csv")]
            expect_refusal = True
        elif kind == "profile":  # always one value refused up front, so no measurement starts
            bad = rng.choice([["--steps", "9" * rng.choice([25, 400, 5000])], ["--steps", "0"], ["--warmup", "-1"],
                              ["--seq-len", "9" * 400], ["--micro-batch", "0,1"], ["--layers", "9" * 30],
                              ["--seed", "-" + "9" * 400], ["--group-size", "9" * 40], ["--budget", value(rng)],
                              ["--auto", "--budget", rng.choice(["0", "0.5s", "9" * 400, "soon", ""])],
                              ["--timeout", rng.choice(["nan", "-1", "0"])], ["--lora-alpha", "9" * 400],
                              ["--model", fp(rng.choice(deep + PATH_VALUES))]])
            argv = ["profile", "--model", "Qwen2.5-0.5B", "--out", "prof.csv", "--no-progress", *bad]
        elif kind == "validate":
            argv = ["validate", "--runs", files["runs.csv"], "--learners", "kavier", "--json",
                    rng.choice(["--reveal", "--seed", "--test-fraction", "--interval"]), value(rng),
                    "--split", rng.choice(["random", "by-source", "zz"])]
        elif kind == "catalog":
            argv = [rng.choice(["models", "gpus"]), *rng.choice([[], ["--json"], ["--search", value(rng)]])]
        else:  # runs-file commands on odd paths
            cmd = rng.choice(["predict", "validate", "calibrate"])
            path = fp(rng.choice(["fifo.csv", "runsdir", "/dev/null", "bin.json", "deep3000.json"]))
            argv = {"predict": ["predict", "--runs", path, "--out", os.devnull + "x"],
                    "validate": ["validate", "--runs", path, "--learners", "kavier", "--json"],
                    "calibrate": ["calibrate", "--runs", path, "--out", fp("fifo.json")]}[cmd]
        out.append({"argv": argv, "keep": keep, "refuse": expect_refusal})
    return out


WORKER = r"""
import contextlib, io, json, os, sys, time, traceback
os.environ.setdefault("TUNEPLAN_NO_PROGRESS", "1")
from tuneplan.cli import main
for line in sys.stdin:
    argv = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except BaseException:
            rc = -1
            err.write("Traceback " + traceback.format_exc(limit=3))
    sys.__stdout__.write(json.dumps({"rc": rc, "s": time.perf_counter() - t0, "err": err.getvalue()[-600:]}) + "\n")
    sys.__stdout__.flush()
"""


class Worker:
    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.start()

    def start(self) -> None:
        self.p = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, cwd=self.cwd, bufsize=1)

    def run(self, argv: list[str]) -> dict:
        t0 = time.perf_counter()
        self.p.stdin.write(json.dumps(argv) + "\n")
        self.p.stdin.flush()
        ready, _, _ = select.select([self.p.stdout], [], [], KILL_S)
        if not ready:
            self.p.kill()
            self.p.wait()
            self.start()
            return {"rc": None, "s": time.perf_counter() - t0, "err": "killed"}
        line = self.p.stdout.readline()
        if not line:
            self.p.wait()
            self.start()
            return {"rc": -2, "s": time.perf_counter() - t0, "err": "worker died"}
        return json.loads(line)

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(10)


def digest(paths: list[str]) -> dict[str, str]:
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths if os.path.isfile(p)}


def run_cli(cases: list[dict], workers: int, cwd: str, report: dict) -> None:
    import concurrent.futures as cf

    pool = [Worker(cwd) for _ in range(workers)]
    free = list(pool)

    def one(case: dict) -> tuple[dict, dict]:
        w = free.pop()
        try:
            before = digest(case["keep"])
            res = w.run(case["argv"])
            res["changed"] = [p for p, h in digest(case["keep"]).items() if before.get(p) != h]
            if case["refuse"] and res["rc"] != 2:  # a writer over its input must be refused
                res["changed"].append(f"not refused (rc {res['rc']})")
            return case, res
        finally:
            free.append(w)

    with cf.ThreadPoolExecutor(workers) as ex:
        for case, res in ex.map(one, cases):
            count(report, "cli", case["argv"], res["rc"], res["s"], res["err"], res["changed"])
    for w in pool:
        w.close()


def count(report: dict, where: str, what, rc, seconds: float, err: str, changed=()) -> None:
    report["cases"] += 1
    report[f"{where}_cases"] += 1
    tally = report.setdefault(f"{where}_{'exit_codes' if where == 'cli' else 'statuses'}", {})
    tally[str(rc)] = tally.get(str(rc), 0) + 1
    shown = " ".join(map(str, what))[:200] if isinstance(what, list) else str(what)[:200]
    if where == "cli":
        bad = rc not in (0, 1, 2) or "internal error" in err or "Traceback" in err or changed
        if bad:
            report["internal_errors"] += 1
            report["examples"].append(f"internal: {shown} -> rc {rc} {err[-300:]!r} {list(changed)}")
    elif rc is None or rc >= 500:
        report["http_500"] += 1
        report["examples"].append(f"HTTP {rc}: {shown} {err[-300:]!r}")
    if seconds > HANG_S or rc is None:
        report["hangs"] += 1
        report["examples"].append(f"hang {seconds:.1f} s: {shown}")


# --- the web cases ------------------------------------------------------------------------------

def web_cases(n: int, rng: random.Random) -> list[tuple[str, str, bytes | None]]:
    """(method, path, body) requests."""
    keys = ["model", "gpu", "method", "gpus", "micro_batch", "grad_accum", "seq_len", "examples",
            "tokens_per_example", "tokens", "epochs", "tp", "pp", "cp", "ep", "lora_rank", "lora_targets", "rate",
            "precision", "sharding", "interval", "max_gpus", "methods", "gpu_counts", "micro_batches"]

    def jvalue() -> str:
        r = rng.random()
        if r < 0.3:
            return json.dumps(rng.choice([None, True, 0, -1, 1.5, 1e308, 2e8, "", "zz", [1, 2], {"a": 1}]))
        if r < 0.5:
            return "9" * rng.choice([19, 25, 309, 400, 4000])
        if r < 0.6:
            return rng.choice(["1e400", "-1e400", "NaN", "Infinity"])
        return json.dumps(rng.choice([1, 2, 4, 512, 1000, 8192, "lora", "H100-SXM5-80GB", "Qwen2.5-0.5B"]))

    def obj(base: dict, k: int) -> bytes:
        parts = {**{key: json.dumps(v) for key, v in base.items()}, **{rng.choice(keys): jvalue() for _ in range(k)}}
        return ("{" + ",".join(f'"{key}":{v}' for key, v in parts.items()) + "}").encode()

    def config_text() -> str:
        r = rng.random()
        d = rng.choice([10, 63, 65, 300, 1000, 3000, 20000])
        if r < 0.3:
            return "a: " + "[" * d + "]" * d
        if r < 0.45:
            return '{"a": ' + "[" * d + "]" * d + "}"
        if r < 0.7:
            fan, levels = rng.choice([(9, 9), (4, 12), (30, 5)])
            lines = ["l0: &l0 [" + ", ".join(['"x"'] * fan) + "]"]
            lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]" for i in range(1, levels)]
            return "\n".join(lines + ["base_model: Qwen/Qwen2.5-0.5B", f"{rng.choice(['datasets', 'x'])}: *l{levels - 1}"])
        if r < 0.8:
            return "base_model: !!python/object/apply:os.system ['true']"
        return "base_model: Qwen/Qwen2.5-0.5B\nsequence_len: " + rng.choice(["512", "9" * 400, "-1", "null"])

    out: list[tuple[str, str, bytes | None]] = []
    base = {"model": "Qwen2.5-0.5B", "gpu": "H100-SXM5-80GB", "seq_len": 512, "examples": 1000}
    for _ in range(n):
        r = rng.random()
        if r < 0.4:
            out.append(("POST", "/api/estimate", obj(base, rng.randint(0, 4))))
        elif r < 0.5:
            plan = {"model": "Qwen2.5-0.5B", "gpus": ["H100-SXM5-80GB"], "methods": ["lora"], "max_gpus": 2,
                    "micro_batches": [1, 4], "seq_len": 512, "examples": 1000}
            out.append(("POST", "/api/plan", obj(plan, rng.randint(0, 2))))
        elif r < 0.75:
            files = [{"name": rng.choice(["a.yml", "a.json", "a.yaml"]), "text": config_text()}]
            out.append(("POST", "/api/from-config", json.dumps({"files": files}).encode()))
        elif r < 0.85:
            d = rng.choice([5, 9, 100, 900, 3000])
            cfg = '{"a":' * d + "1" + "}" * d
            out.append(("POST", rng.choice(["/api/model-config", "/api/estimate"]),
                        ('{"gpu":"H100-SXM5-80GB","seq_len":512,"config_json":' + cfg + "}").encode()))
        elif r < 0.92:
            d = rng.choice([100, 1000, 5000])
            out.append(("POST", rng.choice(["/api/estimate", "/api/from-config", "/api/plan"]),
                        ('{"model":' + "[" * d + "]" * d + "}").encode()))
        else:
            q = urllib.request.quote(rng.choice(["llama", "", "x" * 3000, "\u00e9", "%00", "9" * 400]))
            out.append(("GET", rng.choice(["/api/models?q=", "/api/gpus?q=", "/api/options?x="]) + q, None))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_web(cases: list[tuple[str, str, bytes | None]], report: dict) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", "import sys; from tuneplan.cli import main; sys.exit(main())",
                               "serve", "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # up to 60 s to start
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
                    r.read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit(f"tuneplan serve did not answer on {base} within 60 s")
        for method, path, body in cases:
            req = urllib.request.Request(base + path, data=body, method=method,
                                         headers={"content-type": "application/json"} if body is not None else {})
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=KILL_S) as r:
                    status, text = r.status, ""
                    r.read()
            except urllib.error.HTTPError as exc:
                status, text = exc.code, exc.read().decode("utf-8", "replace")
            except (TimeoutError, OSError) as exc:
                status, text = None, repr(exc)
            count(report, "web", f"{method} {path[:60]} {(body or b'')[:100]!r}", status, time.perf_counter() - t0, text)
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> int:
    global KILL_S
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", type=int, default=1600, help="CLI cases (default 1600)")
    ap.add_argument("--web", type=int, default=1600, help="web requests (default 1600)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="CLI worker processes (default 2)")
    ap.add_argument("--json", help="write the totals and the failures as JSON here")
    ap.add_argument("--kill", type=float, default=KILL_S, help=f"seconds before a case is killed (default {KILL_S:g})")
    args = ap.parse_args()
    KILL_S = args.kill
    rng = random.Random(args.seed)
    report = {"cases": 0, "cli_cases": 0, "web_cases": 0, "internal_errors": 0, "http_500": 0, "hangs": 0,
              "examples": []}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tuneplan-fuzz-") as tmp:
        files = make_files(Path(tmp))
        if args.cli:
            run_cli(cli_cases(args.cli, rng, files), args.workers, tmp, report)
    if args.web:
        run_web(web_cases(args.web, rng), report)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"cases {report['cases']} (CLI {report['cli_cases']}, web {report['web_cases']}): internal errors "
          f"{report['internal_errors']}, HTTP 500s {report['http_500']}, hangs (> {HANG_S:g} s) {report['hangs']}; "
          f"{report['seconds']} s")
    print(f"CLI exit codes {report.get('cli_exit_codes', {})}; HTTP statuses {report.get('web_statuses', {})}")
    for line in report["examples"][:30]:
        print("  " + line)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 1 if report["internal_errors"] or report["http_500"] or report["hangs"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
