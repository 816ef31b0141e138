"""Issue 19 point 7, measured side by side: `tuneplan estimate` start-up against kavier's CLI, `plan`
over ~100k candidates, and `predict` rows per second.

    python benchmarks/robust_speed.py --kavier /tmp/kavier-venv/bin/kavier [--rows 20000] [--repeat 5]
    python benchmarks/robust_speed.py --predict-only --rows 200000 [--keep runs200k.csv]   # predict rows/s

`--write-runs F --rows N` only writes the predict benchmark's runs file (deterministic: the same N
rows every time), for `/usr/bin/time -v tuneplan predict --runs F --out O.csv` by hand.

kavier's CLI lives in its own virtual environment (`python3 -m venv /tmp/kavier-venv &&
/tmp/kavier-venv/bin/pip install kavier==0.5.3`); nothing of it is imported here. Start-up is the best
wall time of `--repeat` runs of each command (bytecode cached by a first run). The predict file is
made of the litgpt reference rows with micro-batch and sequence length varied, so most configurations
are distinct. Predict is reported in CPU seconds of the child process (user + system; the machine is
shared, so wall time carries the others' load) and in wall seconds.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KAVIER_ARGS = ["training", "--model_name", "mistral-7b-v0.1", "--method", "lora", "--gpu_model",
               "NVIDIA-A100-SXM4-80GB", "--tokens_per_sample", "1024", "--batch_size", "4", "--number_gpus", "8",
               "--number_nodes", "1"]
TUNEPLAN_ARGS = ["estimate", "--model", "Mistral-7B-v0.1", "--gpu", "A100-SXM4-80GB", "--method", "lora",
                 "--seq-len", "1024", "--micro-batch", "4", "--gpus", "8", "--examples", "10000"]


def best_wall(cmd: list[str], repeat: int) -> float:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        best = min(best, time.perf_counter() - t0)
    return best


def predict_file(path: Path, rows: int) -> None:
    ref = HERE.parent.parent / "shared" / "reference" / "runs" / "litgpt.csv"
    table = list(csv.reader(ref.open(newline="", encoding="utf-8")))
    head, body = table[0], table[1:]
    i_id, i_mb, i_seq = head.index("id"), head.index("micro_batch_size"), head.index("seq_len")
    i_ds = head.index("dataset")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(head)
        for k in range(rows):
            r = list(body[k % len(body)])
            r[i_id] = f"bench-{k}"
            r[i_mb] = str(1 + (k // len(body)) % 16)
            if r[i_seq]:
                r[i_seq] = str(128 * (1 + (k // (16 * len(body))) % 32))
            r[i_ds] = f"{r[i_ds]} (bench copy {k // len(body)})"  # no two rows alike: none is a duplicate
            w.writerow(r)


def bench_predict(rows: int, keep: str | None = None) -> dict:
    """`tuneplan predict` over the benchmark file of `rows` rows: CPU and wall seconds, rows per second."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(keep) if keep else Path(d) / "runs.csv"
        if not f.is_file():
            predict_file(f, rows)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tuneplan.cli", "predict", "--runs", str(f), "--out",
                        str(Path(d) / "pred.csv")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        secs = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rows": rows, "cpu_s": round(cpu, 2), "wall_s": round(secs, 1), "rows_per_cpu_s": round(rows / cpu),
            "rows_per_wall_s": round(rows / secs), "peak_rss_mib": round(after.ru_maxrss / 1024)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kavier", help="kavier's CLI (its own venv); start-up comparison skipped without it")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-plan", action="store_true")
    ap.add_argument("--predict-only", action="store_true", help="only the predict benchmark")
    ap.add_argument("--keep", help="the predict runs file to use (written first when missing)")
    ap.add_argument("--write-runs", help="only write the predict benchmark's runs file here")
    args = ap.parse_args()
    if args.write_runs:
        predict_file(Path(args.write_runs), args.rows)
        return 0
    out: dict = {}
    if not args.predict_only:
        tp = best_wall([sys.executable, "-m", "tuneplan.cli", *TUNEPLAN_ARGS], args.repeat)
        out["estimate_startup_s"] = round(tp, 3)
        if args.kavier:
            kv = best_wall([args.kavier, *KAVIER_ARGS], args.repeat)
            out["kavier_training_s"] = round(kv, 3)
            out["estimate_over_kavier"] = round(tp / kv, 2)
        if not args.skip_plan:
            sys.path.insert(0, str(HERE))
            import plan_speed

            out["plan"] = plan_speed.bench_plan(1)
    out["predict"] = bench_predict(args.rows, args.keep)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
