"""`tuneplan predict`: every row of a runs file back with the estimator's predictions."""

from __future__ import annotations

import argparse

from tuneplan.commands.common import (
    add_force_arg,
    add_strict_names,
    check_interval,
    check_out,
    single_threaded_blas,
)
from tuneplan.commands.learn import report_problems, require_rows
from tuneplan.errors import atomic_output


def register(sub) -> None:
    p = sub.add_parser("predict", help="predict every row of a runs file",
                       description="Read runs (reference schema or LLMFineTuningBench columns) and write "
                                   "them back with pred_tokens_per_s, pred_samples_per_s, pred_step_time_s, "
                                   "pred_peak_mem_gib (in the row's mem_kind's terms), "
                                   "pred_peak_mem_allocated_gib, pred_peak_mem_reserved_gib, pred_fits, pred_max_micro_batch, interval bounds "
                                   "(and pred_fit_probability with a width model), pred_estimator and an error column for rows that cannot be predicted.")
    p.add_argument("--runs", nargs="+", required=True, help="CSV/Parquet runs files")
    p.add_argument("--out", required=True, help="output CSV (an existing file only with --force)")
    p.add_argument("--estimator", default="tuneplan", help="tuneplan (default), kavier, xia, planner, slst")
    p.add_argument("--calibration", help="calibration file or name (default: the shipped one)")
    p.add_argument("--interval", type=float, default=0.8, help="interval coverage (default 0.8; 0 for none)")
    p.add_argument("--strict", action="store_true", help="stop at the first problem in a runs file")
    add_strict_names(p)
    add_force_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    single_threaded_blas()  # before numpy's import: predict's arrays call no BLAS routine
    import pandas as pd

    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.predict_table import predict_frame
    from tuneplan.runs import read_runs

    # before any reading: --out is none of the inputs (writing over a runs file would lose the measured
    # runs) and, without --force, no existing file
    check_interval(args.interval, ", or 0 for none")
    check_out(args, args.out, "out", "CSV file")
    # names resolved as `calibrate` resolves them (with each source's defaults); rows the catalogs
    # cannot resolve are reported and still written, with the reason in their error column
    # one reading: the rows set aside only because a name did not resolve come back name-free
    table = read_runs(args.runs, strict=args.strict, strict_names=args.strict_names, keep_unresolved=True)
    report_problems(table.problems)
    df, rest = table.df, table.unresolved
    if not len(df) and (rest is None or not len(rest)):
        require_rows(table, args.runs)
    if rest is not None and len(rest):
        df = pd.concat([df, rest], ignore_index=True).sort_values(["file", "line"], kind="stable")
        df = df.reset_index(drop=True)
    est = get_estimator(args.estimator, args.calibration)
    out = with_unreadable_rows(predict_frame(df, est, interval=args.interval, calibration=args.calibration),
                               table.problems)
    drop = [c for c in ("file", "line") if c in out.columns]
    with atomic_output(args.out, "out", "CSV file") as tmp:
        out.drop(columns=drop).to_csv(tmp, index=False)
    n_err = int(out["error"].notna().sum())
    print(f"wrote {len(out)} rows to {args.out} ({len(out) - n_err} predicted, {n_err} with an error; "
          f"estimator {est.name})")
    need_probe = int(out["error"].astype(str).str.contains("run `tuneplan probe` first", regex=False).sum())
    if need_probe:
        print(f"{need_probe} row(s) were measured on a profiled machine whose GPU entry is not here: run "
              "`tuneplan probe` first (it saves the entry), then predict again")
    return 0


def with_unreadable_rows(out, problems):
    """The rows no reader could take (a bad byte, gpus=1.5, a broken quote) written back too, in file
    order, with their cells as read (where the record split into the header's columns) and
    `file:line: reason` in their `error` column."""
    import pandas as pd

    if not {"file", "line"} <= set(out.columns) or all(p.line is None for p in problems):
        return out
    have = set(zip(out["file"], out["line"], strict=True))
    extra = [{**(p.cells or {}), "file": p.path, "line": p.line, "error": f"{p.path}:{p.line}: {p.message}"}
             for p in problems if p.line is not None and (p.path, p.line) not in have]
    if not extra:
        return out
    last = {(r["file"], r["line"]): r for r in extra}  # one row per line: its last (row-skipping) problem
    merged = pd.concat([out, pd.DataFrame(list(last.values()))], ignore_index=True)
    return merged.sort_values(["file", "line"], kind="stable").reset_index(drop=True)
