"""`tuneplan predict`: every row of a runs file back with the estimator's predictions."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("predict", help="predict every row of a runs file",
                       description="Read runs (reference schema or LLMFineTuningBench columns) and write "
                                   "them back with pred_tokens_per_s, pred_samples_per_s, pred_step_time_s, "
                                   "pred_peak_mem_gib, pred_fits, pred_max_micro_batch, interval bounds, "
                                   "pred_estimator and an error column for rows that cannot be predicted.")
    p.add_argument("--runs", nargs="+", required=True, help="CSV/Parquet runs files")
    p.add_argument("--out", required=True, help="output CSV")
    p.add_argument("--estimator", default="tuneplan", help="tuneplan (default), kavier, xia, planner, slst")
    p.add_argument("--calibration", help="calibration file or name (default: the shipped one)")
    p.add_argument("--interval", type=float, default=0.8, help="interval coverage (default 0.8; 0 for none)")
    p.add_argument("--strict", action="store_true", help="stop at the first problem in a runs file")
    from tuneplan.commands.common import add_strict_names

    add_strict_names(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from tuneplan.commands.learn import report_problems
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.intervals import add_interval_columns
    from tuneplan.learn.predict_table import predict_frame
    from tuneplan.runs import read_runs

    # names resolved as `calibrate` resolves them (with each source's defaults); rows the catalogs
    # cannot resolve are reported and still written, with the reason in their error column
    table = read_runs(args.runs, strict=args.strict, strict_names=args.strict_names)
    report_problems(table.problems)
    raw = read_runs(args.runs, resolve=False).df
    df = table.df
    if len(raw) > len(df) and {"file", "line"} <= set(raw.columns):
        seen = set(zip(df["file"], df["line"], strict=True))
        rest = raw[[(f, ln) not in seen for f, ln in zip(raw["file"], raw["line"], strict=True)]]
        df = pd.concat([df, rest], ignore_index=True).sort_values(["file", "line"], kind="stable")
        df = df.reset_index(drop=True)
    est = get_estimator(args.estimator, args.calibration)
    out = predict_frame(df, est)
    if args.interval:
        add_interval_columns(out, args.estimator, args.interval, args.calibration)
    drop = [c for c in ("file", "line") if c in out.columns]
    out.drop(columns=drop).to_csv(args.out, index=False)
    n_err = int(out["error"].notna().sum())
    print(f"wrote {len(out)} rows to {args.out} ({len(out) - n_err} predicted, {n_err} with an error; "
          f"estimator {est.name})")
    return 0
