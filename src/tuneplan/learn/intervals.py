"""Prediction intervals: split-conformal quantiles of held-out log-ratios (measured / predicted),
stored per estimator in a calibration file. An estimate carries low/high bounds at the nominal
coverage (`--interval 0.8` by default)."""

from __future__ import annotations

import math
import re
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


def attach_interval(result, estimator: str, coverage: float, calibration=None, model=None, gpu=None) -> None:
    """Attach wall-clock / throughput / memory bounds to an EstimateResult from the calibration's stored
    held-out residuals for this estimator: with a fitted width model (and the model and GPU specs), as
    wide as what the estimate assumed (`interval_flags`), with a fit probability and the three largest
    contributions said; else one conformal pool. Without stored residuals, no interval, said so."""
    from tuneplan.estimators.calibration import interval_residuals

    if not 0.0 < coverage < 1.0:
        from tuneplan.errors import InputError

        raise InputError("interval", f"coverage must be between 0 and 1, got {coverage}")
    res = interval_residuals(estimator, calibration)
    if res is None or len(res.get("throughput", [])) < 5:
        result.assumptions.append("No interval: no held-out residuals stored for this estimator.")
        return
    job = result.job
    width = res.get("width") if model is not None and gpu is not None else None
    why: list[tuple[str, float]] = []
    flags = interval_flags(filled_in(job), coverage_keys(job, model, gpu, result.workload.seq_len), job.framework,
                           comm_share(result.step_breakdown_s), width.get("covered")) if width else {}
    if width and "throughput" in width:
        lo_t, hi_t, why = width_bounds(width["throughput"], flags, coverage)
        what, n = "width from what the estimate assumed", len(width["throughput"]["z"])
    else:
        pool, what = residual_pool(res, getattr(job, "framework", None))
        (lo_t, hi_t), n = conformal_bounds(pool, coverage), len(pool)
    # an RL mean completion length not given: its range's ratios multiply the bounds (rl_stages.mean_spread)
    spread = (result.extra.get("stage") or {}).pop("completion_len_spread", None) or {}
    (s_lo, s_hi), (q_lo, q_hi), m_s = (spread.get(k, (1.0, 1.0)) for k in ("step_s", "tokens_per_s", "memory_gib"))
    # throughput measured/predicted in [lo, hi] -> time in [1/hi, 1/lo]
    t = result.totals
    train_lo, train_hi = t.train_s / hi_t * s_lo, t.train_s / lo_t * s_hi
    fixed = t.wall_clock_s - t.train_s
    interval = {
        "coverage": coverage,
        "wall_clock_s_low": fixed + train_lo,
        "wall_clock_s_high": fixed + train_hi,
        "step_time_s_low": result.step_time_s / hi_t * s_lo,
        "step_time_s_high": result.step_time_s / lo_t * s_hi,
        "tokens_per_s_low": result.tokens_per_s * lo_t * q_lo,
        "tokens_per_s_high": result.tokens_per_s * hi_t * q_hi,
        "source": f"{res.get('source', '')} ({what})",
        "n_residuals": n,
    }
    if t.cost_usd is not None:
        interval["cost_usd_low"] = t.cost_usd * interval["wall_clock_s_low"] / t.wall_clock_s
        interval["cost_usd_high"] = t.cost_usd * interval["wall_clock_s_high"] / t.wall_clock_s
    mem = res.get("memory")
    if width and "memory" in width:
        mflags = {k: v for k, v in flags.items() if k not in THROUGHPUT_ONLY}
        lo_m, hi_m, why_m = width_bounds(width["memory"], mflags, coverage)
        why = sorted(why + [(f"{label} (memory)", x) for label, x in why_m], key=lambda w: -w[1])
        peak = result.extra.get("memory_fit_gib", result.memory_per_gpu_gib)  # the peak the verdict reads
        interval["fit_probability"] = fit_probability(width["memory"], mflags, peak, result.memory_capacity_gib)
    elif mem is not None and len(mem) >= 5:
        lo_m, hi_m = conformal_bounds(mem, coverage)
    else:
        lo_m, hi_m, m_s = None, None, (1.0, 1.0)
    if lo_m is not None:
        for key in ("memory_per_gpu_gib", "memory_allocated_gib", "memory_reserved_gib"):
            if getattr(result, key, None) is not None:
                interval[f"{key}_low"] = getattr(result, key) * lo_m * m_s[0]
                interval[f"{key}_high"] = getattr(result, key) * hi_m * m_s[1]
    said = [(f"{label} (+-{x:.0%})", x) for label, x in why] + [
        (f"mean completion length not given{tag} (x{lo:.3g}-x{hi:.3g})", max(hi, 1.0 / lo) - 1.0)
        for tag, (lo, hi) in (("", (s_lo, s_hi)), (" (memory)", m_s)) if spread and (lo, hi) != (1.0, 1.0)]
    if said:
        interval["why"] = [text for text, _ in sorted(said, key=lambda w: -w[1])[:WHY_SHOWN]]
    if spread:
        interval["completion_len_spread"] = spread
    result.interval = interval


WHY_SHOWN = 3
"""Contributions to the interval an estimate names, largest first."""


def add_interval_columns(df, estimator: str, coverage: float, calibration, assumed) -> None:
    """pred_tokens_per_s_low/high and pred_peak_mem_gib_low/high on a predicted frame's rows `assumed`:
    (their index, group ids, the groups' configurations, the defaults each row took, and predict's parts:
    comm_share, fit_gib, capacity_gib). With the calibration's width model each row's bounds (and
    pred_fit_probability) are those `attach_interval` gives an estimate of its configuration, computed
    once per distinct set of contributions; a metric without one has one conformal pool for every row."""
    import numpy as np
    import pandas as pd

    from tuneplan.estimators.calibration import interval_residuals

    res = interval_residuals(estimator, calibration)
    if res is None or len(res.get("throughput", [])) < 5:
        return
    idx, group, configs, used, pred = assumed
    width, pool_m = res.get("width") or {}, res.get("memory") if len(res.get("memory") or ()) >= 5 else None
    sets: dict[frozenset, tuple[int, dict]] = {frozenset(): (0, {})}  # each distinct set of contributions
    row_set = np.zeros(len(idx), dtype=np.int64)
    if width:
        said = df.loc[idx, "defaults_used"].astype(str).tolist() if "defaults_used" in df.columns else [""] * len(idx)
        text_id, texts = pd.factorize(np.array([f"{u};{t}" for u, t in zip(used, said, strict=True)], dtype=object))
        comm = np.asarray(pred["comm_share"]) > COMM_BOUND
        combos, inverse = np.unique((np.asarray(group) * len(texts) + text_id) * 2 + comm, return_inverse=True)
        for k, c in enumerate(combos.tolist()):  # the contributions of each distinct group, defaults and comm flag
            cfg = configs[c // 2 // len(texts)]
            flags = interval_flags(filled_in(defaults_used=texts[c // 2 % len(texts)].split(";")),
                                   coverage_keys(cfg.job, cfg.model, cfg.gpu, cfg.seq_len), cfg.job.framework,
                                   float(c % 2), width.get("covered"))
            combos[k] = sets.setdefault(frozenset(flags), (len(sets), flags))[0]
        row_set = combos[inverse.ravel()]
    names = ["pred_tokens_per_s"] + ["pred_peak_mem_gib"] * ("memory" in width or pool_m is not None)
    cols = {f"{c}_{end}": np.full(len(idx), np.nan) for c in names for end in ("low", "high")}
    if "memory" in width:
        cols["pred_fit_probability"] = np.full(len(idx), np.nan)
    for k, flags in sets.values():
        at = row_set == k
        mflags = {f: v for f, v in flags.items() if f not in THROUGHPUT_ONLY}
        for c, metric, f, pool in (("pred_tokens_per_s", "throughput", flags, res["throughput"]),
                                   ("pred_peak_mem_gib", "memory", mflags, pool_m)):
            if c in names:
                bounds = width_bounds(width[metric], f, coverage)[:2] if metric in width else conformal_bounds(
                    pool, coverage)
                cols[f"{c}_low"][at], cols[f"{c}_high"][at] = bounds
        if "memory" in width:
            cols["pred_fit_probability"][at] = fit_probability(width["memory"], mflags, pred["fit_gib"][at],
                                                               pred["capacity_gib"][at])
    for c, v in cols.items():
        df[c] = np.nan
        df.loc[idx, c] = v if c.endswith("probability") else v * df.loc[idx, c.rsplit("_", 1)[0]].to_numpy(float)


# ---- width from what the estimate assumed ------------------------------------------------------

GPU_FAMILIES = (
    ("GB300", r"^GB300"), ("GB200", r"^GB200"), ("B300", r"^B300"), ("B200", r"^B200"),
    ("H200", r"^H200"), ("H100", r"^H(100|800)"), ("H20", r"^H20\b"), ("A100", r"^A(100|800)"),
    ("MI300", r"^MI3[02]\d"), ("MI350", r"^MI35\d"), ("MI250", r"^MI250"), ("Gaudi", r"^Gaudi"), ("TPU", r"^TPU"),
    ("V100", r"^V100"), ("CPU", r"cpu"),
)
"""Coverage groups of GPUs: (family, regular expression on the catalog name); the first match wins.
Parts of a GeForce architecture are "consumer"; other parts are their name's first word (L40S, A10G)."""

SCALE_BUCKETS = ((1, "1"), (8, "2-8"), (64, "9-64"))
"""GPU-count buckets (upper bound, label); above the last: "65+"."""

FILLED = (  # (key, what the output says, the JobSpec fields an estimate gives it by, the runs columns a row does)
    ("framework", "framework not given", ("framework",), ("framework",)),
    ("grad_ckpt", "checkpointing not given", ("grad_ckpt",), ("grad_ckpt",)),
    ("packing", "packing / padding not given", ("packing", "padding"), ("padding",)),
    ("precision", "precision recipe not given", ("precision", "master_weights"), ("precision",)),
    ("batch", "micro-batch count not given", ("micro_batch", "grad_accum"),
     ("micro_batch_size", "grad_accum", "global_batch_size")),
)
"""Settings tuneplan fills in when they are not said: each one filled widens the interval."""
DISTANT = {"gpu_family": "no training source on {} GPUs", "scale": "no training source at {} GPUs",
           "parallel": "no training source with {} parallelism", "moe": "no training source with {} models",
           "seq": "no training source at {} tokens per sample"}
"""How far a configuration lies from the training sources: its value of each, not run by any of them."""
MATMUL_ASSUMED = "GPU's matmul efficiency not measured (0.80 assumed)"
"""A GPU without a measured `matmul_efficiency` in the catalog runs at the reference one: its GEMMs'
speed is assumed, not known (throughput only)."""
THROUGHPUT_ONLY = ("comm", "matmul")
"""Contributions that widen the throughput interval alone (not memory's)."""
COMM_BOUND = 0.25
"""Share of the step in communication above which a step counts as communication-bound (less certain
than a GEMM-bound one: the interconnect's achieved bandwidth varies more than the GEMMs' efficiency)."""
SEQ_BUCKETS = ((2048, "<=2k"), (8192, "2k-8k"), (32768, "8k-32k"))
"""Sequence-length buckets (upper bound in tokens, label); above the last: ">32k"."""


def gpu_family(gpu) -> str:
    """The coverage group of a GPU spec (GPU_FAMILIES)."""
    name = str(gpu.name)
    for fam, pat in GPU_FAMILIES:
        if re.search(pat, name, re.IGNORECASE):
            return fam
    if "geforce" in str(getattr(gpu, "architecture", "")).lower():
        return "consumer"
    return re.split(r"[-\s]", name, maxsplit=1)[0] or name


def scale_bucket(gpus: int) -> str:
    for top, label in SCALE_BUCKETS:
        if gpus <= top:
            return label
    return f"{SCALE_BUCKETS[-1][0] + 1}+"


def coverage_keys(job, model, gpu, seq_len: int) -> dict[str, str]:
    """Where a configuration lies, in the terms of DISTANT, and whether its GPU's matmul efficiency was
    measured ("matmul": the catalog's `matmul_efficiency`, else the physics assumes the reference one)."""
    mix = "+".join(n for n, d in (("tensor", job.tp), ("pipeline", job.pp), ("context", job.cp), ("expert", job.ep))
                   if d > 1) or "data-only"
    seq = next((label for top, label in SEQ_BUCKETS if seq_len <= top), f">{SEQ_BUCKETS[-1][1].split('-')[-1]}")
    return {"gpu_family": gpu_family(gpu), "scale": scale_bucket(int(job.gpus)), "parallel": mix,
            "moe": "MoE" if model.is_moe else "dense", "seq": seq,
            "matmul": "measured" if getattr(gpu, "matmul_efficiency", 0.0) else "assumed"}


def filled_in(job=None, defaults_used=()) -> set[str]:
    """FILLED keys not said: by an estimate's job (no field of the key given), or by a measured row's
    defaults_used texts ('grad_ckpt=0 (...)'; a value derived from the row's own figures, like a global batch
    from its micro-batch and accumulation, is not filled in)."""
    if job is not None:
        said = set(getattr(job, "stated", job.given))  # make_job's jobs: what the caller said
        return {k for k, _, fields, _ in FILLED if not set(fields) & said}
    cols = {str(t).split("=", 1)[0].strip() for t in defaults_used if "(derived" not in str(t)}
    return {k for k, _, _, columns in FILLED if set(columns) & cols}


def comm_share(parts, suffix: str = ""):
    """Share of the step in communication (data-parallel and model-parallel): from an estimate's step
    parts in seconds (keys "communication", "tensor_parallel", "total"), or with suffix "_s" from the
    physics' outputs (arrays; "step_s" the total)."""
    total = parts["step_s"] if suffix else parts.get("total", 0.0)
    comm = parts.get("communication" + suffix, 0.0) + parts.get("tensor_parallel" + suffix, 0.0)
    return comm / total if suffix or total else 0.0


def interval_flags(filled: set[str], keys: dict[str, str], framework: str, comm: float, covered: dict | None
                   ) -> dict[str, str]:
    """The contributions to a configuration's interval, key -> what it says: settings filled in, the
    framework and each of `keys` run by no training source (`covered`: the values they ran), a GPU
    whose matmul efficiency was assumed, and a communication-bound step."""
    out = {k: label for k, label, _, _ in FILLED if k in filled}
    keys = dict(keys)
    if keys.pop("matmul", None) == "assumed":
        out["matmul"] = MATMUL_ASSUMED
    if not covered:
        return out
    fw = str(framework).partition("@")[0]
    if "framework" not in out and fw not in covered.get("framework", ()):
        out["framework"] = f"framework {fw} run by no training source"
    out.update({g: DISTANT[g].format(v) for g, v in keys.items() if v not in covered.get(g, ())})
    if comm > COMM_BOUND:
        out["comm"] = f"communication-bound step ({comm:.0%} of it)"
    return out


def covered_values(configs) -> dict[str, list[str]]:
    """What training rows ran, for interval_flags: their frameworks and coverage_keys' values."""
    out: dict[str, set[str]] = {"framework": set()}
    for c in configs:
        out["framework"].add(c.job.framework.partition("@")[0])
        for g, v in coverage_keys(c.job, c.model, c.gpu, c.seq_len).items():
            out.setdefault(g, set()).add(v)
    return {g: sorted(v) for g, v in out.items()}


def _contribution(model: dict, key: str) -> float:
    """A width model's log-width contribution of one key: fitted, else its "unfitted" one (fit_width)."""
    return model.get("contributions", {}).get(key, model.get("unfitted", 0.0))


def _width(model: dict, flags) -> float:
    """A width model's log-width for a configuration with these contributions (in quadrature)."""
    return math.sqrt(model["base"] ** 2 + sum(_contribution(model, k) ** 2 for k in flags))


def width_bounds(model: dict, flags: dict[str, str], coverage: float) -> tuple[float, float, list[tuple[str, float]]]:
    """(low, high) multipliers of a fitted width model for a configuration with these contributions,
    and the contributions present, largest first, each as the +- share it adds to the interval alone."""
    width = _width(model, flags)
    z_lo, z_hi = (math.log(b) for b in conformal_bounds(model["z"], coverage))
    half = (z_hi - z_lo) / 2.0
    c = {k: _contribution(model, k) for k in flags}
    why = sorted(((flags[k], math.exp(c[k] * half) - 1.0) for k in flags if c[k] > 0), key=lambda t: -t[1])
    return math.exp(model["centre"] + width * z_lo), math.exp(model["centre"] + width * z_hi), why


def fit_probability(model: dict, flags, peak_gib, capacity_gib):
    """Probability that the measured peak stays within capacity: the share of the memory width model's
    standardised residuals under log(capacity / predicted) at this configuration's width (arrays of
    peaks and capacities give an array; a missing one: NaN)."""
    import numpy as np

    peak, cap = np.asarray(peak_gib, dtype=float), np.asarray(capacity_gib, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (np.log(cap / peak) - model["centre"]) / _width(model, flags)
    p = np.searchsorted(np.sort(model["z"]), t, side="right") / len(model["z"])
    p = np.where((peak > 0) & (cap > 0), p, (peak <= cap).astype(float))
    p = np.where(np.isnan(peak + cap), np.nan, p)
    return p if p.ndim else float(p)
