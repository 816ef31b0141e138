"""Smart sampling vs a random sample of the same cost: held-out error of the step-time law.

    python benchmarks/smart_vs_random.py                 # simulated cost function (seconds)
    python benchmarks/smart_vs_random.py --real          # + a real CPU grid of a tiny Llama (minutes)

Simulated: a 250-configuration space (micro-batch 1..16, seq-len 128..2048, layers 2..24, full/LoRA)
whose step time is a planted roofline-like function (fixed per-step overhead, small-batch
inefficiency, per-layer matmuls + attention, LM head, optimizer pass over the trained weights) with
3% log-normal measurement noise and 3% of runs disturbed (x1.5..3, a busy machine); a run costs a
model build plus 10 steps. For each budget (a share of what measuring the whole grid costs), smart
sampling spends the budget, then a random sample is drawn until it has spent the same; both fit the
same scaling law and are scored on every configuration they did not measure (mean and median
relative error of the predicted step time against the noiseless truth; smart sampling measures more,
cheaper runs, so its held-out set is the dearer part of the grid) and on the whole grid, over 10
seeds (figures are medians over the seeds).

Real (--real): every configuration of a small grid (tiny Llama: hidden 128, vocab 8000; micro-batch
1..8, seq-len 64..512, layers 1..4, full/LoRA: 96 configurations) is measured once on this CPU (the
ground truth, kept in a CSV), then both strategies are replayed on those measurements with their
wall costs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tuneplan.profile.sampling import (  # noqa: E402
    FeatureMap,
    Measurement,
    heldout_error,
    random_sample,
    smart_sample,
)

STEPS_PER_RUN = 10


def simulated_space() -> list[dict[str, Any]]:
    return [dict(micro_batch=mb, seq_len=s, layers=n, method=m)
            for m, mb, s, n in itertools.product(["full", "lora"], [1, 2, 4, 8, 16],
                                                 [128, 256, 512, 1024, 2048], [2, 4, 8, 16, 24])]


def planted_step_time(c: dict[str, Any]) -> float:
    """A 1B-class model on a ~50 TFLOP/s device: seconds per optimizer step (noiseless)."""
    h, vocab = 2048, 32000
    tokens = c["micro_batch"] * c["seq_len"]
    layers = c["layers"]
    p_layer = 12 * h * h
    lora = c["method"] == "lora"
    mm = (4 if lora else 6) * p_layer * tokens  # LoRA: no weight gradients of the base
    attn = 6 * c["seq_len"] * tokens * h  # scores + values, forward and backward
    head = 6 * vocab * h * tokens
    eff = 50e12 * tokens / (tokens + 512)  # small batches run below peak
    compute = (layers * (mm + attn) + head) / eff
    optimizer = (0.002 if lora else 16 * p_layer / 1.5e12) * layers  # AdamW pass over trained weights
    return 0.015 + compute + optimizer


def run_cost(c: dict[str, Any], step: float) -> float:
    return 1.0 + 0.08 * c["layers"] + STEPS_PER_RUN * step


def noisy_measure(rng: np.random.Generator) -> Callable[[dict[str, Any]], Measurement]:
    def measure(c: dict[str, Any]) -> Measurement:
        t = planted_step_time(c) * math.exp(rng.normal(0.0, 0.03))
        if rng.random() < 0.03:
            t *= rng.uniform(1.5, 3.0)
        return Measurement(t, run_cost(c, t))

    return measure


def compare(space: Sequence[dict[str, Any]], truth: Sequence[float],
            measure_factory: Callable[[int], Callable[[dict[str, Any]], Measurement]],
            cost_of: Callable[[int, int], float], budgets: Sequence[float], seeds: int) -> list[dict[str, Any]]:
    """For each budget: smart vs random held-out errors (mean over seeds of per-seed mean/median)."""
    fmap = FeatureMap(space)
    full_cost = sum(cost_of(i, 0) for i in range(len(space)))
    out = []
    for share in budgets:
        budget = share * full_cost
        smart_mean, smart_med, rand_mean, rand_med, n_smart, n_rand, spent = [], [], [], [], [], [], []
        smart_all: list[float] = []
        rand_all: list[float] = []
        for seed in range(seeds):
            measure = measure_factory(seed)
            got: dict[int, float] = {}

            def m(c: dict[str, Any], measure: Any = measure, got: dict[int, float] = got) -> Measurement:
                r = measure(c)
                got[space.index(c)] = float(r.step_time_s)
                return r

            res = smart_sample(space, m, budget, target_error=0.0, steps_per_run=STEPS_PER_RUN, seed=seed)
            train = [space[i] for i in res.order]
            ys = [got[i] for i in res.order]
            test = [i for i in range(len(space)) if i not in set(res.order)]
            errs = _errors(fmap, train, ys, [space[i] for i in test], [truth[i] for i in test])
            smart_mean.append(errs[0])
            smart_med.append(errs[1])
            smart_all.append(_errors(fmap, train, ys, list(space), list(truth))[0])
            n_smart.append(len(res.order))
            spent.append(res.spent_s)
            # random sample of the same cost (same noise model, another stream)
            rmeasure = measure_factory(10_000 + seed)
            idx = random_sample(space, lambda i, s=seed: cost_of(i, s), res.spent_s, seed=seed)
            ry = [float(rmeasure(space[i]).step_time_s) for i in idx]
            rtest = [i for i in range(len(space)) if i not in set(idx)]
            errs = _errors(fmap, [space[i] for i in idx], ry, [space[i] for i in rtest], [truth[i] for i in rtest])
            rand_mean.append(errs[0])
            rand_med.append(errs[1])
            rand_all.append(_errors(fmap, [space[i] for i in idx], ry, list(space), list(truth))[0])
            n_rand.append(len(idx))
        out.append({
            "budget_share": share, "budget_s": budget, "spent_s": statistics.mean(spent),
            "smart_runs": statistics.mean(n_smart), "random_runs": statistics.mean(n_rand),
            "smart_mean_err": statistics.median(smart_mean), "random_mean_err": statistics.median(rand_mean),
            "smart_median_err": statistics.median(smart_med), "random_median_err": statistics.median(rand_med),
            "smart_all_err": statistics.median(smart_all), "random_all_err": statistics.median(rand_all),
            "smart_wins": sum(a < b for a, b in zip(smart_mean, rand_mean, strict=True)) / seeds,
        })
    return out


def _errors(fmap: FeatureMap, train: list[dict[str, Any]], ys: list[float], test: list[dict[str, Any]],
            truth: list[float]) -> tuple[float, float]:
    if len(ys) < 2:
        return float("nan"), float("nan")
    mean = heldout_error(fmap, train, ys, test, truth)
    from tuneplan.profile.sampling import Learner

    learner = Learner(fmap, n_boot=0).fit(train, ys)
    pred, _ = learner.predict(test)
    rel = np.abs(np.exp(pred - np.log(np.asarray(truth))) - 1.0)
    return mean, float(np.median(rel))


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f}%"


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print("| budget (share of the full grid's cost) | runs smart / random | held-out mean error smart / random "
          "| held-out median error smart / random | whole-grid mean error smart / random "
          "| seeds where smart's held-out mean error is lower |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {100 * r['budget_share']:.0f}% ({r['spent_s']:.0f} s spent) | {r['smart_runs']:.1f} / "
              f"{r['random_runs']:.1f} | {_pct(r['smart_mean_err'])} / {_pct(r['random_mean_err'])} | "
              f"{_pct(r['smart_median_err'])} / {_pct(r['random_median_err'])} | "
              f"{_pct(r['smart_all_err'])} / {_pct(r['random_all_err'])} | "
              f"{100 * r['smart_wins']:.0f}% |")


def simulated(seeds: int, budgets: Sequence[float]) -> list[dict[str, Any]]:
    space = simulated_space()
    truth = [planted_step_time(c) for c in space]

    def factory(seed: int) -> Callable[[dict[str, Any]], Measurement]:
        return noisy_measure(np.random.default_rng(seed))

    return compare(space, truth, factory, lambda i, s: run_cost(space[i], truth[i]), budgets, seeds)


def real(seeds: int, budgets: Sequence[float], csv_path: Path, threads: int) -> list[dict[str, Any]]:
    """Measure a small real grid once on this CPU (or reuse the CSV), then replay both strategies."""
    import json

    from tuneplan.profile.grid import profile_grid
    from tuneplan.profile.rows import read_rows

    methods, mbs, seqs, layers = ["full", "lora"], [1, 2, 4, 8], [64, 128, 256, 512], [1, 2, 4]
    if not csv_path.exists():
        cfg = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 8000,
               "max_position_embeddings": 2048}
        tmp = Path(tempfile.mkdtemp()) / "config.json"
        tmp.write_text(json.dumps(cfg))
        profile_grid(str(tmp), methods, seqs, mbs, layers, steps=3, warmup=1, out=csv_path, threads=threads,
                     progress=True)
    rows = [r for r in read_rows(csv_path) if r.get("status") == "ok"]
    space, truth, cost = [], [], []
    for r in rows:
        space.append(dict(micro_batch=int(r["micro_batch_size"]), seq_len=int(r["seq_len"]),
                          layers=int(r["layers"]), method=r["method"]))
        truth.append(float(r["step_time_s"]))
        cost.append(float(r["wall_s"]))

    def factory(seed: int) -> Callable[[dict[str, Any]], Measurement]:
        def measure(c: dict[str, Any]) -> Measurement:
            i = space.index(c)
            return Measurement(truth[i], cost[i])

        return measure

    return compare(space, truth, factory, lambda i, s: cost[i], budgets, seeds)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budgets", default="0.02,0.05,0.1,0.2", help="shares of the full-grid cost")
    ap.add_argument("--real", action="store_true", help="also profile a real tiny-Llama grid on this CPU")
    ap.add_argument("--real-csv", default=str(Path(tempfile.gettempdir()) / "tuneplan_smart_vs_random_real.csv"),
                    help="ground-truth grid (measured once, reused when it exists)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for --real (1: steadier timings)")
    args = ap.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",")]
    print_table("Simulated (planted step-time function, 250 configurations, 3% noise + 3% disturbed runs)",
                simulated(args.seeds, budgets))
    if args.real:
        print_table("Real CPU (tiny Llama, 96 configurations measured once, replayed)",
                    real(args.seeds, budgets, Path(args.real_csv), args.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
