"""Issue 19 point 7, measured side by side: `tuneplan estimate` start-up against kavier's CLI, `plan`
over ~100k candidates, and `predict` rows per second.

    python benchmarks/robust_speed.py --kavier /tmp/kavier-venv/bin/kavier [--rows 20000] [--repeat 5]

kavier's CLI lives in its own virtual environment (`python3 -m venv /tmp/kavier-venv &&
/tmp/kavier-venv/bin/pip install kavier==0.5.3`); nothing of it is imported here. Start-up is the best
wall time of `--repeat` runs of each command (bytecode cached by a first run). The predict file is
made of the litgpt reference rows with micro-batch and sequence length varied, so most configurations
are distinct.
"""

from __future__ import annotations

import argparse
import csv
import json
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kavier", help="kavier's CLI (its own venv); start-up comparison skipped without it")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-plan", action="store_true")
    args = ap.parse_args()
    out: dict = {}
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
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "runs.csv"
        predict_file(f, args.rows)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tuneplan.cli", "predict", "--runs", str(f), "--out",
                        str(Path(d) / "pred.csv")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        secs = time.perf_counter() - t0
        out["predict"] = {"rows": args.rows, "seconds": round(secs, 1), "rows_per_s": round(args.rows / secs)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
