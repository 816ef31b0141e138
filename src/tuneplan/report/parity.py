"""Parity plot of a validation: predicted versus measured, log axes, one colour per source."""

from __future__ import annotations


def parity_plot(report, path: str, estimator: str = "tuneplan") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = report.rows
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, (meas, pred, label) in zip(axes, (("measured_tokens_per_s", "pred_tokens_per_s", "throughput (tokens/s)"),
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
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.set_title(f"{estimator}: {label}, held-out ({report.split})")
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    from tuneplan.errors import atomic_output

    with atomic_output(path, "plot", "plot") as tmp:  # all at once: a crash leaves no half-written image
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
