"""The estimate as rich tables: run totals, step-time parts, memory parts, assumptions."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from tuneplan.report.format import duration, gib, money, number


def estimate_renderable(r) -> Group:
    d = r.to_dict()
    iv = d.get("interval")
    title = f"{d['model']} · {d['method']} · {d['gpus']} x {d['gpu']} · estimator {d['estimator']}"
    st = d.get("stage")
    if st:  # a preference / RL stage (docs/stages.md)
        title += f" · stage {st['stage']}"
    main = Table(title=title, show_header=True, header_style="bold", title_justify="left")
    main.add_column("figure")
    main.add_column("value", justify="right")
    main.add_column("note", style="dim")
    if d.get("weights_scheme"):
        title += f" · {d['weights_scheme']}"
    main.title = title
    _run_rows(main, d, iv)
    main.add_row("throughput", number(d["tokens_per_s"], "tokens/s"), f"{number(d['samples_per_s'], 'samples/s')}")
    main.add_row("step time", duration(d["step_time_s"]),
                 f"{d['steps']:,} optimizer steps" if d.get("steps") is not None else "per optimizer step")
    if d.get("tokens_total") is not None:
        main.add_row("tokens processed", number(d["tokens_total"], "tokens"), "all epochs, as padded/packed")
    main.add_row("MFU", f"{d['mfu']:.1%}", "model FLOPs / (time x GPUs x dense peak)")
    verdict = Text("fits", style="green") if d["fits"] else Text("DOES NOT FIT", style="bold red")
    mem = f"{gib(d['memory_per_gpu_gib'])} of {d['memory_capacity_gib']:g} GiB"
    if iv and "memory_per_gpu_gib_low" in iv:
        mem += f" ({iv['memory_per_gpu_gib_low']:.1f} - {iv['memory_per_gpu_gib_high']:.1f})"
    main.add_row("memory per GPU", mem, verdict)
    main.add_row(*largest_micro_batch_row(d))

    parts = Table(title="step time parts (per optimizer step)", title_justify="left", header_style="bold")
    parts.add_column("part")
    parts.add_column("time", justify="right")
    parts.add_column("share", justify="right")
    total = d["step_breakdown_s"].get("total") or 1.0
    for k, v in d["step_breakdown_s"].items():
        if k == "total" or v == 0:
            continue
        parts.add_row(d.get("step_part_labels", {}).get(k, k.replace("_", " ")), duration(v), f"{v / total:.0%}")
    parts.add_row("total", duration(total), "100%", style="bold")

    memt = Table(title="memory per GPU", title_justify="left", header_style="bold")
    memt.add_column("part")
    memt.add_column("GiB", justify="right")
    for k, v in d["memory_breakdown_gib"].items():
        if v:
            memt.add_row(k.replace("_", " "), f"{v:,.2f}")
    memt.add_row("peak (nvidia-smi)", f"{d['memory_per_gpu_gib']:,.2f}", style="bold")

    items: list = [main, parts, memt]
    if st and st.get("train_parts_s"):
        tp = st["train_parts_s"]
        items.insert(1, Text("training time by stage part: " + ", ".join(
            f"{k.replace('_', ' ')} {duration(v)}" for k, v in tp.items()), style="bold"))
    if d["warnings"]:
        items.append(Text("\n".join(f"warning: {w}" for w in d["warnings"]), style="yellow"))
    if d["suggestions"]:
        items.append(Text("to make it fit (cheapest first):\n" + "\n".join(f"  - {s}" for s in d["suggestions"]),
                          style="yellow"))
    items.append(Text("what this assumes:\n" + "\n".join(f"  - {a}" for a in d["assumptions"]), style="dim"))
    return Group(*items)


def _run_rows(main: Table, d: dict, iv: dict | None) -> None:
    """Wall clock, device-hours, cost and energy; without a data size, one row saying what they need."""
    if d.get("wall_clock_s") is None:
        main.add_row("wall clock, cost", "need a data size", "--examples N --tokens-per-example T, or --tokens T")
        return
    wall = duration(d["wall_clock_s"])
    if iv and "wall_clock_s_low" in iv:
        wall += f" ({duration(iv['wall_clock_s_low'])} - {duration(iv['wall_clock_s_high'])}, {iv['coverage']:.0%})"
    main.add_row("wall clock", wall, "load + train + eval + checkpoints")
    main.add_row("device-hours", number(d["device_hours"], "GPU-h"), f"{d['gpus']} GPU(s)")
    cost = money(d["cost_usd"])
    if iv and "cost_usd_low" in iv:
        cost += f" ({money(iv['cost_usd_low'])} - {money(iv['cost_usd_high'])})"
    main.add_row("cost", cost, d["rate_source"])
    main.add_row("energy", number(d["energy_kwh"], "kWh"), f"{number(d['co2_kg'], 'kg CO2')}")


def largest_micro_batch_row(d: dict) -> tuple[str, str, str]:
    """The largest micro-batch that fits; when none does, said so (not "0")."""
    seq = d["workload"]["seq_len"]
    mb = d.get("max_micro_batch")
    if mb is None:
        return ("largest micro-batch", "-", "this estimator has no memory model")
    if mb == 0:
        return ("largest micro-batch", "none fits", f"not even micro-batch 1 at seq_len {seq}: see the warning")
    return ("largest micro-batch", str(mb), f"at seq_len {seq}")


def print_estimate(r, console: Console | None = None) -> None:
    (console or Console()).print(estimate_renderable(r))
