"""The estimate as tables: run totals, step-time parts, memory parts, assumptions.

The tables are built once as plain data (`estimate_items`) and printed by rich on a terminal, or,
when rich would print no colour (a pipe, a file, CI), by `tuneplan.report.plain`, which lays them
out exactly as rich does without importing it (~0.1 s of start-up)."""

from __future__ import annotations

from tuneplan.report.format import duration, gib, money, number
from tuneplan.report.plain import Cell, NotPlain, PlainTable, plain_width, render_table, render_text

STYLED = {"verdict_fit": "green", "verdict_no_fit": "bold red", "warning": "yellow", "assumptions": "dim",
          "stage": "bold"}
"""rich styles of the estimate's styled texts (a terminal shows them)."""


class Styled(str):
    """A text of the output with its rich style (and no markup: rich prints it as written)."""

    style: str

    def __new__(cls, text: str, style: str) -> Styled:
        obj = super().__new__(cls, text)
        obj.style = style
        return obj


def estimate_items(r) -> list:
    """The estimate's output as PlainTable / Styled items, in print order."""
    d = r.to_dict()
    iv = d.get("interval")
    title = f"{d['model']} · {d['method']} · {d['gpus']} x {d['gpu']} · estimator {d['estimator']}"
    st = d.get("stage")
    if st:  # a preference / RL stage (docs/stages.md)
        title += f" · stage {st['stage']}"
    if d.get("weights_scheme"):
        title += f" · {d['weights_scheme']}"
    main = PlainTable(title, ["figure", "value", "note"], ["left", "right", "left"], styles=[None, None, "dim"])
    add = main.rows.append
    _run_rows(add, d, iv)
    add(_cells("throughput", number(d["tokens_per_s"], "tokens/s"), f"{number(d['samples_per_s'], 'samples/s')}"))
    add(_cells("step time", duration(d["step_time_s"]),
               f"{d['steps']:,} optimizer steps" if d.get("steps") is not None else "per optimizer step"))
    if d.get("tokens_total") is not None:
        add(_cells("tokens processed", number(d["tokens_total"], "tokens"), "all epochs, as padded/packed"))
    add(_cells("MFU", f"{d['mfu']:.1%}", "model FLOPs / (time x GPUs x dense peak)"))
    verdict = Styled("fits", STYLED["verdict_fit"]) if d["fits"] else Styled("DOES NOT FIT", STYLED["verdict_no_fit"])
    mem = f"{gib(d['memory_per_gpu_gib'])} of {d['memory_capacity_gib']:g} GiB"
    if iv and "memory_per_gpu_gib_low" in iv:
        mem += f" ({iv['memory_per_gpu_gib_low']:.1f} - {iv['memory_per_gpu_gib_high']:.1f})"
    add(_cells("memory per GPU", mem, verdict))
    add(_cells(*largest_micro_batch_row(d)))

    parts = PlainTable("step time parts (per optimizer step)", ["part", "time", "share"], ["left", "right", "right"],
                       bold_last=True)
    total = d["step_breakdown_s"].get("total") or 1.0
    for k, v in d["step_breakdown_s"].items():
        if k == "total" or v == 0:
            continue
        parts.rows.append(_cells(d.get("step_part_labels", {}).get(k, k.replace("_", " ")), duration(v),
                                 f"{v / total:.0%}"))
    parts.rows.append(_cells("total", duration(total), "100%"))

    memt = PlainTable("memory per GPU", ["part", "GiB"], ["left", "right"], bold_last=True)
    for k, v in d["memory_breakdown_gib"].items():
        if v:
            memt.rows.append(_cells(k.replace("_", " "), f"{v:,.2f}"))
    memt.rows.append(_cells("peak (nvidia-smi)", f"{d['memory_per_gpu_gib']:,.2f}"))

    items: list = [main, parts, memt]
    if st and st.get("train_parts_s"):
        tp = st["train_parts_s"]
        items.insert(1, Styled("training time by stage part: " + ", ".join(
            f"{k.replace('_', ' ')} {duration(v)}" for k, v in tp.items()), STYLED["stage"]))
    if d["warnings"]:
        items.append(Styled("\n".join(f"warning: {w}" for w in d["warnings"]), STYLED["warning"]))
    if d["suggestions"]:
        items.append(Styled("to make it fit (cheapest first):\n" + "\n".join(f"  - {s}" for s in d["suggestions"]),
                            STYLED["warning"]))
    items.append(Styled("what this assumes:\n" + "\n".join(f"  - {a}" for a in d["assumptions"]),
                        STYLED["assumptions"]))
    return items


def _cells(*texts) -> list[Cell]:
    return [Cell(t, markup=False) if isinstance(t, Styled) else Cell(str(t)) for t in texts]


def _run_rows(add, d: dict, iv: dict | None) -> None:
    """Wall clock, device-hours, cost and energy; without a data size, one row saying what they need."""
    if d.get("wall_clock_s") is None:
        add(_cells("wall clock, cost", "need a data size", "--examples N --tokens-per-example T, or --tokens T"))
        return
    wall = duration(d["wall_clock_s"])
    if iv and "wall_clock_s_low" in iv:
        wall += f" ({duration(iv['wall_clock_s_low'])} - {duration(iv['wall_clock_s_high'])}, {iv['coverage']:.0%})"
    add(_cells("wall clock", wall, "load + train + eval + checkpoints"))
    add(_cells("device-hours", number(d["device_hours"], "GPU-h"), f"{d['gpus']} GPU(s)"))
    cost = money(d["cost_usd"])
    if iv and "cost_usd_low" in iv:
        cost += f" ({money(iv['cost_usd_low'])} - {money(iv['cost_usd_high'])})"
    add(_cells("cost", cost, d["rate_source"]))
    add(_cells("energy", number(d["energy_kwh"], "kWh"), f"{number(d['co2_kg'], 'kg CO2')}"))


def largest_micro_batch_row(d: dict) -> tuple[str, str, str]:
    """The largest micro-batch that fits; when none does, said so (not "0")."""
    seq = d["workload"]["seq_len"]
    mb = d.get("max_micro_batch")
    if mb is None:
        return ("largest micro-batch", "-", "this estimator has no memory model")
    if mb == 0:
        return ("largest micro-batch", "none fits", f"not even micro-batch 1 at seq_len {seq}: see the warning")
    return ("largest micro-batch", str(mb), f"at seq_len {seq}")


def rich_renderable(items: list):
    """The items as rich renderables (a Group of tables and styled texts)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    out = []
    for it in items:
        if isinstance(it, Styled):
            out.append(Text(str(it), style=it.style))
            continue
        t = Table(title=it.title, show_header=True, header_style="bold", title_justify="left")
        for h, j, style in zip(it.headers, it.justify, it.styles or [None] * len(it.headers), strict=True):
            t.add_column(h, justify=j, style=style)
        for n, row in enumerate(it.rows):
            cells = [Text(str(c.text), style=c.text.style) if isinstance(c.text, Styled) else c.text for c in row]
            t.add_row(*cells, style="bold" if it.bold_last and n == len(it.rows) - 1 else None)
        out.append(t)
    return Group(*out)


def estimate_renderable(r):
    """The estimate as a rich Group (what a terminal shows)."""
    return rich_renderable(estimate_items(r))


def plain_text(items: list, width: int) -> str:
    """The items as rich prints them without colour at `width` (NotPlain: rich must print them)."""
    lines: list[str] = []
    for it in items:
        lines.extend(render_text(str(it), width) if isinstance(it, Styled) else render_table(it, width))
    return "".join(line + "\n" for line in lines)


def print_estimate(r, console=None) -> None:
    import sys

    items = estimate_items(r)
    width = plain_width() if console is None else None
    if width is not None:
        try:
            text = plain_text(items, width)
        except NotPlain:
            pass
        else:
            sys.stdout.write(text)
            return
    if console is None:
        from rich.console import Console

        console = Console()
    console.print(rich_renderable(items))
