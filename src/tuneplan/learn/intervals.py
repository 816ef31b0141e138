"""Prediction intervals: split-conformal quantiles of held-out log-ratios (measured / predicted),
stored per estimator in a calibration file. An estimate carries low/high bounds at the nominal
coverage (`--interval 0.8` by default)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def conformal_bounds(log_ratios: Iterable[float], coverage: float) -> tuple[float, float]:
    """Split-conformal (low, high) multipliers for a new prediction from held-out log-ratios
    log(measured / predicted): the finite-sample-corrected (1-a)/2 and (1+a)/2 quantiles (numpy's
    "lower" and "higher" quantiles: the sorted values at floor / ceil of q (n - 1))."""
    r = sorted(v for v in map(float, log_ratios) if math.isfinite(v))
    n = len(r)
    if n == 0:
        raise ValueError("no residuals")
    alpha = 1.0 - coverage
    lo_q = max(0.0, math.floor((alpha / 2.0) * (n + 1)) / n - 1.0 / n)
    hi_q = min(1.0, math.ceil((1.0 - alpha / 2.0) * (n + 1)) / n)
    lo = r[math.floor((n - 1) * lo_q)]
    hi = r[math.ceil((n - 1) * min(hi_q, 1.0))]
    return math.exp(lo), math.exp(hi)


MIN_POOL = 10
"""Residuals a pool needs before an interval is read from it."""


def residual_pool(res: dict, framework: str | None) -> tuple[list[float], str]:
    """The held-out log-ratios an interval is read from, and what they are: the rows of frameworks the
    calibration's other sources ran when the estimate's framework is one of them, else the rows of
    frameworks no other source ran (a framework it never saw, or none said: wider), else all."""
    known = set(res.get("frameworks") or ())
    framework = framework.partition("@")[0] if framework else framework  # a version is the same profile
    seen, unseen = res.get("throughput_framework_seen") or [], res.get("throughput_framework_unseen") or []
    if framework in known and len(seen) >= MIN_POOL:
        return seen, f"held-out rows of frameworks seen in other sources ({framework} is one)"
    if known and framework not in known and len(unseen) >= MIN_POOL:
        return unseen, f"held-out rows of frameworks no other source ran ({framework or 'none'} is not among {len(known)})"
    return res["throughput"], "held-out rows"


def attach_interval(result, estimator: str, coverage: float, calibration=None) -> None:
    """Attach wall-clock / throughput bounds to an EstimateResult from the calibration's stored
    residual quantiles for this estimator; without stored residuals, leave no interval and say so."""
    from tuneplan.estimators.calibration import interval_residuals

    if not 0.0 < coverage < 1.0:
        from tuneplan.errors import InputError

        raise InputError("interval", f"coverage must be between 0 and 1, got {coverage}")
    res = interval_residuals(estimator, calibration)
    if res is None or len(res.get("throughput", [])) < 5:
        result.assumptions.append("No interval: no held-out residuals stored for this estimator.")
        return
    job = getattr(result, "job", None)
    pool, what = residual_pool(res, getattr(job, "framework", None))
    lo_t, hi_t = conformal_bounds(pool, coverage)
    # throughput measured/predicted in [lo, hi] -> time in [1/hi, 1/lo]
    t = result.totals
    train_lo, train_hi = t.train_s / hi_t, t.train_s / lo_t
    fixed = t.wall_clock_s - t.train_s
    interval = {
        "coverage": coverage,
        "wall_clock_s_low": fixed + train_lo,
        "wall_clock_s_high": fixed + train_hi,
        "tokens_per_s_low": result.tokens_per_s * lo_t,
        "tokens_per_s_high": result.tokens_per_s * hi_t,
        "source": f"{res.get('source', '')} ({what})",
        "n_residuals": len(pool),
    }
    if t.cost_usd is not None:
        interval["cost_usd_low"] = t.cost_usd * interval["wall_clock_s_low"] / t.wall_clock_s
        interval["cost_usd_high"] = t.cost_usd * interval["wall_clock_s_high"] / t.wall_clock_s
    mem = res.get("memory")
    if mem is not None and len(mem) >= 5:
        lo_m, hi_m = conformal_bounds(mem, coverage)
        interval["memory_per_gpu_gib_low"] = result.memory_per_gpu_gib * lo_m
        interval["memory_per_gpu_gib_high"] = result.memory_per_gpu_gib * hi_m
    result.interval = interval


def add_interval_columns(df, estimator: str, coverage: float, calibration=None) -> None:
    """pred_tokens_per_s_low/high and pred_peak_mem_gib_low/high on a predicted frame."""
    from tuneplan.estimators.calibration import interval_residuals

    res = interval_residuals(estimator, calibration)
    if res is None or len(res.get("throughput", [])) < 5:
        return
    lo, hi = conformal_bounds(res["throughput"], coverage)
    df["pred_tokens_per_s_low"] = df["pred_tokens_per_s"] * lo
    df["pred_tokens_per_s_high"] = df["pred_tokens_per_s"] * hi
    mem = res.get("memory")
    if mem is not None and len(mem) >= 5:
        lo_m, hi_m = conformal_bounds(mem, coverage)
        df["pred_peak_mem_gib_low"] = df["pred_peak_mem_gib"] * lo_m
        df["pred_peak_mem_gib_high"] = df["pred_peak_mem_gib"] * hi_m
