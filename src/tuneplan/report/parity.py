"""Parity plot of a validation: predicted versus measured, log axes, one colour per source; beside it
the fit probability's reliability curve."""

from __future__ import annotations


def parity_plot(report, path: str, estimator: str = "tuneplan") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = report.rows
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    _reliability_panel(axes[2], report.reliability)
    for ax, (meas, pred, label) in zip(axes[:2], (("measured_tokens_per_s", "pred_tokens_per_s", "throughput (tokens/s)"),
                                              ("measured_mem_gib", "pred_mem_gib", "peak memory per GPU (GiB)")),
                                       strict=True):
        d = rows[(rows["estimator"] == estimator)].dropna(subset=[meas, pred])
        for src, g in d.groupby("source"):
            ax.scatter(g[meas], g[pred], s=14, alpha=0.75, label=f"{src} ({len(g)})")
        if len(d):
            lo = float(min(d[meas].min(), d[pred].min())) * 0.8
            hi = float(max(d[meas].max(), d[pred].max())) * 1.25
            xs = np.array([lo, hi])
            ax.plot(xs, xs, "k-", lw=1, label="parity")
            ax.fill_between(xs, xs / 1.25, xs * 1.25, color="grey", alpha=0.15, label="±25%")
            ax.set(xscale="log", yscale="log")
        ax.set(xlabel=f"measured {label}", ylabel=f"predicted {label}",
               title=f"{estimator}: {label}, held-out ({report.split})")
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    from tuneplan.errors import atomic_output

    with atomic_output(path, "plot", "plot") as tmp:  # all at once: a crash leaves no half-written image
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def _reliability_panel(ax, table: list[dict]) -> None:
    """The fit probability's reliability curve: the share of held-out rows that ran against the mean
    probability given, per bin (a calibrated probability lies on the diagonal; marker area ~ rows)."""
    ax.plot([0, 1], [0, 1], "k-", lw=1, label="calibrated")
    if table:
        ax.plot([b["probability"] for b in table], [b["ran"] for b in table], "o-", label="held-out rows")
        ax.scatter([b["probability"] for b in table], [b["ran"] for b in table],
                   s=[10 + 2 * b["rows"] for b in table], alpha=0.4)
    else:
        ax.text(0.5, 0.5, "no fit probability\n(no memory width model)", ha="center", va="center")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="fit probability given", ylabel="share of rows that ran (did not OOM)",
           title="fit probability: reliability")
    ax.legend(fontsize=7, loc="upper left")
