"""Nested by-source validation of the tuneplan learner, with 0, 3 and 5 runs of each held-out source
revealed (the few-runs loop), in one pass: per source, throughput MdAPE of the calibrated learner
against the uncalibrated physics, peak-memory MdAPE, and the 80% interval's coverage (per source, with
the widening a source of 10+ rows needs for 65% of its rows inside; then by GPU family, scale, stage
and MoE), and the fit probability's reliability table.

Every choice the learner makes is made inside its fit on the other sources; the revealed runs only
adapt it (`tuneplan.learn.adapt`). The figures of docs/learning.md come from this script:

    python benchmarks/learning_by_source.py [--runs DIR_OR_FILE ...] [--reveals 0,3,5] [--json out.json]
        [--rows rows.csv]

`--rows` writes every judged row (reveal, estimator, source, id, measured and predicted tokens/s and peak
memory): the row-by-row diagnosis of docs/learning.md reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = [ROOT.parent / "shared" / "reference" / "runs", ROOT / "reference" / "runs"]


MIN_SOURCE_ROWS = 10
"""Sources whose per-source coverage is printed (the issue's target: >= TARGET on each)."""
TARGET = 0.65


def widen(report, group: dict) -> float:
    """By how much the source's intervals (in log space, about their geometric middle) must widen for
    TARGET of its rows to fall inside: the TARGET quantile of |log(measured / middle)| / half-width."""
    hits = [h for h in report.hits if h["metric"] == group["metric"] and h["source"] == group["value"]]
    need = [abs(np.log(h["measured"] / np.sqrt(h["low"] * h["high"]))) / max(np.log(h["high"] / h["low"]) / 2, 1e-9)
            for h in hits]
    return float(np.quantile(need, TARGET)) if need else float("nan")


def table(reports) -> list[dict]:
    rows = []
    for k, rep in reports.items():
        m = rep.metrics()
        for src in sorted(set(m["source"])):
            sel = m[m["source"] == src].set_index("estimator")
            row = {"reveal": k, "source": src}
            for est in sel.index:
                row[f"{est} thr"] = sel.loc[est, "throughput_mdape"]
                row[f"{est} mem"] = sel.loc[est, "memory_mdape"]
                row["n thr"] = int(sel.loc[est, "n_throughput"])
            key = "tuneplan" if src == "ALL" else f"tuneplan source={src}"
            row["coverage"] = rep.coverage.get(key, np.nan)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", default=[str(p) for p in DEFAULT_RUNS if p.exists()])
    ap.add_argument("--reveals", default="0,3,5")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the per-source rows as JSON")
    ap.add_argument("--rows", help="write every judged row as CSV")
    args = ap.parse_args(argv)
    from tuneplan.learn.validate import by_source_reveals
    from tuneplan.runs import read_runs

    t0 = time.perf_counter()
    df = read_runs(args.runs).df
    reveals = tuple(int(x) for x in args.reveals.split(","))
    reports = by_source_reveals(df, reveals, args.seed, progress=lambda s: print(s, file=sys.stderr, flush=True))
    rows = table(reports)
    for k in reveals:
        print(f"\nreveal {k}: throughput MdAPE (tuneplan calibrated | physics | physics+adapter), memory MdAPE, "
              "80% coverage")
        for r in rows:
            if r["reveal"] != k:
                continue
            print(f"  {r['source']:<28} n={r['n thr']:>4}  {r.get('tuneplan thr', np.nan):6.1%} | "
                  f"{r.get('tuneplan-physics thr', np.nan):6.1%} | {r.get('tuneplan-physics+adapter thr', np.nan):6.1%}"
                  f"   mem {r.get('tuneplan mem', np.nan):6.1%} vs {r.get('tuneplan-physics mem', np.nan):6.1%}"
                  f"   cov {r['coverage']:.0%}")
        per = [r for r in rows if r["reveal"] == k and r["source"] != "ALL"
               and np.isfinite(r.get("tuneplan thr", np.nan)) and np.isfinite(r.get("tuneplan-physics thr", np.nan))]
        better = sum(r["tuneplan thr"] < r["tuneplan-physics thr"] for r in per)
        print(f"  calibrated better than physics on {better} of {len(per)} sources")
        print("  80% interval by group: rows, inside, above the high bound, below the low bound")
        for g in reports[k].coverage_groups:
            if g["group"] == "source" and g["rows"] >= MIN_SOURCE_ROWS:
                print(f"    {g['metric']:<10} {g['group']:<10} {g['value']:<26} n={g['rows']:>4}  {g['coverage']:6.1%}"
                      f"  above {g['above']:6.1%}  below {g['below']:6.1%}  (x{widen(reports[k], g):.2f} the "
                      f"width for {TARGET:.0%})")
            elif g["group"] != "source":
                print(f"    {g['metric']:<10} {g['group']:<10} {g['value']:<14} n={g['rows']:>4}  {g['coverage']:6.1%}"
                      f"  above {g['above']:6.1%}  below {g['below']:6.1%}")
        print("  fit probability's reliability: bin, rows, mean probability given, share that ran")
        for b in reports[k].reliability:
            print(f"    {b['low']:.1f}-{b['high']:.1f}  n={b['rows']:>4}  {b['probability']:6.1%}  {b['ran']:6.1%}")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float) + "\n")
    if args.rows:
        import pandas as pd

        pd.concat([rep.rows.assign(reveal=k) for k, rep in reports.items()]).to_csv(args.rows, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
