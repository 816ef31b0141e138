"""How fast the planner searches, and how fast the vectorised estimator evaluates configurations.

    python benchmarks/plan_speed.py            # the figures quoted in the README

1. `tuneplan.plan_run(...)` over >= 100,000 candidates: 12 GPU types x 8 GPU counts (1..128) x 7 methods
   x 7 micro-batches x 4 gradient accumulations x 3 shardings x checkpointing on/off (less the
   duplicate shardings on one GPU) — enumeration, the estimator, run totals, constraints, Pareto front,
   ranking and the result table, end to end (warm: imports and catalogs loaded by a first call).
2. `TuneplanEstimator().predict_arrays(a)` (the uncalibrated physics) on 1,000,000 configurations
   (the arrays of the grid above, tiled): configurations per second.
3. A calibrated estimator with boosted residual trees (the shipped calibration's when it has them; it
   has none since issue 16's round, so one fitted on tuneplan's own H200 runs, a user's own stack, as
   `tuneplan calibrate --runs reference/runs/tuneplan-h200.csv --from-scratch` makes it), on 5,000
   configurations and on the 103,488 distinct configurations of the grid (`estimators.trees.Forest`,
   the one evaluator of the trees for estimate, predict and plan).
Best of `--repeat` runs each.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

GPUS = ["A100-SXM4-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB", "H100-PCIe-80GB", "H200-SXM-141GB", "B200-180GB",
        "L40S-48GB", "L4-24GB", "A10G-24GB", "RTX4090-24GB", "MI300X-192GB", "V100-SXM2-32GB"]
METHODS = ["full", "lora", "qlora", "gptq-lora", "alora", "dora", "freeze"]
SEARCH = dict(gpus=GPUS, methods=METHODS, max_gpus=128, micro_batches=(1, 2, 4, 8, 16, 32, 64),
              grad_accums=(1, 2, 4, 8), shardings=("ddp", "zero2", "fsdp"), grad_ckpt=(False, True),
              examples=50_000, tokens_per_example=800, epochs=3, deadline_s=12 * 3600, budget_usd=400)
MODEL = "meta-llama/Llama-3.1-8B"


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_plan(repeat: int) -> dict:
    from tuneplan.plan.search import plan_run as plan

    plan(MODEL, **SEARCH)  # warm-up: imports, catalogs, prices
    secs, res = best_of(lambda: plan(MODEL, **SEARCH), repeat)
    return {"candidates": res.n_evaluated, "fit": res.n_fit, "seconds": secs, "per_s": res.n_evaluated / secs,
            "recommended": res.recommended["description"] if res.recommended else res.message}


def grid_arrays(n_target: int) -> dict[str, np.ndarray]:
    """The physics arrays of the search above, tiled to n_target configurations."""
    from tuneplan.physics.run import workload
    from tuneplan.plan.space import Space, build_arrays, enumerate_grid, gpu_counts
    from tuneplan.specs.job import make_job
    from tuneplan.specs.resolve import resolve_gpu_arg, resolve_model_arg

    model = resolve_model_arg(MODEL)
    gpus = [resolve_gpu_arg(g) for g in GPUS]
    jobs = [make_job(method=m, examples=50_000, tokens_per_example=800) for m in METHODS]
    space = Space(gpu_counts=tuple(gpu_counts(128)), micro_batches=SEARCH["micro_batches"],
                  shardings=SEARCH["shardings"], grad_accums=SEARCH["grad_accums"], global_batch=None)
    grid = enumerate_grid(len(gpus), len(jobs), space)
    a = build_arrays(model, gpus, jobs, grid, workload(jobs[0]).seq_len)
    reps = -(-n_target // len(grid))
    out = {}
    for k, v in a.items():
        if v.strides == (0,):  # a broadcast constant
            out[k] = np.broadcast_to(v[:1], (n_target,))
        else:
            out[k] = np.tile(v, reps)[:n_target]
    return out


def bench_estimator(n: int, repeat: int) -> dict:
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

    a = grid_arrays(n)
    est = TuneplanEstimator()
    est.predict_arrays({k: v[:1000] for k, v in a.items()})  # warm-up
    secs, out = best_of(lambda: est.predict_arrays(a), repeat)
    assert len(out["step_s"]) == n
    return {"configurations": n, "seconds": secs, "per_s": n / secs}


def bench_calibrated(repeat: int) -> dict:
    from tuneplan.estimators.base import get_estimator

    est = get_estimator("tuneplan")
    if getattr(est, "residual", None) is None:  # the shipped default keeps the physics: a user's own fit
        from pathlib import Path

        from tuneplan.learn.learners import fit_learner
        from tuneplan.learn.measured import training_set
        from tuneplan.runs import read_runs

        runs = Path(__file__).resolve().parents[1] / "reference" / "runs" / "tuneplan-h200.csv"
        est = fit_learner("tuneplan", training_set(read_runs([str(runs)]).df), "h200")
    a = grid_arrays(103_488)
    small = {k: v[:5000] for k, v in a.items()}
    est.predict_arrays({k: v[:100] for k, v in a.items()})
    t_small, _ = best_of(lambda: est.predict_arrays(small), repeat)
    t_grid, _ = best_of(lambda: est.predict_arrays(a), repeat)
    return {"small_per_s": 5000 / t_small, "grid_per_s": len(a["micro_batch"]) / t_grid, "grid_s": t_grid}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--estimator-n", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU(s), "
          f"Python {platform.python_version()}, numpy {np.__version__}")
    p = bench_plan(args.repeat)
    print(f"plan: {p['candidates']:,} candidates ({p['fit']:,} fit) in {p['seconds']:.3f} s "
          f"= {p['per_s']:,.0f} candidates/s; recommended: {p['recommended']}")
    e = bench_estimator(args.estimator_n, args.repeat)
    print(f"estimator: {e['configurations']:,} configurations in {e['seconds']:.3f} s "
          f"= {e['per_s']:,.0f} configurations/s (uncalibrated physics)")
    c = bench_calibrated(args.repeat)
    if c:
        print(f"calibrated estimator: {c['small_per_s']:,.0f} configurations/s on 5,000; "
              f"{c['grid_per_s']:,.0f} configurations/s on the grid (103,488 in {c['grid_s']:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
