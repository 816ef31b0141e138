"""`tuneplan estimate` start-up against kavier's CLI on the same job, run side by side (issue 19 point 7).

    python benchmarks/startup.py --kavier /tmp/kv/bin/kavier [--runs 7] [--importtime] [--base OTHER/src]

kavier lives in its own virtual environment (`python3 -m venv /tmp/kv && /tmp/kv/bin/pip install
kavier`); nothing of it is imported here. The two commands are run alternately (so a load on the
machine hits both alike) after one untimed run each (bytecode and disk cache warm); each run's wall
time and CPU time (user + system of the child) are recorded, and the ratios of the medians and of
the minima printed. tuneplan's bytecode is written by the first run (as pip writes it for an
installed package; PYTHONDONTWRITEBYTECODE is unset for the runs). `--importtime` adds the slowest imports of the tuneplan command
(`python -X importtime`), the list to cut from. `--base OTHER/src` adds another tuneplan tree (the
commit before a change, say `git worktree add /tmp/base main`) to the alternation: its figures and
its ratio to kavier's, measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TUNEPLAN = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100-SXM4-80GB", "--method", "lora",
            "--examples", "1000", "--seq-len", "512"]
KAVIER = ["training", "--model_name", "llama3.1-8b", "--method", "lora", "--gpu_model", "NVIDIA-A100-SXM4-80GB",
          "--tokens_per_sample", "512", "--batch_size", "4", "--number_gpus", "1", "--number_nodes", "1",
          "--total_tokens", str(1000 * 512)]
"""kavier's equivalent: 1,000 examples of 512 tokens = 512,000 tokens; batch 4 (tuneplan's default micro-batch)."""


def _env(src: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # an installed package has its bytecode compiled (pip does it, as kavier's has); a development
    # shell with PYTHONDONTWRITEBYTECODE set would recompile tuneplan's sources on every run instead
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    src = src or str(HERE.parent / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `cmd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def summary(xs: list[float]) -> dict[str, float]:
    return {"min": round(min(xs), 3), "median": round(statistics.median(xs), 3)}


def compare(kavier: str, runs: int, base: str | None = None) -> dict:
    tp_cmd = [sys.executable, "-m", "tuneplan.cli", *TUNEPLAN]
    cmds = {"tuneplan": (tp_cmd, _env()), "kavier": ([kavier, *KAVIER], _env())}
    if base:
        cmds["base"] = (tp_cmd, _env(base))
    for cmd, env in cmds.values():
        timed(cmd, env)
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(runs):
        for k, (cmd, env) in cmds.items():
            got[k].append(timed(cmd, env))
    out: dict = {"runs": runs}
    for what, i in (("wall_s", 0), ("cpu_s", 1)):
        kv = [x[i] for x in got["kavier"]]
        out[what] = {"kavier": summary(kv)}
        for k in (n for n in cmds if n != "kavier"):
            a = [x[i] for x in got[k]]
            out[what][k] = summary(a)
            label = "" if k == "tuneplan" else f"{k}_"
            out[what][label + "ratio_of_medians"] = round(statistics.median(a) / statistics.median(kv), 2)
            out[what][label + "ratio_of_minima"] = round(min(a) / min(kv), 2)
    return out


def slowest_imports(n: int = 25) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the slowest imports of the tuneplan command."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tuneplan.cli", *TUNEPLAN], env=_env(),
                          capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = line.split("|")
        try:
            rows.append((int(cum), name.rstrip()))
        except ValueError:
            continue
    return sorted(rows, reverse=True)[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kavier", required=True, help="kavier's CLI (its own venv)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--base", help="another tuneplan tree's src/ folder, run in the same rounds")
    args = ap.parse_args()
    print(json.dumps(compare(args.kavier, args.runs, args.base), indent=1))
    if args.importtime:
        for us, name in slowest_imports():
            print(f"{us / 1000:8.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
