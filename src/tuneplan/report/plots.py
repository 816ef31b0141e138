"""Plots (matplotlib, imported only here and only when a plot is asked for). PNG or SVG by the file's
extension. Every plot has a title, labelled axes with units, and a legend.

- `plot_plan(result, path)`: time versus cost of the configurations that fit, GPU type by colour,
  method by marker, the Pareto front, the recommendation, the deadline and the budget;
- `plot_estimate(result, path)`: step-time and memory breakdowns as stacked bars, against the GPU's
  memory;
- `plot_curve(result, path)`: throughput and memory versus micro-batch, the largest that fits marked,
  measured runs overlaid.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from tuneplan.errors import InputError

FORMATS = ("png", "svg")
DPI = 120
MAX_POINTS = 20_000
"""Most background points drawn on the plan plot (a sample beyond it; the front and the
recommendation are always drawn)."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
PART_COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                "#9c755f", "#bab0ac", "#86bcb6")


def _target(path: str | Path) -> tuple[Path, str]:
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise InputError("plot", f"'{p.name}': the extension picks the format", FORMATS)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    return p, fmt


def _figure(w: float, h: float, ncols: int = 1):
    """A figure without pyplot (no global state, no GUI backend)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, ncols)
    return fig, axes


def _save(fig, path: Path, fmt: str) -> Path:
    """The figure written all at once (a temporary file renamed over `path`)."""
    from tuneplan.errors import atomic_output

    with atomic_output(path, "plot", "plot") as tmp:
        fig.savefig(tmp, format=fmt, dpi=DPI)
    return path


def _use_log(values: np.ndarray) -> bool:
    v = values[np.isfinite(values) & (values > 0)]
    return len(v) > 1 and v.max() / v.min() > 20


# --- plan ---------------------------------------------------------------------------------------

def plot_plan(result: Any, path: str | Path) -> Path:
    """Wall-clock time (h) versus cost ($) of the configurations that fit."""
    from matplotlib.lines import Line2D

    p, fmt = _target(path)
    fig, ax = _figure(11.5, 6.5)
    df = result.candidates
    cost_ok = len(df) > 0 and bool(np.isfinite(df["cost_usd"].to_numpy(dtype=float)).any())
    xcol, xlabel = ("cost_usd", "cost per run (USD)") if cost_ok else ("energy_kwh", "energy per run (kWh)")
    title = f"{result.model}: time versus {'cost' if cost_ok else 'energy'} of {len(df):,} configurations that fit"
    ax.set_title(title, fontsize=11)
    ax.set(xlabel=xlabel, ylabel="wall-clock time (h)")
    handles: list = []
    if len(df) == 0:
        ax.text(0.5, 0.5, result.message or "no configuration fits in memory", ha="center", va="center",
                wrap=True, transform=ax.transAxes)
        handles.append(Line2D([], [], linestyle="none", marker="x", color="grey", label="no configuration fits"))
        ax.legend(handles=handles, loc="upper right")
        return _save(fig, p, fmt)

    gpus = list(dict.fromkeys(result.gpus))
    methods = list(dict.fromkeys(result.methods))
    cmap = __import__("matplotlib").colormaps["tab10"]
    colour = {g: cmap(i % 10) for i, g in enumerate(gpus)}
    marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(methods)}
    d = df
    if len(d) > MAX_POINTS:
        rng = np.random.default_rng(0)
        keep = np.zeros(len(d), dtype=bool)
        keep[rng.choice(len(d), MAX_POINTS, replace=False)] = True
        keep |= d["pareto"].to_numpy() | (np.arange(len(d)) < 2)
        d = d[keep]
    x, y = d[xcol].to_numpy(dtype=float), d["time_h"].to_numpy(dtype=float)
    elig, gcol, mcol = d["eligible"].to_numpy(dtype=bool), d["gpu"].to_numpy(), d["method"].to_numpy()
    for g, m, (ok, alpha) in itertools.product(gpus, methods, ((True, 0.75), (False, 0.2))):
        s = (gcol == g) & (mcol == m) & (elig == ok)
        if s.any():
            ax.scatter(x[s], y[s], s=18, marker=marker[m], color=colour[g], alpha=alpha, linewidths=0)
    front = result.pareto
    if len(front):
        f = front.sort_values(xcol)
        ax.plot(f[xcol].to_numpy(dtype=float), f["time_h"].to_numpy(dtype=float), color="black", lw=1.2,
                drawstyle="steps-post" if cost_ok else "default", zorder=3)
        ax.scatter(f[xcol], f["time_h"], s=34, facecolors="none", edgecolors="black", lw=0.9, zorder=4)
        handles.append(Line2D([], [], color="black", lw=1.2, marker="o", markerfacecolor="none",
                              label=f"Pareto front ({len(front)})"))
    if result.deadline_s is not None:
        ax.axhline(result.deadline_s / 3600.0, color="#d62728", ls="--", lw=1.1)
        handles.append(Line2D([], [], color="#d62728", ls="--", label=f"deadline {result.deadline_s / 3600:g} h"))
    if result.budget_usd is not None and cost_ok:
        ax.axvline(result.budget_usd, color="#9467bd", ls="--", lw=1.1)
        handles.append(Line2D([], [], color="#9467bd", ls="--", label=f"budget ${result.budget_usd:,.0f}"))
    r = result.runner_up
    if r is not None and r.get(xcol) is not None:
        ax.scatter([r[xcol]], [r["time_h"]], s=160, marker="o", facecolors="none", edgecolors="#ff7f0e", lw=2, zorder=5)
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=10, markerfacecolor="none",
                              markeredgecolor="#ff7f0e", markeredgewidth=2, label="runner-up"))
    r = result.recommended
    if r is not None and r.get(xcol) is not None:
        ax.scatter([r[xcol]], [r["time_h"]], s=320, marker="*", color="gold", edgecolors="black", lw=1, zorder=6)
        ax.annotate(f"  {r['gpus']} x {r['gpu']} {r['method']}", (r[xcol], r["time_h"]), fontsize=8,
                    xytext=(8, 8), textcoords="offset points", zorder=6)
        handles.append(Line2D([], [], linestyle="none", marker="*", markersize=15, color="gold",
                              markeredgecolor="black", label=f"recommended ({result.objective})"))
    from matplotlib.ticker import FuncFormatter

    if _use_log(x):
        ax.set_xscale("log")
    if _use_log(y):
        ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"${v:,.4g}" if cost_ok else f"{v:,.4g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.4g}"))
    ax.grid(True, which="major", alpha=0.3)
    gpu_h = [Line2D([], [], linestyle="none", marker="o", color=colour[g], label=g) for g in gpus
             if (df["gpu"] == g).any()]
    meth_h = [Line2D([], [], linestyle="none", marker=marker[m], color="grey", label=m) for m in methods
              if (df["method"] == m).any()]
    faint = [Line2D([], [], linestyle="none", marker="o", color="grey", alpha=0.25,
                    label="fits, misses a constraint")] if (~df["eligible"]).any() else []
    ax.legend(handles=gpu_h + meth_h + faint + handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, title="GPU (colour), method (marker)", title_fontsize=8, borderaxespad=0.0)
    return _save(fig, p, fmt)


# --- estimate -----------------------------------------------------------------------------------

def _stacked(ax, breakdowns: list[dict], scale: float = 1.0) -> np.ndarray:
    """Stacked bars, one per breakdown, of the parts above zero in any of them ("total" left out);
    returns the bars' tops."""
    parts = [k for k in dict.fromkeys(k for b in breakdowns for k in b if k != "total")
             if any(b.get(k, 0.0) > 0 for b in breakdowns)]
    xs, bottom = np.arange(len(breakdowns)), np.zeros(len(breakdowns))
    for i, k in enumerate(parts):
        v = np.array([b.get(k, 0.0) for b in breakdowns]) * scale
        ax.bar(xs, v, bottom=bottom, width=0.6, color=PART_COLOURS[i % len(PART_COLOURS)], label=k.replace("_", " "))
        bottom += v
    return bottom


def _label(r: Any) -> str:
    j = r.job
    return f"{j.gpus} x {r.gpu}\n{j.method}, mb {j.micro_batch}"


def plot_estimate(result: Any, path: str | Path) -> Path:
    """Step-time breakdown and memory breakdown (stacked bars; several estimates side by side when
    given a list), the GPU's memory as a line."""
    from matplotlib.lines import Line2D

    p, fmt = _target(path)
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    fig, (ax_t, ax_m) = _figure(11, 6, ncols=2)
    labels = [_label(r) for r in results]
    xs = np.arange(len(results))
    # step time
    totals = [r.step_time_s for r in results]
    scale, unit = (1e3, "ms") if max(totals) < 1.0 else (1.0, "s")
    _stacked(ax_t, [r.step_breakdown_s for r in results], scale)
    for x, t in zip(xs, totals, strict=True):
        ax_t.text(x, t * scale, f"{t * scale:.3g} {unit}", ha="center", va="bottom", fontsize=8)
    ax_t.set_xticks(xs, labels, fontsize=8)
    ax_t.set_ylabel(f"time per optimizer step ({unit})")
    ax_t.set_title("Step time by part", fontsize=10)
    ax_t.legend(fontsize=8, loc="upper left", title="part", title_fontsize=8)
    ax_t.margins(y=0.15)
    # memory
    bottom = _stacked(ax_m, [r.memory_breakdown_gib for r in results])
    rest = np.array([r.memory_per_gpu_gib for r in results]) - bottom
    if (rest > 1e-6).any():
        ax_m.bar(xs, np.maximum(rest, 0.0), bottom=bottom, width=0.6, color="#d9d9d9", hatch="//",
                 label="allocator overhead")
    caps = sorted({r.memory_capacity_gib for r in results})
    handles, lbls = ax_m.get_legend_handles_labels()
    for cap in caps:
        ax_m.axhline(cap, color="#d62728", ls="--", lw=1.2)
        handles.append(Line2D([], [], color="#d62728", ls="--"))
        lbls.append(f"GPU memory {cap:g} GiB")
    for x, r in zip(xs, results, strict=True):
        ax_m.text(x, r.memory_per_gpu_gib, f"{r.memory_per_gpu_gib:.1f} GiB" + ("" if r.fits else " (does not fit)"),
                  ha="center", va="bottom", fontsize=8)
    ax_m.set_xticks(xs, labels, fontsize=8)
    ax_m.set_ylabel("memory per GPU (GiB)")
    ax_m.set_title("Memory per GPU by part", fontsize=10)
    ax_m.legend(handles, lbls, fontsize=8, loc="upper left", title="part", title_fontsize=8)
    ax_m.set_ylim(0, max(max(caps), max(r.memory_per_gpu_gib for r in results)) * 1.25)
    r0 = results[0]
    fig.suptitle(f"{r0.model}: step time and memory" + (f" ({r0.job.method}, {r0.job.gpus} x {r0.gpu}, "
                                                         f"seq_len {r0.workload.seq_len})" if len(results) == 1 else ""),
                 fontsize=11)
    return _save(fig, p, fmt)


# --- curve --------------------------------------------------------------------------------------

def plot_curve(result: Any, path: str | Path) -> Path:
    """Throughput (tokens/s) and memory per GPU (GiB) versus micro-batch."""
    from matplotlib.lines import Line2D

    p, fmt = _target(path)
    fig, (ax_t, ax_m) = _figure(11, 5, ncols=2)
    pts = result.points
    mb = pts["micro_batch"].to_numpy(dtype=float)
    fits = pts["fits"].to_numpy(dtype=bool)
    tps = pts["tokens_per_s"].to_numpy(dtype=float)
    mem = pts["memory_per_gpu_gib"].to_numpy(dtype=float)
    largest = result.max_micro_batch
    meas = result.measured if result.measured is not None and len(result.measured) else None
    for ax, y, ylabel, title in ((ax_t, tps, "throughput (tokens/s, all GPUs)", "Throughput versus micro-batch"),
                                 (ax_m, mem, "memory per GPU (GiB)", "Memory versus micro-batch")):
        ax.plot(mb[fits], y[fits], color="#1f77b4", lw=1.8, marker="o", ms=3)
        if (~fits).any():
            start = max(0, int(np.argmax(~fits)) - 1)
            ax.plot(mb[start:], y[start:], color="grey", lw=1.2, ls="--", marker="o", ms=2, alpha=0.7)
        if largest > 0:
            i = largest - 1
            ax.axvline(largest, color="#2ca02c", ls=":", lw=1.2)
            ax.scatter([mb[i]], [y[i]], s=90, marker="D", color="#2ca02c", zorder=5)
        ax.set(xlabel="micro-batch (samples per GPU per micro-step)", ylabel=ylabel)
        ax.set_title(title, fontsize=10)
        if len(mb) > 16:
            from matplotlib.ticker import FuncFormatter

            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.grid(True, alpha=0.3)
    ax_m.axhline(result.memory_capacity_gib, color="#d62728", ls="--", lw=1.2)
    if meas is not None:  # the measured runs over the predictions
        for ax, col in ((ax_t, "tokens_per_s"), (ax_m, "peak_mem_gib")):
            m = meas.dropna(subset=[col])
            if len(m):
                ax.scatter(m["micro_batch"], m[col], marker="x", s=50, color="#ff7f0e", zorder=6)
    common = [Line2D([], [], color="#1f77b4", lw=1.8, marker="o", ms=3, label="predicted, fits")]
    if (~fits).any():
        common.append(Line2D([], [], color="grey", lw=1.2, ls="--", label="predicted, out of memory"))
    if largest > 0:
        common.append(Line2D([], [], color="#2ca02c", ls=":", marker="D", label=f"largest that fits: {largest}"))
    if meas is not None:
        common.append(Line2D([], [], color="#ff7f0e", marker="x", ls="none", ms=8,
                             label=f"measured ({len(meas)} run(s))"))
    ax_t.legend(handles=common, fontsize=8, loc="best")
    ax_m.legend(handles=common + [Line2D([], [], color="#d62728", ls="--",
                                         label=f"GPU memory {result.memory_capacity_gib:g} GiB")],
                fontsize=8, loc="upper left")
    top = max(result.memory_capacity_gib, float(np.nanmax(mem)) if len(mem) else 0.0)
    if meas is not None and meas["peak_mem_gib"].notna().any():
        top = max(top, float(meas["peak_mem_gib"].max()))
    ax_m.set_ylim(0, top * 1.1 if math.isfinite(top) and top > 0 else 1)
    fig.suptitle(f"{result.model} on {result.gpus} x {result.gpu} ({result.method}, seq_len {result.seq_len})",
                 fontsize=11)
    return _save(fig, p, fmt)
