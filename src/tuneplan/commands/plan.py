"""`tuneplan plan` (search GPU type x count x method x batch and recommend one) and `tuneplan curve`
(throughput and memory versus micro-batch).

Exit codes of `plan`: 0 with a recommendation; 1 when the question is valid but nothing meets the
constraints (the message names the constraint that rules everything out and the closest
configuration; `--runs`: when any job has no plan); 2 for bad input (unknown GPU, provider or model
names, malformed values: one line with the close matches).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tuneplan.commands.common import (
    add_data_args,
    add_force_arg,
    add_gpu_args,
    add_job_args,
    add_strict_names,
    check_interval,
    check_out,
    int_list,
    job_fields,
    job_kwargs,
    name_list,
    positive_float,
    positive_int,
    print_json,
    read_data,
    rich_table,
)
from tuneplan.commands.from_config import add_from_args, apply_from, apply_from_plan, print_provenance
from tuneplan.errors import InputError, atomic_output
from tuneplan.plan.options import plan_options, plan_values
from tuneplan.plan.units import hours, money
from tuneplan.specs.job import plan_axes


def register(sub) -> None:
    p = sub.add_parser(
        "plan", help="search GPU type x count x method x batch: cheapest, fastest, deadline",
        description="Search the configurations you could choose (GPU type x count x nodes x method x "
                    "micro-batch x gradient accumulation x sharding x checkpointing), keep those that fit "
                    "in memory, and recommend one: the cheapest that meets the deadline by default. "
                    "Exit code 1 when nothing meets the constraints, 2 for bad input.")
    p.add_argument("--model", help="catalog name or Hugging Face id, or a config.json (or folder)")
    add_strict_names(add_plan_args(p, "search"))
    add_plan_args(p, "the question")
    add_job_args(p, skip=plan_axes())  # the job's other options (those JobSpec declares with axis= are searched)
    add_data_args(p, collator=False)
    o = p.add_argument_group("output")
    o.add_argument("--calibration", help="calibration file or name (default: the shipped one)")
    o.add_argument("--interval", type=float, default=0.8, help="interval coverage (default 0.8; 0 for none)")
    o.add_argument("--json", action="store_true", help="print one JSON object")
    o.add_argument("--top", type=positive_int, help="candidates shown (default 10; --json: all)")
    o.add_argument("--plot", help="write the time-versus-cost plot (PNG or SVG)")
    o.add_argument("--out", help="write the candidates (or, with --runs, one plan per job) as CSV (an existing "
                   "file only with --force)")
    add_force_arg(o)
    o.add_argument("--runs", help="workload CSV: plan every job in it (one per row; see docs/planning.md)")
    add_from_args(p, func=run_plan)

    cv = sub.add_parser(
        "curve", help="throughput and memory versus micro-batch, as a plot",
        description="Throughput (tokens/s) and memory per GPU versus micro-batch for one model, GPU and job, "
                    "the largest micro-batch that fits marked; measured runs overlaid with --runs.")
    cv.add_argument("--model", help="catalog name or Hugging Face id, or a config.json (or folder)")
    cv.add_argument("--calibration", help="calibration file or name (default: the shipped one)")
    cv.add_argument("--max-micro-batch", type=positive_int, help="sweep 1..N (default: twice the largest "
                    "that fits, at least 8)")
    cv.add_argument("--runs", help="runs file (or folder) with measured runs to overlay")
    cv.add_argument("--plot", help="write the plot (PNG or SVG)")
    cv.add_argument("--json", action="store_true", help="print one JSON object")
    add_gpu_args(cv)
    add_job_args(cv)
    add_from_args(cv, func=run_curve)


PLAN_TYPES = {"names": name_list, "ints": int_list, "int": positive_int, "hours": positive_float}
"""The argparse type of each kind of plan option (plan/options.py); `duration` and `money` are read by
`plan_values`, `choice` and `bool` by argparse."""


def add_plan_args(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The --help group `title` with the flags of its plan options (plan/options.py)."""
    group = p.add_argument_group(title)
    for o in plan_options(title).values():
        kw: dict[str, Any] = {"dest": o.name, "default": o.default, "help": o.help}
        if o.kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif o.kind == "choice":
            kw["choices"] = o.choices
        elif o.kind in PLAN_TYPES:
            kw["type"] = PLAN_TYPES[o.kind]
        group.add_argument(o.flag, *o.flags[1:], **kw)
        for alias in o.hidden:
            group.add_argument(alias, **kw | {"help": argparse.SUPPRESS})
    return group


def plan_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`plan_run(...)` keyword arguments from the flags (model excluded)."""
    check_interval(args.interval)
    if args.deadline is not None and args.deadline_h is not None:
        raise InputError("deadline", "give --deadline or --deadline-h, not both")
    counts = [g for g in args.gpus or [] if g.strip().isdigit()]
    if counts:  # `estimate --gpus 8` is a count; plan's --gpus names the GPU types to search
        raise InputError("gpus", f"plan's --gpus takes GPU types (e.g. H100-SXM5-80GB,A100-SXM4-80GB), not a count "
                         f"('{counts[0]}'): --max-gpus {counts[0]} searches up to that many GPUs")
    kw: dict[str, Any] = {k: getattr(args, k) for k in ("provider", "prices", "rate", "calibration", "grid_gco2_kwh")}
    kw |= {"interval": args.interval or None, "strict": args.strict_names}
    kw |= plan_values({n: getattr(args, n) for n in plan_options()})
    for dest, name in job_fields().items():  # the job options (plan_axes: the plan options above)
        if name not in plan_axes() and name not in ("rate_usd_per_gpu_hour", "grid_gco2_kwh"):
            kw[name] = getattr(args, dest, None)
    return {k: v for k, v in kw.items() if v is not None}


def run_plan(args: argparse.Namespace) -> int:
    check_out(args, args.out, "out", "CSV file")  # before any work: never over an input, nor an existing file
    cfg = apply_from_plan(args)
    kw = plan_kwargs(args)
    data_note = _apply_data(args, kw)
    if args.runs:
        return _run_workload(args, kw)
    if not args.model:
        raise InputError("model", "is required (a catalog name, Hugging Face id, or config.json path), "
                         "or --runs FILE.csv with a model column")
    from tuneplan.plan.search import plan_run

    res = plan_run(args.model, **kw)
    if data_note is not None:
        res.notes.append(data_note[0])
    if args.plot:
        from tuneplan.report.plots import plot_plan

        plot_plan(res, args.plot)
    if args.out:  # checked before the search (check_out)
        with atomic_output(args.out, "out", "CSV file") as tmp:
            res.candidates.to_csv(tmp, index=False, lineterminator="\n")
    if args.json:
        print_json(res.to_dict(max_candidates=args.top) | ({"data": data_note[1]} if data_note else {}), cfg)
    else:
        print_plan(res, top=args.top or 10)
        if cfg is not None:
            print_provenance(cfg)
        if args.plot:
            print(f"plot written to {args.plot}")
        if args.out:
            print(f"candidates written to {args.out}")
    return 0  # "nothing fits" is an answer too (its why in the output, `status` in --json), not a failure


def _apply_data(args: argparse.Namespace, kw: dict[str, Any]) -> tuple[str, dict] | None:
    """`--data`: the dataset's examples and mean tokens (after truncation at --seq-len) replace --examples and
    --tokens-per-example; without --seq-len the sequence length is the longest example, so a configuration
    that fits holds the longest batch (time, batches padded to their longest: physics/run.longest_of).
    Returns (the note the plan prints, the data summary) or None without --data."""
    data = read_data(args)
    if data is None:
        return None
    if args.runs:
        raise InputError("data", "applies to one plan, not to --runs (give each job's sizes in the workload file)")
    given = [k for k in ("examples", "tokens", "tokens_per_example") if kw.get(k) is not None]
    if given:
        raise InputError("data", f"replaces --{given[0].replace('_', '-')}: give the data or the sizes, not both")
    from tuneplan.corpus.collate import truncate

    cut, n_cut, _ = truncate(data.length, kw.get("seq_len"))
    kw["examples"] = float(data.examples)
    kw["tokens_per_example"] = float(cut.mean())
    seq_src = f"--seq-len {kw['seq_len']:,}" if kw.get("seq_len") else "the longest example"
    kw.setdefault("seq_len", int(cut.max()))
    note = (data.assumption().removesuffix(".") + f"; mean {cut.mean():,.0f} tokens per example, sequence length "
            f"{kw['seq_len']:,} ({seq_src}" + (f", {n_cut:,} example(s) truncated" if n_cut else "") + ").")
    return note, data.to_dict()


def _run_workload(args: argparse.Namespace, kw: dict[str, Any]) -> int:
    from tuneplan.plan.batch import plan_workload

    if args.model:
        kw["model"] = args.model
    if args.plot:
        raise InputError("plot", "draws one plan: leave it out with --runs")

    def show(r: dict) -> None:
        if args.json:
            return
        if r["status"] == "planned":
            print(f"{r['id']}: {r['model']}: {r['gpus']} x {r['gpu']} {r['method']}, "
                  f"{money(r.get('cost_usd'))} in {hours(r['time_s'])}")
        else:
            print(f"{r['id']}: {r.get('model', '')}: {r['status']}: {r['message']}",
                  file=sys.stderr if r["status"] == "error" else sys.stdout)

    rows = plan_workload(args.runs, kw, out=args.out, on_row=show)
    if args.json:
        print_json(rows)
    elif args.out:
        print(f"{len(rows)} plan(s) written to {args.out}")
    statuses = {r["status"] for r in rows}
    return 2 if "error" in statuses else 0  # a no-plan row is an answer (its message says why)


PLAN_COLUMNS = (("GPUs", "right"), ("GPU", "left"), ("method", "left"), ("mb x ga", "right"), ("sharding", "left"),
                ("ckpt", "center"), ("time", "right"), ("cost", "right"), ("kWh", "right"), ("tokens/s", "right"),
                ("GiB/GPU", "right"), ("ok", "center"))


def print_plan(res, top: int = 10) -> None:
    from tuneplan.report.tables import report_console

    con = report_console()
    wl = res.workload
    work = f"{wl.samples_per_epoch:,.0f} samples x {wl.seq_len} tokens x {wl.epochs:g} epoch(s)"
    con.print(f"[bold]Plan for {res.model}[/bold]: {work}")
    cons = []
    if res.deadline_s is not None:
        cons.append(f"deadline {hours(res.deadline_s)}")
    if res.budget_usd is not None:
        cons.append(f"budget {money(res.budget_usd)}")
    con.print(f"Searched {res.n_evaluated:,} configurations ({len(res.gpus)} GPU type(s) x {len(res.methods)} "
              f"method(s) x counts {res.space['gpu_counts']} x micro-batch x sharding x checkpointing) in "
              f"{res.seconds:.2f} s: {res.n_fit:,} fit in memory, {res.n_eligible:,} meet the constraints "
              f"({', '.join(cons) or 'none'}); objective: {res.objective}.")
    if res.ok:
        r = res.recommended
        con.print(f"\n[bold green]Recommended:[/bold green] {r['description']}")
        lo, hi = r.get("time_low_s"), r.get("time_high_s")
        span = "no interval" if lo is None or hi is None else f"{hours(lo)} - {hours(hi)}"
        con.print(f"  time {hours(r['time_s'])} ({span}), cost {money(r['cost_usd'])} "
                  f"at {money(r['rate_usd_per_gpu_hour'])}/GPU-h, energy {r['energy_kwh']:.1f} kWh "
                  f"({r['co2_kg']:.1f} kg CO2), {r['tokens_per_s']:,.0f} tokens/s, "
                  f"{r['memory_per_gpu_gib']:.1f} of {r['memory_capacity_gib']:g} GiB per GPU"
                  + (" (blocks cached for other batch shapes included: torch frees them before it runs out)"
                     if r["memory_per_gpu_gib"] > r["memory_capacity_gib"] else ""))
        con.print(f"[bold]Why:[/bold] {res.why}")
    else:
        head = "Nothing fits" if res.status == "nothing-fits" else "Nothing meets the constraints"
        con.print(f"\n[bold red]{head}:[/bold red] {res.message}")

    def table(title: str, df):
        return rich_table(title, PLAN_COLUMNS, [
            (str(row["gpus"]), row["gpu"], row["method"], f"{row['micro_batch']} x {row['grad_accum']}",
             row["sharding"], "on" if row["grad_ckpt"] else "off", hours(row["time_s"]), money(row["cost_usd"]),
             f"{row['energy_kwh']:.1f}", f"{row['tokens_per_s']:,.0f}", f"{row['memory_per_gpu_gib']:.1f}",
             "yes" if row["eligible"] else "no") for row in df.to_dict("records")])

    if len(res.pareto):
        con.print(table("Pareto front of cost versus time (fastest first)", res.pareto.head(max(top, 12))))
    if len(res.candidates):
        con.print(table(f"Top {min(top, len(res.candidates))} of {len(res.candidates):,} (best first for "
                        f"'{res.objective}'; ok: meets the constraints)", res.candidates.head(top)))
    if res.infeasible:
        con.print("[bold]Not feasible:[/bold]")
        for x in res.infeasible:
            con.print(f"  - {x['choice']}: {x['reason']}")
    con.print("[dim]Prices: " + "; ".join(f"{g}: {p['source']}" for g, p in res.prices.items()) + "[/dim]")
    for n in res.notes:
        con.print(f"[dim]{n}[/dim]")


def run_curve(args: argparse.Namespace) -> int:
    cfg = apply_from(args)
    if not args.model:
        raise InputError("model", "is required (a catalog name, Hugging Face id, or config.json path)")
    from tuneplan.plan.curve import curve

    res = curve(args.model, args.gpu, max_micro_batch=args.max_micro_batch, runs=args.runs,
                calibration=args.calibration, gpu_file=args.gpu_file, peak_tflops=args.peak_tflops,
                memory_gib=args.memory_gib, bandwidth_gbs=args.bandwidth_gbs, strict=args.strict_names,
                **job_kwargs(args))
    if args.plot:
        from tuneplan.report.plots import plot_curve

        plot_curve(res, args.plot)
    if args.json:
        return print_json(res.to_dict(), cfg)
    from tuneplan.report.tables import report_console

    con = report_console()
    rows = shown_curve_rows(res.points.to_dict("records"), res.max_micro_batch)
    t = rich_table(f"{res.model} · {res.method} · {res.gpus} x {res.gpu} · seq_len {res.seq_len}",
                   [(col, "right") for col in ("micro-batch", "tokens/s", "step", "memory/GPU", "fits")],
                   [(str(r["micro_batch"]), f"{r['tokens_per_s']:,.0f}", f"{r['step_s']:.3f} s",
                     f"{r['memory_per_gpu_gib']:.1f} GiB", ("yes" if r["fits"] else "no")
                     + (" <- largest that fits" if r["micro_batch"] == res.max_micro_batch else "")) for r in rows])
    con.print(t)
    con.print(f"largest micro-batch that fits: {res.max_micro_batch} ({res.memory_capacity_gib:g} GiB per GPU)")
    if len(rows) < len(res.points):
        con.print(f"[dim]{len(rows)} of the {len(res.points):,} micro-batches shown (powers of two and the largest "
                  "that fits, with its neighbours); --json or --plot gives every one[/dim]")
    for n in res.notes:
        con.print(f"[dim]{n}[/dim]")
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


CURVE_TABLE_ROWS = 64
"""Micro-batches the text table of `curve` lists in full; a longer sweep (up to MAX_CURVE_POINTS) shows
the powers of two and the largest that fits with its neighbours (an 8,192-row rich table takes seconds)."""


def shown_curve_rows(rows: list[dict], largest: int) -> list[dict]:
    """The curve's rows the table lists: all of them up to CURVE_TABLE_ROWS, else a subset in order."""
    if len(rows) <= CURVE_TABLE_ROWS:
        return rows
    last = rows[-1]["micro_batch"]
    keep = {1 << k for k in range(last.bit_length())} | {largest - 1, largest, largest + 1, last}
    return [r for r in rows if r["micro_batch"] in keep]
