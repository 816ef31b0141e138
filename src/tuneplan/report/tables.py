"""The estimate as rich tables and texts: run totals, step-time parts, memory parts, assumptions, printed
on the console of `report_console`: a terminal's width, or the content's full width when the output is not
a terminal (a pipe, a file, CI). rich is imported when printing."""

from __future__ import annotations

import os
from functools import partial

from tuneplan.report.format import duration, gib, money, number

PIPE_WIDTH = 10_000
"""Console width when stdout is not a terminal and COLUMNS is not set: wide enough that no table column
or text line wraps (tables are as wide as their content; rich would otherwise wrap at 80 columns)."""
STYLED = {"verdict_fit": "green", "verdict_no_fit": "bold red", "warning": "yellow", "assumptions": "dim",
          "stage": "bold"}
"""rich styles of the estimate's styled texts (a terminal shows them)."""


def _table(title: str, headers: list[str], justify: list[str], styles: list[str | None] | None = None):
    """A rich Table: the title on the left, bold headers, each column's style (a terminal shows it)."""
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold", title_justify="left")
    for header, how, style in zip(headers, justify, styles or [None] * len(headers), strict=True):
        table.add_column(header, justify=how, style=style)
    return table


def _add(table, *cells, bold: bool = False) -> None:
    """One row, its cells printed as written (no rich markup; a Text keeps its style); `bold`: a total."""
    from rich.text import Text

    table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in cells),
                  style="bold" if bold else None)


def report_console(*, stderr: bool = False, file=None):
    """A rich Console for tables: on a terminal its width; otherwise (unless COLUMNS says a width) wide
    enough that tables take their content's full width instead of wrapping at 80 columns."""
    from rich.console import Console

    console = Console(stderr=stderr, file=file)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console.width = PIPE_WIDTH
    return console


def estimate_items(r) -> list:
    """The estimate's output as rich Tables and Texts, in print order."""
    from rich.text import Text

    d = r.to_dict()
    iv = d.get("interval")
    title = f"{d['model']} · {d['method']} · {d['gpus']} x {d['gpu']} · estimator {d['estimator']}"
    st = d.get("stage")
    if st:  # a preference / RL stage (docs/stages.md)
        title += f" · stage {st['stage']}"
    if d.get("weights_scheme"):
        title += f" · {d['weights_scheme']}"
    main = _table(title, ["figure", "value", "note"], ["left", "right", "left"], styles=[None, None, "dim"])
    add = partial(_add, main)
    _run_rows(add, d, iv)
    add("throughput", number(d["tokens_per_s"], "tokens/s"), f"{number(d['samples_per_s'], 'samples/s')}")
    step = duration(d["step_time_s"])
    if iv and "step_time_s_low" in iv:
        step += f" ({duration(iv['step_time_s_low'])} - {duration(iv['step_time_s_high'])})"
    add("step time", step, f"{d['steps']:,} optimizer steps" if d.get("steps") is not None else "per optimizer step")
    if d.get("tokens_total") is not None:
        add("tokens processed", number(d["tokens_total"], "tokens"), "all epochs, as padded/packed")
    add("MFU", f"{d['mfu']:.1%}", "model FLOPs / (time x GPUs x dense peak)")
    fit_text = "fits" if d["fits"] else "DOES NOT FIT"
    if iv and iv.get("fit_probability") is not None:  # the chance the measured peak fits (learn.intervals)
        p = iv["fit_probability"]
        fit_text += f" ({p:.0%} likely)" if d["fits"] else f" ({p:.0%} chance it fits)"
    if d["fits"] and d.get("memory_fit_gib") is not None and d["memory_per_gpu_gib"] > d["memory_capacity_gib"]:
        # the peak counts blocks cached for other batch shapes, which torch frees before it runs out
        fit_text += f": {gib(d['memory_fit_gib'])} without blocks cached for other batch shapes"
    verdict = Text(fit_text, style=STYLED["verdict_fit" if d["fits"] else "verdict_no_fit"])
    mem = f"{gib(d['memory_per_gpu_gib'])} of {d['memory_capacity_gib']:g} GiB"
    if iv and "memory_per_gpu_gib_low" in iv:
        mem += f" ({iv['memory_per_gpu_gib_low']:.1f} - {iv['memory_per_gpu_gib_high']:.1f})"
    add("memory per GPU", mem, verdict)
    add(*largest_micro_batch_row(d))

    parts = _table("step time parts (per optimizer step)", ["part", "time", "share"], ["left", "right", "right"])
    total = d["step_breakdown_s"].get("total") or 1.0
    for k, v in d["step_breakdown_s"].items():
        if k == "total" or v == 0:
            continue
        _add(parts, d.get("step_part_labels", {}).get(k, k.replace("_", " ")), duration(v), f"{v / total:.0%}")
    _add(parts, "total", duration(total), "100%", bold=True)

    memt = _table("memory per GPU", ["part", "GiB"], ["left", "right"])
    for k, v in d["memory_breakdown_gib"].items():
        if v:
            _add(memt, k.replace("_", " "), f"{v:,.2f}")
    # the two peaks torch reports (each a peak, not a part of the sum); nvidia-smi's adds the CUDA context
    if d.get("memory_allocated_gib") is not None:
        _add(memt, "peak allocated (torch)", f"{d['memory_allocated_gib']:,.2f}")
    if d.get("memory_reserved_gib") is not None:
        _add(memt, "peak reserved (torch)", f"{d['memory_reserved_gib']:,.2f}")
    _add(memt, "peak (nvidia-smi)", f"{d['memory_per_gpu_gib']:,.2f}", bold=True)

    items: list = [main, parts, memt]
    if d.get("communication_by_domain"):  # physics/comm_domains.py: before overlap, per optimizer step
        comm = _table("communication per GPU by domain (per step, before overlap)",
                      ["collectives", "inside the NVLink domain", "across domains"], ["left", "right", "right"])
        for k, v in d["communication_by_domain"].items():
            _add(comm, k.replace("_", " "), *(f"{v[f'{dom}_gb']:,.2f} GB, {duration(v[f'{dom}_s'])}"
                                              for dom in ("inside_domain", "across_domains")))
        items.insert(2, comm)
    if st and st.get("train_parts_s"):
        tp = st["train_parts_s"]
        items.insert(1, Text("training time by stage part: " + ", ".join(
            f"{k.replace('_', ' ')} {duration(v)}" for k, v in tp.items()), style=STYLED["stage"]))
    if d["warnings"]:
        items.append(Text("\n".join(f"warning: {w}" for w in d["warnings"]), style=STYLED["warning"]))
    if d["suggestions"]:
        items.append(Text("to make it fit (cheapest first):\n" + "\n".join(f"  - {s}" for s in d["suggestions"]),
                          style=STYLED["warning"]))
    if iv and iv.get("why"):
        items.append(Text("the interval is widest for: " + "; ".join(iv["why"]), style=STYLED["assumptions"]))
    items.append(Text("what this assumes:\n" + "\n".join(f"  - {a}" for a in d["assumptions"]),
                      style=STYLED["assumptions"]))
    return items


def _run_rows(add, d: dict, iv: dict | None) -> None:
    """Wall clock, device-hours, cost and energy; without a data size, one row saying what they need."""
    if d.get("wall_clock_s") is None:
        add("wall clock, cost", "need a data size", "--examples N --tokens-per-example T, or --tokens T")
        return
    wall = duration(d["wall_clock_s"])
    if iv and "wall_clock_s_low" in iv:
        wall += f" ({duration(iv['wall_clock_s_low'])} - {duration(iv['wall_clock_s_high'])}, {iv['coverage']:.0%})"
    add("wall clock", wall, "load + train + eval + checkpoints")
    add("device-hours", number(d["device_hours"], "GPU-h"), f"{d['gpus']} GPU(s)")
    cost = money(d["cost_usd"])
    if iv and "cost_usd_low" in iv:
        cost += f" ({money(iv['cost_usd_low'])} - {money(iv['cost_usd_high'])})"
    add("cost", cost, d["rate_source"])
    add("energy", number(d["energy_kwh"], "kWh"), f"{number(d['co2_kg'], 'kg CO2')}")


def largest_micro_batch_row(d: dict) -> tuple[str, str, str]:
    """The largest micro-batch that fits; when none does, said so (not "0")."""
    seq = d["workload"]["seq_len"]
    mb = d.get("max_micro_batch")
    if mb is None:
        return ("largest micro-batch", "-", "this estimator has no memory model")
    if mb == 0:
        return ("largest micro-batch", "none fits", f"not even micro-batch 1 at seq_len {seq}: see the warning")
    return ("largest micro-batch", str(mb), f"at seq_len {seq}")


def print_estimate(r, console=None) -> None:
    from rich.console import Group

    (console or report_console()).print(Group(*estimate_items(r)))


def estimate_text(r) -> str:
    """What `print_estimate` writes to a pipe or a file: the tables and texts without colour."""
    import io

    buf = io.StringIO()
    print_estimate(r, report_console(file=buf))
    return buf.getvalue()
