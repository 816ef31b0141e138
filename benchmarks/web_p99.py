"""Latency of `/api/estimate` under load: 16 concurrent loopback clients, each sending a bounded number
of estimates, while `--plans` other clients keep sending plan searches (the heavy requests).

    python benchmarks/web_p99.py [--clients 16] [--requests 10] [--plans 4] [--port 8765]

Starts `tuneplan serve` in a subprocess on 127.0.0.1, waits for /healthz, runs the loop, prints the
median, p90 and p99 estimate latency (ms) and the plan latencies, then stops the server. Compare
before/after a change by running it on both checkouts (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ESTIMATE = {"model": "Llama-3.1-8B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": 1024,
            "examples": 10000, "micro_batch": 4}
PLAN = {"model": "Llama-3.1-8B", "gpus": ["H100-SXM5-80GB", "A100-SXM4-80GB", "L40S-48GB"],
        "methods": ["full", "lora", "qlora"], "max_gpus": 16, "examples": 10000, "tokens_per_example": 1024}


def post(url: str, body: dict) -> float:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=10, help="estimates per client")
    ap.add_argument("--plans", type=int, default=4, help="clients sending plans meanwhile")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen([sys.executable, "-m", "tuneplan.cli", "serve", "--port", str(args.port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.2)
        post(base + "/api/estimate", ESTIMATE)  # warm
        alone = min(post(base + "/api/estimate", ESTIMATE) for _ in range(5))
        est: list[float] = []
        plans: list[float] = []
        stop = threading.Event()

        def estimates() -> None:
            for _ in range(args.requests):
                est.append(post(base + "/api/estimate", ESTIMATE))

        def planner() -> None:
            while not stop.is_set():
                plans.append(post(base + "/api/plan", PLAN))

        ps = [threading.Thread(target=planner) for _ in range(args.plans)]
        es = [threading.Thread(target=estimates) for _ in range(args.clients)]
        for t in ps + es:
            t.start()
        for t in es:
            t.join()
        stop.set()
        for t in ps:
            t.join()
        q = statistics.quantiles(est, n=100)
        print(json.dumps({"estimate_alone_ms": round(1000 * alone, 1), "clients": args.clients,
                          "requests": len(est), "plans_clients": args.plans,
                          "estimate_p50_ms": round(1000 * statistics.median(est), 1),
                          "estimate_p90_ms": round(1000 * q[89], 1), "estimate_p99_ms": round(1000 * q[98], 1),
                          "plans_done": len(plans),
                          "plan_median_ms": round(1000 * statistics.median(plans), 1) if plans else None}))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
