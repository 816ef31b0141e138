"""Reading a large dataset: `tuneplan data` on ~1 GB of chat JSONL, its wall time and peak memory.

    python benchmarks/data_read.py [--gb 1.0] [--tokenizer PATH] [--keep]

Writes a JSONL file of chat rows ({"messages": [system, user, assistant]}, lengths drawn from a
log-normal: a long tail like real SFT data) under /tmp, runs `tuneplan data FILE --json` on it in a
child process, and prints the wall time, the child's CPU time and its peak resident memory (the
kernel's ru_maxrss of the child). The file is deleted afterwards unless --keep. Without --tokenizer the
counts are the character approximation (the read itself is what is measured); with one, the
tokenizer's time is included.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ["the", "model", "learns", "from", "data", "what", "is", "a", "token", "answer", "question", "tell", "me", "about", "gpus", "memory", "long", "short", "yes", "no", "please", "explain", "padding", "packing", "batch", "sequence", "length", "training", "run", "step", "time", "cost"]


def write_file(path: Path, gb: float, seed: int = 0) -> int:
    """Chat rows until the file holds `gb` GB; returns the rows written."""
    rng = random.Random(seed)
    target = int(gb * 1e9)
    pool = []
    for _ in range(2000):  # distinct rows, repeated: writing is not what is measured
        n_user = max(3, int(rng.lognormvariate(3.5, 0.8)))
        n_asst = max(3, int(rng.lognormvariate(5.0, 0.9)))
        row = {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                            {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(n_user))},
                            {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(n_asst))}]}
        pool.append(json.dumps(row) + "\n")
    rows = written = 0
    with path.open("w") as f:
        while written < target:
            line = pool[rows % len(pool)]
            f.write(line)
            written += len(line)
            rows += 1
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--tokenizer")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    fd, name = tempfile.mkstemp(prefix="tuneplan-data-", suffix=".jsonl", dir="/tmp")
    os.close(fd)
    path = Path(name)
    try:
        t0 = time.perf_counter()
        rows = write_file(path, args.gb)
        print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB, {rows:,} rows) in {time.perf_counter() - t0:.1f} s")
        cmd = [sys.executable, "-c", "import sys; from tuneplan.cli import main; sys.exit(main(sys.argv[1:]))",
               "data", str(path), "--json"]
        if args.tokenizer:
            cmd += ["--tokenizer", args.tokenizer]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        d = json.loads(out.stdout)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(f"tuneplan data: {d['examples']:,} examples, {d['tokens']:,} tokens ({d['tokens_source'][:40]}...)")
        print(f"wall {wall:.1f} s, CPU {cpu:.1f} s, peak RSS {after.ru_maxrss / 1024:.0f} MiB, "
              f"{path.stat().st_size / 1e6 / wall:.0f} MB/s")
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
