"""Uncalibrated physics, per source: throughput MdAPE, peak-memory MdAPE and fit-verdict accuracy.

fit_acc: rows with a measured peak (it fit) or an OOM (it did not), as `validate` counts them; ran_acc:
also every row that ran with only a throughput figure (it fit), as issue 15 counts "configurations that ran".

Nothing is fitted, so holding a source out changes nothing: every row is judged with the same prior
constants (`PhysicsConstants()`), which is what `tuneplan validate --split by-source` prints as its
`tuneplan-physics` rows, in seconds instead of minutes.

    python benchmarks/physics_by_source.py [--runs DIR_OR_FILE ...] [--worst 10] [--csv out.csv] [--by framework]

`--by framework` groups the same figures by the framework profile each row was costed with (its
`framework` cell read through data/frameworks.yaml: names, aliases, NAME@VERSION; generic when unknown),
and lists every `framework` cell of the runs files (RL and preference rows included) that no profile
names: those fall to generic.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = [ROOT.parent / "shared" / "reference" / "runs", ROOT / "reference" / "runs"]


def evaluate(paths):
    import pandas as pd

    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
    from tuneplan.learn.measured import training_set
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs
    from tuneplan.runs import read_runs

    df = read_runs([p for p in paths if Path(p).exists()]).df
    ts = training_set(df)
    p = predict_configs(ts.configs, TuneplanEstimator(), with_max_batch=False)
    mem = memory_for_kind(p, ts.mem_kind)
    out = pd.DataFrame({
        "id": ts.df["id"].astype(str), "source": ts.source,
        "framework": ts.df["framework"].astype(str) if "framework" in ts.df.columns else "",
        "profile": [c.job.framework for c in ts.configs],
        "model": [c.model.name for c in ts.configs], "gpu": [c.gpu.name for c in ts.configs],
        "method": [c.job.method for c in ts.configs], "precision": [c.job.precision for c in ts.configs],
        "seq": [c.seq_len for c in ts.configs], "gpus": [c.job.gpus for c in ts.configs],
        # the configuration's shape, for benchmarks/log_ratio_by_group.py's groups
        **{k: [getattr(c.job, k) for c in ts.configs] for k in ("tp", "pp", "cp", "ep", "micro_batch", "grad_accum")},
        "sharding": [c.job.sharding_kind() for c in ts.configs], "moe": [c.model.is_moe for c in ts.configs],
        "quant": [c.job.base_quant(c.model.quant) for c in ts.configs],
        "vendor": [c.gpu.vendor for c in ts.configs], "family": [c.gpu.architecture.split(" ")[0] for c in ts.configs],
        "measured_tps": ts.tokens_per_s, "pred_tps": p["tokens_per_s"],
        "measured_mem": ts.peak_mem_gib, "pred_mem": mem, "mem_kind": ts.mem_kind,
        "measured_fits": np.where(ts.is_oom, 0.0, np.where(np.isfinite(ts.peak_mem_gib) | ts.has_throughput,
                                                           1.0, np.nan)),
        "pred_fits": p["fits"].astype(float),
        # validate's verdict rows: a measured peak (fits) or an OOM (does not)
        "verdict_row": ts.is_oom | np.isfinite(ts.peak_mem_gib),
    })
    out["tps_ape"] = (out["pred_tps"] / out["measured_tps"] - 1).abs()
    out["mem_ape"] = (out["pred_mem"] / out["measured_mem"] - 1).abs()
    return out


def generic_cells(paths):
    """(framework cell, rows) of every runs row whose framework no profile names (it falls to generic)."""
    from tuneplan.runs import read_runs
    from tuneplan.specs.framework import framework_for_text

    df = read_runs([p for p in paths if Path(p).exists()]).df
    cells = df["framework"].fillna("").astype(str) if "framework" in df.columns else []
    counts = cells.value_counts()
    return [(cell, int(n)) for cell, n in counts.items() if framework_for_text(cell) == "generic"]


def summary(out, by: str = "source"):
    import pandas as pd

    rows = []
    for src, g in list(out.groupby(by)) + [("ALL", out)]:
        t = g["tps_ape"].dropna()
        m = g["mem_ape"].dropna()
        f = g.dropna(subset=["measured_fits"])
        v = f[f["verdict_row"]]
        rows.append({by: src, "n_tps": len(t), "tps_mdape": t.median() if len(t) else np.nan,
                     "n_mem": len(m), "mem_mdape": m.median() if len(m) else np.nan,
                     "n_fit": len(v), "fit_acc": (v["measured_fits"] == v["pred_fits"]).mean() if len(v) else np.nan,
                     "n_ran": len(f), "ran_acc": (f["measured_fits"] == f["pred_fits"]).mean() if len(f) else np.nan})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=[str(p) for p in DEFAULT_RUNS])
    ap.add_argument("--worst", type=int, default=10)
    ap.add_argument("--csv")
    ap.add_argument("--by", choices=("source", "profile", "framework"), default="source",
                    help="group the figures by source (default) or by framework profile ('framework' = 'profile')")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = evaluate(args.runs)
    s = summary(out, "profile" if args.by == "framework" else args.by)
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 40):
        print(s.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        cols = ["id", "framework", "model", "gpu", "method", "precision", "seq", "gpus", "measured_tps", "pred_tps",
                "tps_ape"]
        print(f"\n{args.worst} worst throughput rows:")
        print(out.dropna(subset=["tps_ape"]).nlargest(args.worst, "tps_ape")[cols].to_string(index=False))
        cols = ["id", "model", "gpu", "method", "seq", "gpus", "mem_kind", "measured_mem", "pred_mem", "mem_ape"]
        print(f"\n{args.worst} worst memory rows:")
        print(out.dropna(subset=["mem_ape"]).nlargest(args.worst, "mem_ape")[cols].to_string(index=False))
        bad = out.dropna(subset=["measured_fits"])
        bad = bad[bad["measured_fits"] != bad["pred_fits"]]
        print(f"\nwrong fit verdicts ({len(bad)}):")
        print(bad[["id", "model", "gpu", "method", "seq", "gpus", "measured_mem", "pred_mem", "measured_fits"]]
              .to_string(index=False))
    if args.by != "source":
        cells = generic_cells(args.runs)
        print(f"\nframework cells no profile names (costed as generic): {len(cells)}")
        for cell, n in cells:
            print(f"  {cell or '(empty)'}: {n} rows")
    if args.csv:
        out.to_csv(args.csv, index=False)
    print(f"\n{len(out)} rows in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
