"""Uncalibrated physics over the shared runs: median signed log-ratio ln(predicted / measured tokens/s) by group.

Rows and predictions are physics_by_source.py's (same reading of the runs, `PhysicsConstants()`); a
positive median means the group is predicted too fast. Groups: GPU family (the catalog's architecture),
parallelism (a row joins every group whose degree is > 1; dp-only = several GPUs with none of them and
no ZeRO-3 / FSDP sharding; single = one GPU), MoE vs dense, sequence bucket, method (qlora = any PEFT
over a quantised base), accelerator vendor; and the LoRA/full ratio on paired configurations (same
source, model, GPU, GPUs, sequence, micro-batch and accumulation): ln of the predicted LoRA/full speed
ratio over the measured one. Groups with >= --min-rows rows beyond +-(--flag) are flagged.

    python benchmarks/log_ratio_by_group.py [--runs DIR_OR_FILE ...] [--flag 0.15] [--min-rows 10] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from physics_by_source import DEFAULT_RUNS, evaluate  # noqa: E402

SEQ_BUCKETS = ((512, "<=512"), (2048, "<=2k"), (8192, "<=8k"), (np.inf, ">8k"))
PAIR_KEYS = ["source", "model", "gpu", "gpus", "seq", "micro_batch", "grad_accum"]


def _parallelism(r) -> list[str]:
    groups = [k for k in ("tp", "pp", "ep", "cp") if r[k] > 1]
    if r["sharding"] in ("zero3", "zero3-offload", "hybrid"):
        groups.append("zero3-fsdp")
    return groups or (["dp-only"] if r["gpus"] > 1 else ["single"])


def _method(r) -> str:
    if r["method"] == "full":
        return "full"
    if r["quant"] not in (None, "none", r["precision"]):
        return "qlora"
    return "lora" if r["method"] in ("lora", "dora", "rslora", "pissa", "olora") else "other peft"


def group_table(out, flag: float = 0.15, min_rows: int = 10):
    """One row per (dimension, group): rows, median ln(pred/measured), flagged."""
    import pandas as pd

    d = out.dropna(subset=["tps_ape"]).copy()
    d["log_ratio"] = np.log(d["pred_tps"] / d["measured_tps"])
    d["parallelism"] = d.apply(_parallelism, axis=1)
    d["moe_dense"] = np.where(d["moe"], "moe", "dense")
    d["seq_bucket"] = [next(n for hi, n in SEQ_BUCKETS if s <= hi) for s in d["seq"]]
    d["method_group"] = d.apply(_method, axis=1)
    dims = {"gpu family": "family", "parallelism": "parallelism", "moe": "moe_dense", "sequence": "seq_bucket",
            "method": "method_group", "vendor": "vendor", "source": "source"}
    rows = []
    for dim, col in dims.items():
        g = d.explode(col) if col == "parallelism" else d
        for name, grp in g.groupby(col):
            rows.append({"dimension": dim, "group": name, "rows": len(grp),
                         "median_log_ratio": grp["log_ratio"].median()})
    rows.append(lora_full_pairs(d))
    t = pd.DataFrame(rows)
    t["flagged"] = (t["rows"] >= min_rows) & (t["median_log_ratio"].abs() > flag)
    return t


def lora_full_pairs(d) -> dict:
    """The LoRA/full speed ratio over paired configurations: ln(predicted ratio / measured ratio)."""
    lora = d[d["method_group"] == "lora"].groupby(PAIR_KEYS)[["measured_tps", "pred_tps"]].median()
    full = d[d["method_group"] == "full"].groupby(PAIR_KEYS)[["measured_tps", "pred_tps"]].median()
    both = lora.merge(full, left_index=True, right_index=True, suffixes=("_lora", "_full"))
    lr = (np.log(both["pred_tps_lora"] / both["pred_tps_full"])
          - np.log(both["measured_tps_lora"] / both["measured_tps_full"]))
    return {"dimension": "lora/full pairs", "group": "ln(pred ratio / measured ratio)", "rows": len(both),
            "median_log_ratio": lr.median() if len(lr) else np.nan}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=[str(p) for p in DEFAULT_RUNS])
    ap.add_argument("--flag", type=float, default=0.15, help="flag groups whose median |ln ratio| is above this")
    ap.add_argument("--min-rows", type=int, default=10, help="flag only groups with at least this many rows")
    ap.add_argument("--csv")
    args = ap.parse_args(argv)
    t = group_table(evaluate(args.runs), args.flag, args.min_rows)
    print(t.to_string(index=False, float_format=lambda x: f"{x:+.3f}"))
    print(f"\nflagged (>= {args.min_rows} rows beyond +-{args.flag}): {int(t['flagged'].sum())}")
    if args.csv:
        t.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
