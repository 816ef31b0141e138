"""`plan(..., stage=...)` for preference and RL stages: GPU type x count x method x micro-batch x
sharding, and for the RL stages every placement: the split of the GPUs between rollout generation and
training (HF generate in the training process, vLLM colocated awake or sleeping, or vLLM on 1..n-1 of
the GPUs) and the engine's tensor parallel size. Each candidate
is the stage estimate of `tuneplan.estimators.stages` (the same figures `tuneplan estimate --stage`
gives, without the interval); the grid is smaller than the SFT planner's, candidate by candidate."""

from __future__ import annotations

import itertools
import math
import time as _time
from typing import Any

import numpy as np

from tuneplan.errors import InputError, TuneplanError
from tuneplan.plan.pareto import pareto_mask
from tuneplan.specs.job import RL_STAGES, make_job

STAGE_MICRO_BATCHES = (1, 2, 4, 8)
"""Micro-batches a stage plan tries (samples: pairs, or completions for RL)."""
STAGE_GLOBAL_BATCH = 32
"""Samples per optimizer step of a preference-stage plan (pairs); RL: completions per step when no
--prompts-per-step is given (TRL's default per-device batch of 8 x 4 GPUs)."""


def rollout_options(stage: str, gpus: int, nodes: int = 1) -> list[tuple[str, int]]:
    """(engine, rollout GPUs) splits of `gpus`: HF generate and colocated vLLM on all of them, and
    vLLM servers on r = 1..gpus-1 with the rest (divisible by the nodes) training."""
    if stage not in RL_STAGES:
        return [("hf", 0)]
    return [("hf", 0), ("vllm", 0)] + [("vllm", r) for r in range(1, gpus) if (gpus - r) % nodes == 0]


ENGINE_TPS = (1, 2, 4, 8)
"""Tensor parallel sizes of a vLLM engine a plan tries (within one 8-GPU node)."""


def engine_layouts(engine: str, gpus: int, rollout_gpus: int) -> list[tuple[int | None, bool]]:
    """(engine tensor parallel, sleeps while training) of each engine layout a plan tries on a split: HF
    generate has none; vLLM every tp of ENGINE_TPS dividing its GPUs, colocated awake (TRL) or sleeping
    (verl, NeMo RL)."""
    if engine != "vllm":
        return [(None, False)]
    pool = rollout_gpus or gpus
    sleeps = (False,) if rollout_gpus else (False, True)
    return [(t, z) for t in ENGINE_TPS if pool % t == 0 for z in sleeps]


def placement(row) -> str:
    """A candidate's placement class: HF generate, vLLM colocated, or vLLM on GPUs of its own."""
    return "separate" if int(row.get("rollout_gpus") or 0) else "colocated" if row.get(
        "rollout_engine") == "vllm" else "hf"


def placement_why(df, rec: dict) -> str:
    """Why the recommended placement wins: its step split into generation and the rest, against the
    best eligible candidate of each other placement."""
    out = []
    for other in ("hf", "colocated", "separate"):
        mask = df["eligible"] & (df.apply(placement, axis=1) == other)
        if other == placement(rec) or not mask.any():
            continue
        o = df[mask].iloc[0]
        out.append(f"the best {other} candidate, {o['time_h']:.2f} h for ${o['cost_usd']:.2f}: step "
                   f"{o['generation_s']:.1f} s generation + {o['step_s'] - o['generation_s']:.1f} s the rest")
    if not out:
        return ""
    return (f" Placement {placement(rec)}: step {rec['generation_s']:.1f} s generation + "
            f"{rec['step_s'] - rec['generation_s']:.1f} s the rest, {rec['time_h']:.2f} h for ${rec['cost_usd']:.2f}; "
            + "; ".join(out) + ".")


def _candidate(est, mspec, g, job, c, rate: float | None) -> dict[str, Any]:
    from tuneplan.estimators.stage_run import TRAIN_GROUPS, first_value
    from tuneplan.estimators.stages import run_stage, stage_run_totals
    from tuneplan.physics.run import workload

    wl = workload(job)
    run = run_stage(est, mspec, g, job, wl.seq_len, wl.samples_per_epoch, search_max_mb=False)
    out = run.out
    step = first_value(out["step_s"])
    tj = run.totals_job
    totals, _ = stage_run_totals(run, wl, rate, c)
    return {"gpu": g.name, "gpus": job.gpus, "nodes": job.nodes, "method": job.method,
            "micro_batch": job.micro_batch, "grad_accum": tj.grad_accum, "global_batch": run.samples_per_step,
            "sharding": job.sharding, "grad_ckpt": job.grad_ckpt, "stage": job.stage,
            "rollout_engine": job.rollout_engine, "rollout_gpus": job.rollout_gpus,
            "rollout_tp": run.extra.get("stage", {}).get("rollout_tp"), "rollout_sleep": job.rollout_sleep,
            "generation_s": sum(first_value(out[k]) for k in TRAIN_GROUPS["generation"] if k in out),
            "time_s": totals.wall_clock_s, "time_h": totals.wall_clock_s / 3600.0,
            "cost_usd": np.nan if totals.cost_usd is None else totals.cost_usd,
            "rate_usd_per_gpu_hour": np.nan if rate is None else rate, "device_hours": totals.device_hours,
            "energy_kwh": totals.energy_kwh, "co2_kg": totals.co2_kg, "step_s": step, "steps": totals.steps,
            "tokens_per_s": first_value(out["tokens_per_step"]) / step,
            "memory_per_gpu_gib": first_value(out["memory_gib"]), "memory_capacity_gib": g.memory_gib,
            "fits": bool(first_value(out["fits"]))}


def _jobs(stage: str, methods, counts, micro_batches, grad_ckpts, fixed: dict, work: dict):
    """Every valid job of the stage grid (invalid combinations are skipped)."""
    for m, n in itertools.product(methods, counts):
        shardings = [fixed["sharding"]] if "sharding" in fixed else (
            ["ddp"] if n == 1 or m != "full" else ["ddp", "zero3"])
        layouts = [(e, k, *lay) for e, k in rollout_options(stage, n) for lay in engine_layouts(e, n, k)]
        for (eng, r, tp, sleep), mb, sh, gc in itertools.product(layouts, micro_batches, shardings, grad_ckpts):
            kw = {**fixed, **work, "method": m, "gpus": n, "micro_batch": mb, "sharding": sh, "grad_ckpt": gc,
                  "rollout_engine": eng, "rollout_gpus": r, **({"rollout_tp": tp} if tp else {}),
                  **({"rollout_sleep": True} if sleep else {})}
            dp = (n - r) // int(kw.get("tp", 1) * kw.get("pp", 1) * kw.get("cp", 1) or 1)
            grad_accum = max(1, math.ceil(STAGE_GLOBAL_BATCH / max(mb * dp, 1)))
            if stage not in RL_STAGES:
                kw.setdefault("grad_accum", grad_accum)
            elif kw.setdefault("prompts_per_step", None) is None:
                kw["grad_accum"] = grad_accum
            try:
                yield make_job(**kw)
            except InputError:
                continue


def plan_stage(mspec, gpu_specs, method_list, counts, est, c, rates: dict[str, float | None], *, stage: str,
               work: dict, fixed: dict, micro_batches, grad_ckpts, deadline_s, budget_usd, objective: str):
    """Candidates (one dict per configuration that could be estimated) and the notes of a stage plan."""
    t0 = _time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped = 0
    for g in gpu_specs:
        for job in _jobs(stage, method_list, counts, micro_batches or STAGE_MICRO_BATCHES, grad_ckpts,
                         fixed, work):
            try:
                rows.append(_candidate(est, mspec, g, job, c, rates.get(g.name)))
            except TuneplanError:
                skipped += 1
    notes = [f"--stage {stage}: {len(rows)} candidates estimated one by one in {_time.perf_counter() - t0:.1f} s"
             + (f" ({skipped} could not be, e.g. a group size that does not divide the batch)" if skipped else "")
             + "; intervals are not attached to stage candidates."]
    if stage in RL_STAGES:
        notes.append("RL: every split of the GPUs between generation and training is a candidate (HF generate, "
                     "vLLM colocated awake or sleeping while training, vLLM engines on 1..n-1 GPUs of their own), "
                     f"each engine at tensor parallel {', '.join(map(str, ENGINE_TPS))} where it divides its GPUs; "
                     "--gpus counts both.")
    else:
        unit = {"gkd": "examples", "online-dpo": "prompts", "xpo": "prompts", "nash-md": "prompts"}.get(stage, "pairs")
        notes.append(f"--stage {stage}: {STAGE_GLOBAL_BATCH} {unit} per optimizer step (grad-accum fills in).")
    return rows, notes


def rank(df, objective: str, deadline_s, budget_usd):
    """Eligibility and order of stage candidates, the same rules as the SFT planner's."""
    wall, cost = df["time_s"].to_numpy(), df["cost_usd"].to_numpy()
    priced = np.isfinite(cost)
    df["meets_deadline"] = True if deadline_s is None else wall <= deadline_s
    df["within_budget"] = True if budget_usd is None else priced & (cost <= budget_usd)
    df["eligible"] = df["fits"] & df["meets_deadline"] & df["within_budget"] & (
        priced if objective in ("cheapest", "balanced") else True)
    keys = {"cheapest": ["cost_usd", "time_s"], "fastest": ["time_s", "cost_usd"],
            "energy": ["energy_kwh", "cost_usd"], "balanced": ["_tc", "time_s"]}[objective]
    df["_tc"] = wall * np.where(priced, cost, np.inf)
    df["_not"] = ~df["eligible"]
    df = df[df["fits"]].sort_values(["_not"] + keys, kind="stable").drop(columns=["_tc", "_not"])
    df = df.reset_index(drop=True)
    df["pareto"] = pareto_mask(df["time_s"].to_numpy(), df["cost_usd"].fillna(np.inf).to_numpy()) if len(df) \
        else np.zeros(0, bool)
    return df


def stage_table(mspec, gpu_specs, method_list, counts, calibration, rate_tab, *, stage, work, fixed, micro_batches,
                grad_ckpts, deadline_s, budget_usd, objective):
    """A stage plan's candidates, ranked (`plan_stage`, `rank`), how many were estimated, its space and its notes."""
    import pandas as pd

    from tuneplan.estimators.base import get_estimator

    est = get_estimator("tuneplan", calibration)
    rates = {g.name: (None if math.isnan(r) else float(r)) for g, r in zip(gpu_specs, rate_tab, strict=True)}
    rows, notes = plan_stage(mspec, gpu_specs, method_list, counts, est, est.constants, rates, stage=stage,
                             work=work, fixed=fixed, micro_batches=micro_batches, grad_ckpts=grad_ckpts,
                             deadline_s=deadline_s, budget_usd=budget_usd, objective=objective)
    df = rank(pd.DataFrame(rows), objective, deadline_s, budget_usd) if rows else pd.DataFrame(rows)
    space = {"gpu_counts": list(counts), "micro_batches": list(micro_batches or STAGE_MICRO_BATCHES),
             "shardings": [fixed["sharding"]] if "sharding" in fixed else ["ddp", "zero3"],
             "grad_ckpt": list(grad_ckpts), "global_batch": STAGE_GLOBAL_BATCH, "grad_accums": None,
             "gpus_per_node": 8, "stage": stage}
    return df, len(rows), space, notes
