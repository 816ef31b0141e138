"""`tuneplan calibrate` and `tuneplan validate`."""

from __future__ import annotations

import argparse
import json
import os
import sys

from tuneplan.commands.common import add_force_arg, input_paths, rich_table
from tuneplan.errors import InputError, check_output_path, shown


def register(sub) -> None:
    c = sub.add_parser("calibrate", help="fit a calibration on measured runs",
                       description="Adapt the shipped calibration to your runs (an overall throughput scale "
                                   "from 1 run, per-method scales; from 8 runs a memory offset and a fit on your "
                                   "runs alone when it predicts your held-out runs better), or with "
                                   "--from-scratch fit a learner on the rows alone, from the uncalibrated physics. "
                                   "Writes a versioned calibration file with its training data's fingerprint.")
    c.add_argument("--runs", nargs="+", help="runs files (CSV/Parquet) or folders of them (default: the runs "
                   "TuneplanCallback recorded, $TUNEPLAN_HOME/runs/runs.csv)")
    c.add_argument("--out", required=True, help="calibration file to write (.json; an existing file only with "
                   "--force)")
    c.add_argument("--learner", default="tuneplan", help="tuneplan (default), kavier, xia, slst")
    c.add_argument("--from-scratch", action="store_true",
                   help="ignore the shipped calibration: fit the learner on these rows alone")
    c.add_argument("--base", help="the calibration to adapt (default: the shipped one)")
    c.add_argument("--strict", action="store_true", help="stop at the first problem in a runs file")
    add_force_arg(c)
    c.set_defaults(func=run_calibrate)
    v = sub.add_parser("validate", help="fit on a training split, report errors on held-out runs",
                       description="Fit every learner on the training part and report on the held-out part, "
                                   "side by side with the uncalibrated estimators.")
    v.add_argument("--runs", nargs="+", help="runs files (default: the shared reference runs)")
    v.add_argument("--split", default="random", help="random (default), by-source, by-model, by-gpu")
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--reveal", type=int, default=0,
                   help="by-source only: move this many measured rows of each held-out source into its "
                        "training part (your first runs on a new machine or framework); judged on the rest")
    v.add_argument("--interval", type=float, default=0.8, help="nominal interval coverage (default 0.8)")
    v.add_argument("--test-fraction", type=float, default=0.2,
                   help="random split only: share of the rows held out (default 0.2; 0.3 for a 70/30 split)")
    v.add_argument("--learners", default="tuneplan,kavier,xia,slst", help="comma-separated learners to fit")
    v.add_argument("--json", action="store_true", help="print the metrics as JSON")
    v.add_argument("--plot", help="parity plot (predicted vs measured, log axes), PNG or SVG")
    v.add_argument("--by-source", action="store_true", help="print every source's rows, not only ALL")
    v.add_argument("--strict", action="store_true")
    v.set_defaults(func=run_validate)


def _read(paths, strict):
    from tuneplan.runs import read_runs

    table = read_runs(paths, strict=strict)
    report_problems(table.problems)
    require_rows(table, paths)
    return table


def require_rows(table, paths) -> None:
    """InputError when the runs files gave no row at all (missing, empty, header-only, unreadable)."""
    if len(table.df):
        return
    why = str(table.problems[0]) if table.problems else "no data rows under the header"
    names = ", ".join(shown(p) for p in paths)
    raise InputError("runs", f"no runs read from {names}: {why}")


PLOT_SUFFIXES = (".png", ".svg")
"""File types a plot can be written as (by its suffix)."""


def check_plot_path(path: str | None, field: str = "plot") -> None:
    """A plot path that can be written, with a suffix matplotlib draws (checked before the work)."""
    if path is None:
        return
    if not str(path).strip() or os.path.isdir(path):
        raise InputError(field, f"'{shown(path)}' is not a file name: give e.g. parity.png")
    if not str(path).lower().endswith(PLOT_SUFFIXES):
        raise InputError(field, f"cannot tell the image type of '{path}' from its suffix",
                         [s.lstrip(".") for s in PLOT_SUFFIXES])


def report_problems(problems, limit: int = 10) -> None:
    """One line per problem (file:line: message), the first `limit` of them, then a count."""
    for p in problems[:limit]:
        print(f"warning: {p}", file=sys.stderr)
    if len(problems) > limit:
        print(f"warning: ... and {len(problems) - limit} more rows skipped (`tuneplan predict` lists every "
              "row with its reason in the error column)", file=sys.stderr)


def _recorded_runs() -> str:
    """`calibrate` without --runs: the runs TuneplanCallback recorded, or a one-line error."""
    from tuneplan.runs.home import recorded_runs_path

    path = recorded_runs_path()
    if not path.is_file():
        raise InputError("runs", f"not given, and no recorded runs at {path}: pass --runs FILE, or record your "
                         "training runs with tuneplan.integrations.transformers.TuneplanCallback")
    print(f"runs: {path} (recorded by TuneplanCallback)", file=sys.stderr)
    return str(path)


def _base_calibration(args: argparse.Namespace):
    """The calibration a user's runs adapt: --base, else the shipped default; None with --from-scratch,
    for another learner, or when no default ships."""
    from tuneplan.estimators.calibration import default_calibration, load_calibration

    if args.from_scratch:
        if args.base:
            raise InputError("base", "--base and --from-scratch exclude each other")
        return None
    if args.base:
        if args.base != "default" and not os.path.isfile(args.base):
            raise InputError("base", f"no such calibration file: {args.base} (a .json file, or 'default')")
        return load_calibration(args.base, expected="tuneplan")
    if args.learner != "tuneplan":
        return None
    cal = default_calibration()
    if cal is not None:
        print(f"starting from the shipped calibration ({cal.fingerprint[:12]}; --from-scratch ignores it)",
              file=sys.stderr)
    return cal


def run_calibrate(args: argparse.Namespace) -> int:
    from tuneplan.data import DIR as DATA_DIR
    from tuneplan.learn.calibration import fit_calibration
    from tuneplan.learn.learners import NotEnoughData

    runs = args.runs or [_recorded_runs()]
    # the shipped calibration the runs adapt (no --from-scratch) is read too: never written over
    shipped = not args.from_scratch and (args.base == "default" or (not args.base and args.learner == "tuneplan"))
    check_output_path(args.out, "out", "calibration file (.json)", [*input_paths(args), *runs,
                      *[os.path.join(DATA_DIR, "calibration", "default.json")] * shipped], args.force)
    table = _read(runs, args.strict)
    if table.df.empty:
        print("tuneplan calibrate: no usable row in the runs given. Nothing written.", file=sys.stderr)
        return 1
    base = _base_calibration(args)
    try:
        cal, messages = fit_calibration(table.df, args.learner, name=args.out.rsplit("/", 1)[-1].rsplit(".", 1)[0],
                                        base=base)
    except NotEnoughData as exc:
        print(f"tuneplan calibrate: {exc}. Nothing written: estimates keep using the physics "
              "(or the shipped default).", file=sys.stderr)
        return 1
    for m in messages:
        print(m, file=sys.stderr)
    cal.save(args.out)  # atomic; an OSError is one InputError naming --out
    n = cal.n_rows
    print(f"wrote {args.out}: learner {cal.learner}, {n['throughput']} throughput rows, {n['memory']} memory rows, "
          f"{n['oom']} OOM rows from {len(cal.sources)} sources; fingerprint {cal.fingerprint[:12]}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from tuneplan.learn.learners import LEARNER_NAMES
    from tuneplan.learn.validate import SPLITS, check_reveal, validate
    from tuneplan.report.tables import report_console
    from tuneplan.runs import load_reference_runs

    if args.split not in SPLITS:
        raise InputError("split", f"unknown split '{args.split}'", SPLITS)
    learners = tuple(x.strip() for x in args.learners.split(",") if x.strip())
    for name in learners:
        if name not in LEARNER_NAMES:
            raise InputError("learners", f"unknown learner '{name}'", sorted(LEARNER_NAMES))
    if not 0 < args.interval < 1:
        raise InputError("interval", f"must be between 0 and 1 (got {args.interval})")
    from tuneplan.specs.limits import MAX_REVEAL_ROWS, bound_number, shown_number

    bound_number("reveal", args.reveal, MAX_REVEAL_ROWS, lower=-(2**63))  # below 0: check_reveal's message
    check_reveal(args.split, args.reveal)
    if not 0 < args.test_fraction < 1:
        raise InputError("test-fraction", f"must be between 0 and 1 (got {args.test_fraction})")
    if args.seed < 0 or args.seed >= 2**32:
        raise InputError("seed", f"must be an integer in [0, 2^32) (got {shown_number(args.seed)})")
    check_plot_path(args.plot)
    table = _read(args.runs, args.strict) if args.runs else load_reference_runs()
    console = report_console(stderr=True)
    with console.status("validating") as status:
        report = validate(table.df, args.split, args.seed, learners, args.interval,
                          progress=lambda name: status.update(f"fold {name}"), reveal=args.reveal,
                          test_fraction=args.test_fraction)
    if args.plot:
        from tuneplan.report.parity import parity_plot

        parity_plot(report, args.plot)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    m = report.metrics()
    if not args.by_source:
        m = m[m["source"] == "ALL"]
    # a source of fewer rows keeps at least one held out: the notes say how many each fold revealed
    revealed = f"; up to {args.reveal} rows of each held-out source revealed to its fit" if args.reveal else ""
    def pct(v):
        return "-" if v != v else f"{100 * v:.1f}%"

    t = rich_table(f"held-out errors, split {args.split} (seed {args.seed}{revealed})", [
        (col, "left" if col in ("estimator", "source") else "right") for col in (
            "estimator", "source", "n thr", "MdAPE thr", "MAPE thr", "<=10%", "<=25%", "n mem", "MdAPE mem",
            "fit/OOM right")], [
        (r["estimator"], r["source"], str(r["n_throughput"]), pct(r["throughput_mdape"]), pct(r["throughput_mape"]),
         pct(r["within_10"]), pct(r["within_25"]), str(r["n_memory"]), pct(r["memory_mdape"]),
         pct(r["fit_accuracy"]) + (f" of {r['n_fit']}" if r["n_fit"] else ""))
        for r in m.sort_values(["source", "throughput_mdape"]).to_dict("records")])
    out = report_console()
    out.print(t)
    for r in m[m["source"] == "ALL"].to_dict("records"):
        if r["n_fit"]:
            out.print(f"fit verdicts of {r['estimator']}: predicted fits & ran {r['fit_tp']}, predicted fits & OOM "
                      f"{r['fit_fp']}, predicted OOM & ran {r['fit_fn']}, predicted OOM & OOM {r['fit_tn']}")
    for k, v in report.coverage.items():
        out.print(f"interval coverage of {k}: {100 * v:.1f}% of held-out rows inside the {100 * args.interval:.0f}% "
                  "interval")
    if report.coverage_groups:
        g = rich_table(f"{100 * args.interval:.0f}% interval coverage of tuneplan by group (above / below: share "
                       "of rows over the high bound / under the low bound)",
                       [(col, "left" if col in ("metric", "group", "value") else "right")
                        for col in ("metric", "group", "value", "rows", "inside", "above", "below")],
                       [(r["metric"], r["group"], r["value"], str(r["rows"]), pct(r["coverage"]), pct(r["above"]),
                         pct(r["below"])) for r in report.coverage_groups])
        out.print(g)
    for b in report.reliability:
        out.print(f"fit probability {b['low']:.0%}-{b['high']:.0%}: {b['rows']} rows, mean given "
                  f"{b['probability']:.0%}, ran {b['ran']:.0%}")
    for msg in report.messages:
        out.print(f"note: {msg}")
    if args.plot:
        out.print(f"parity plot written to {args.plot}")
    return 0
