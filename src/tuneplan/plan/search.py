"""`plan_run(...)` (`tuneplan.plan_run`): search the configurations a user could choose (GPU type x count x
nodes x method x micro-batch x gradient accumulation x sharding x checkpointing), keep those that fit in
memory, cost each run, draw the Pareto front of cost versus time, and recommend one under the constraints.

The whole grid goes through the estimator in one vectorised call (`predict_arrays`) and the run totals are
`tuneplan.physics.run.run_totals`, the function `tuneplan.estimate(...)` applies to its one row, so a
candidate's figures equal the estimate of the same configuration.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tuneplan.errors import InputError
from tuneplan.physics.run import Workload, run_totals, seq_len_warning, workload
from tuneplan.plan.objectives import COST_OBJECTIVES, OBJECTIVES
from tuneplan.plan.pareto import pareto_mask
from tuneplan.plan.space import (
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_MICRO_BATCHES,
    DEFAULT_SHARDINGS,
    GPUS_PER_NODE,
    Space,
    build_arrays,
    enumerate_grid,
    gpu_counts,
)
from tuneplan.plan.units import hours, money
from tuneplan.specs.gpu import GPUSpec, gpu_assumptions, has_known_power
from tuneplan.specs.job import METHODS, RL_STAGES, JobSpec, make_job, plan_axes

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_METHODS = ("full", "lora", "qlora")
DEFAULT_MAX_GPUS = 8
_EXCLUDED_DEFAULT_GPUS = ("TPU", "Gaudi")
"""Price-file accelerators left out of the default GPU list (the physics models CUDA/ROCm GPUs)."""


@dataclass
class PlanResult:
    """The answer of `plan_run(...)`. `candidates`: one row per configuration that fits in memory, best
    first for the objective (those meeting the constraints before the others); `pareto`: its
    cost-time front, fastest first; `recommended`/`runner_up`: rows as dicts (None when nothing meets
    the constraints, then `message` says which constraint rules everything out and `closest` is the
    nearest configuration)."""

    model: str
    objective: str
    deadline_s: float | None
    budget_usd: float | None
    candidates: pd.DataFrame
    pareto: pd.DataFrame
    recommended: dict[str, Any] | None
    runner_up: dict[str, Any] | None
    why: str
    infeasible: list[dict[str, Any]]
    message: str
    closest: dict[str, Any] | None
    workload: Workload
    gpus: list[str]
    methods: list[str]
    prices: dict[str, dict[str, Any]]
    interval: dict[str, Any] | None
    n_evaluated: int
    seconds: float
    space: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.recommended is not None

    @property
    def status(self) -> str:
        """planned; nothing-fits (no configuration fits in memory); nothing-meets-constraints (some fit,
        none within the deadline / budget). All three are answers: `message` says why."""
        if self.ok:
            return "planned"
        return "nothing-fits" if self.n_fit == 0 else "nothing-meets-constraints"

    @property
    def n_fit(self) -> int:
        return len(self.candidates)

    @property
    def n_eligible(self) -> int:
        return int(self.candidates["eligible"].sum()) if len(self.candidates) else 0

    def to_dict(self, max_candidates: int | None = None) -> dict[str, Any]:
        cands = self.candidates if max_candidates is None else self.candidates.head(max_candidates)
        constraints = {"deadline_s": self.deadline_s,
                       "deadline_h": None if self.deadline_s is None else self.deadline_s / 3600.0,
                       "budget_usd": self.budget_usd, "max_gpus": max(self.space["gpu_counts"])}
        return {"model": self.model, "objective": self.objective, "constraints": constraints,
                **{k: getattr(self, k) for k in ("ok", "status", "recommended", "runner_up", "why", "message",
                                                 "closest", "infeasible")},
                "pareto": records(self.pareto), "candidates": records(cands),
                **{k: getattr(self, k) for k in ("n_evaluated", "n_fit", "n_eligible", "gpus", "methods", "prices",
                                                 "interval")},
                "workload": self.workload.to_dict(), "space": self.space, "seconds": self.seconds, "notes": self.notes}


def _py(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame rows as JSON-ready dicts (NaN -> None, numpy scalars -> Python)."""
    return [{k: _py(v) for k, v in r.items()} for r in df.to_dict("records")]


SHARDING_WORDS = {"none": "no sharding", "ddp": "DDP", "fsdp": "FSDP", "fsdp-hybrid": "hybrid FSDP",
                  "fsdp-grad-op": "FSDP grad-op", "fsdp-offload": "FSDP with CPU offload", "zero1": "ZeRO-1",
                  "zero2": "ZeRO-2", "zero3": "ZeRO-3", "zero3-offload": "ZeRO-3 with CPU offload"}
"""A sharding code as words in a sentence ("none" is no word to read there)."""


def describe(row: dict[str, Any] | Any, short: bool = False) -> str:
    """'4 x H100-SXM5-80GB lora (micro-batch 8 x grad-accum 1, ddp, no checkpointing)'."""
    head = f"{int(row['gpus'])} x {row['gpu']} {row['method']}"
    if short:
        return head
    nodes = int(row["nodes"])
    parts = [f"micro-batch {int(row['micro_batch'])} x grad-accum {int(row['grad_accum'])}",
             SHARDING_WORDS.get(str(row["sharding"]), str(row["sharding"])),
             "checkpointing" if bool(row["grad_ckpt"]) else "no checkpointing"]
    if nodes > 1:
        parts.insert(0, f"{nodes} nodes")
    if row.get("stage") in ("grpo", "ppo", "rloo"):  # plan/stages.py: the rollout split
        eng, rg = row.get("rollout_engine"), int(row.get("rollout_gpus") or 0)
        tp = f"tp {int(row['rollout_tp'])}" if row.get("rollout_tp") else ""
        parts.append(f"rollouts: vLLM on {rg} of the GPUs ({tp})" if rg else
                     f"rollouts: vLLM colocated ({tp}{', sleeping' if row.get('rollout_sleep') else ''})"
                     if eng == "vllm" else "rollouts: HF generate")
    return f"{head} ({', '.join(parts)})"


def default_gpus(prices: str | None = None) -> list[str]:
    """The catalog GPUs the price file has a price for (TPUs and Gaudis left out)."""
    from tuneplan.specs.gpu import gpu_catalog
    from tuneplan.specs.prices import load_prices

    cat = gpu_catalog()
    names = {p.gpu for p in load_prices(prices)}
    return sorted(n for n in names if n in cat and not n.startswith(_EXCLUDED_DEFAULT_GPUS))


def _as_list(v: Any) -> list:
    if v is None:
        return []
    if isinstance(v, str):
        return [x.strip() for x in v.split(",") if x.strip()]
    if isinstance(v, GPUSpec):
        return [v]
    return list(v)


def _resolve_gpus(gpus: Any, prices: str | None, strict: bool = False) -> list[GPUSpec]:
    from tuneplan.specs.resolve import resolve_gpu_arg

    names = _as_list(gpus) or default_gpus(prices)
    out: dict[str, GPUSpec] = {}
    for g in names:
        spec = resolve_gpu_arg(g, strict=strict)
        out.setdefault(spec.name, spec)
    if not out:
        raise InputError("gpus", "give at least one GPU type")
    return list(out.values())


def gpus_with_power(gpu_specs: list[GPUSpec], objective: str, notes: list[str]) -> list[GPUSpec]:
    """The GPUs the energy objective can rank: those whose power (TDP) a source gives. The others are left
    out and named in `notes`; when none is left, an InputError."""
    if objective != "energy":
        return gpu_specs
    known = [g for g in gpu_specs if has_known_power(g)]
    unknown = [g.name for g in gpu_specs if not has_known_power(g)]
    if not known:
        raise InputError("objective", f"energy: no source gives the power (TDP) of {', '.join(unknown)}, so "
                         "their energy is unknown; choose another --objective or give a --gpu-file with tdp_w")
    if unknown:
        notes.append(f"Energy objective: {', '.join(unknown)} left out: no source gives their power (TDP), so "
                     "their energy is unknown.")
    return known


def _resolve_methods(methods: Any) -> list[str]:
    out = list(dict.fromkeys(_as_list(methods) or list(DEFAULT_METHODS)))
    for m in out:
        if m not in METHODS:
            raise InputError("methods", f"unknown method '{m}'", METHODS)
    return out


def plan_run(model: Any, gpus: Sequence[str | GPUSpec] | str | None = None,
         methods: Sequence[str] | str | None = None, max_gpus: int = DEFAULT_MAX_GPUS, *,
         examples: float | None = None, tokens_per_example: float | None = None, epochs: float | None = None,
         deadline_s: float | None = None, budget_usd: float | None = None, objective: str = "cheapest",
         provider: str | None = None, prices: str | None = None, rate: float | None = None,
         calibration: Any = None, micro_batches: Sequence[int] | None = None,
         shardings: Sequence[str] | None = None, grad_ckpt: Sequence[bool] = (False, True),
         grad_accums: Sequence[int] | None = None, global_batch: int | None = None,
         gpu_counts_: Sequence[int] | None = None, gpus_per_node: int = GPUS_PER_NODE,
         grid_gco2_kwh: float | None = None, interval: float | None = 0.8, strict: bool = False,
         **fixed_job_fields: Any) -> PlanResult:
    """Search GPU type x count x method x micro-batch x grad-accum x sharding x checkpointing.

    `gpus`: GPU types (catalog names or GPUSpecs; default: every GPU the price file prices);
    `methods` (default full, lora, qlora); counts are powers of two up to `max_gpus` (8 per node),
    or `gpu_counts_`; `global_batch` is the samples per optimizer step kept by choosing the gradient
    accumulation (default 32), or `grad_accums` lists them explicitly. Other keyword arguments are
    JobSpec fields fixed for every candidate (lora_rank, precision, optimizer, seq_len, packing...);
    giving a grid field (micro_batch, grad_accum, sharding, grad_ckpt, method) pins that axis.
    Raises InputError for bad input; a question with no answer returns a result with `ok` False and
    a `message`. `strict`: refuse GPU family names (A100-80GB) instead of reading them as the catalog's
    default variant (said in `notes`). With the energy objective, GPUs whose power no source gives are left
    out (said in `notes`).
    """
    import pandas  # noqa: F401 - before the clock: the import is not the search

    t0 = _time.perf_counter()
    from tuneplan.specs.resolve import resolve_model_arg

    _check_question(objective, interval, deadline_s, budget_usd)

    (methods, micro_batches, grad_accums, shardings, grad_ckpt, rate, grid_gco2_kwh,
     fixed) = _pin_axes(fixed_job_fields, methods, micro_batches, grad_accums, shardings, grad_ckpt, rate,
                        grid_gco2_kwh)
    mspec = resolve_model_arg(model)
    gpu_specs = _resolve_gpus(gpus, prices, strict)
    method_list = _resolve_methods(methods)
    if provider and rate is None:
        from tuneplan.specs.prices import check_provider

        provider = check_provider(provider, prices)

    jobs, model_par, multiple = _base_jobs(method_list, fixed, examples, tokens_per_example, epochs)
    base = jobs[0]
    wl = workload(base)
    notes: list[str] = []
    gpu_specs = gpus_with_power(gpu_specs, objective, notes)
    for g in gpu_specs:  # what each GPU's figures assume, once
        notes += [n for n in gpu_assumptions(g, base.precision) if n not in notes]
    notes += seq_len_warning(mspec.max_position_embeddings, mspec.name, wl)
    rate_tab, price_info = _price_table(gpu_specs, rate, provider, prices, notes)
    needs_cost = objective in COST_OBJECTIVES or budget_usd is not None
    if needs_cost and np.isnan(rate_tab).all():
        where = f" from {provider}" if provider else ""
        raise InputError("rate", f"no price{where} for {', '.join(g.name for g in gpu_specs)} in the price "
                         "file: pass --rate ($ per GPU-hour), another --provider, or --prices FILE")

    # the grid
    counts = tuple(sorted(set(int(c) for c in gpu_counts_))) if gpu_counts_ else tuple(
        gpu_counts(int(max_gpus), gpus_per_node))
    if fixed.get("stage", "sft") != "sft":  # preference / RL stages: candidate by candidate (plan/stages.py)
        from tuneplan.plan.stages import stage_table

        df, n_evaluated, space_d, more = stage_table(
            mspec, gpu_specs, method_list, counts, calibration, rate_tab, stage=fixed["stage"],
            work={"examples": examples, "tokens_per_example": tokens_per_example, "epochs": epochs},
            fixed=fixed, micro_batches=micro_batches, grad_ckpts=tuple(bool(c) for c in grad_ckpt),
            deadline_s=deadline_s, budget_usd=budget_usd, objective=objective)
        rec, ru, why, message, closest = _stage_answer(df, fixed["stage"], objective, deadline_s, budget_usd)
        iv, infeasible, notes = None, [], notes + more
    else:
        space = Space(gpu_counts=counts,
                      micro_batches=tuple(int(m) for m in (micro_batches or DEFAULT_MICRO_BATCHES)),
                      shardings=tuple(shardings or DEFAULT_SHARDINGS), grad_ckpt=tuple(bool(c) for c in grad_ckpt),
                      global_batch=None if grad_accums else int(global_batch or DEFAULT_GLOBAL_BATCH),
                      grad_accums=tuple(int(g) for g in grad_accums) if grad_accums else None,
                      gpus_per_node=gpus_per_node)
        grid = enumerate_grid(len(gpu_specs), len(method_list), space, model_par=model_par, gpu_multiple=multiple)
        if len(grid) == 0:
            raise InputError("global-batch", f"no micro-batch x GPU count reaches a global batch near "
                             f"{space.global_batch}: widen --micro-batches or change --global-batch")
        ev = _evaluate(mspec, gpu_specs, method_list, jobs, grid, wl, calibration, rate_tab, grid_gco2_kwh)
        iv, t_lo, t_hi = _interval_bounds(interval, calibration, ev, notes, base, mspec, gpu_specs, wl.seq_len)
        _rank(ev, objective, deadline_s, budget_usd)  # the table of configurations that fit, best first
        df = _table(ev, t_lo, t_hi)
        rec, ru, why, message, closest = _recommend(df, ev, objective, deadline_s, budget_usd)
        infeasible = _infeasible(ev, deadline_s, budget_usd, objective, space, provider)
        notes += _space_notes(space, objective) + _cached_shapes_note(base, ev)
        # the axes searched, JSON-ready (the global-batch tolerance is the planner's, not the question's)
        n_evaluated = len(grid)
        space_d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(space).items() if k != "tolerance"}
    pareto = df[df["pareto"]].sort_values(["time_s", "cost_usd"], kind="stable").reset_index(drop=True) \
        if len(df) else df  # fastest first
    return PlanResult(
        model=mspec.name, objective=objective, deadline_s=deadline_s, budget_usd=budget_usd, candidates=df,
        pareto=pareto, recommended=rec, runner_up=ru, why=why, infeasible=infeasible, message=message,
        closest=closest, workload=wl, gpus=[g.name for g in gpu_specs], methods=method_list, prices=price_info,
        interval=iv, n_evaluated=n_evaluated, seconds=_time.perf_counter() - t0, space=space_d, notes=notes)


def _evaluate(mspec, gpu_specs, method_list, jobs, grid, wl, calibration, rate_tab, grid_gco2_kwh) -> dict[str, Any]:
    """The whole grid through one estimator call, and its run totals (vectorised: the same function
    `estimate` applies to its one row); the figures the ranking, the tables and the messages read."""
    from tuneplan.estimators.base import get_estimator

    est = get_estimator("tuneplan", calibration)
    a = build_arrays(mspec, gpu_specs, jobs, grid, wl.seq_len, est.constants)
    out = est.predict_arrays(a)
    rate_row = rate_tab[grid.gpu_idx]
    totals = run_totals(jobs[0], wl, a, out, rate_row, grid_gco2_kwh, est.constants)
    step_s = np.asarray(out["step_s"], dtype=float)
    peak = np.asarray(a["peak_flops"], dtype=float)
    return {"grid": grid, "gpu_names": np.array([g.name for g in gpu_specs], dtype=object),
            "method_names": np.array(method_list, dtype=object), "out": out, "totals": totals,
            "wall": totals["wall_clock_s"], "cost": totals["cost_usd"], "rate_row": rate_row,
            "gb": grid.micro_batch * grid.grad_accum * grid.dp,
            "mfu": np.asarray(out["model_flops_per_step"], dtype=float) / (step_s * grid.gpus.astype(float) * peak),
            "mem": np.asarray(out["memory_gib"], dtype=float),
            "cap": np.asarray(a["memory_bytes"], dtype=float) / 1024.0**3,
            "fits": np.asarray(out["fits"], dtype=bool)}


def _check_question(objective: str, interval, deadline_s, budget_usd) -> None:
    if objective not in OBJECTIVES:
        raise InputError("objective", f"unknown objective '{objective}'", OBJECTIVES)
    if interval is not None and interval != 0 and not 0 < interval < 1:
        raise InputError("interval", f"must be between 0 and 1 (got {interval})")
    for name, v in (("deadline", deadline_s), ("budget", budget_usd)):
        if v is not None and (not math.isfinite(float(v)) or float(v) <= 0):
            raise InputError(name, f"must be positive, got {v}")


def _base_jobs(method_list: list[str], fixed: dict, examples, tokens_per_example, epochs
               ) -> tuple[list[JobSpec], int, int]:
    """One validated base job per method (its options and the work), the model-parallel degree and the
    GPU counts' multiple: tp x pp x cp, and pp x ep x etp under expert parallel (JobSpec: ep x etp
    divides tp x cp x dp; etp defaults to tp)."""
    model_par = math.prod(int(fixed.get(k, 1) or 1) for k in ("tp", "pp", "cp"))
    ep = int(fixed.get("ep", 1) or 1)
    expert = int(fixed.get("pp", 1) or 1) * ep * int(fixed.get("etp") or fixed.get("tp", 1) or 1)
    multiple = math.lcm(model_par, expert) if ep > 1 else model_par
    jobs = [make_job(method=m, examples=examples, tokens_per_example=tokens_per_example, epochs=epochs,
                     gpus=multiple, **fixed) for m in method_list]
    return jobs, model_par, multiple


def _rank(ev: dict, objective: str, deadline_s, budget_usd) -> None:
    """Adds to `ev` `k` (rows that fit, best first) and the masks priced, meets_deadline, within_budget and
    eligible. Figures equal at the precision people read them (a cent, a second, 10 Wh) tie, and the next
    key decides; rows meeting the constraints come first."""
    fits, wall, cost, energy_kwh = ev["fits"], ev["wall"], ev["cost"], ev["totals"]["energy_kwh"]
    keep = np.flatnonzero(fits)
    meets_deadline = np.ones(len(wall), dtype=bool) if deadline_s is None else wall <= deadline_s
    priced = np.isfinite(cost)
    within_budget = np.ones(len(wall), dtype=bool) if budget_usd is None else priced & (cost <= budget_usd)
    eligible = fits & meets_deadline & within_budget & (priced if objective in COST_OBJECTIVES else True)
    cost_key = np.where(priced, cost, np.inf)
    keys = {"cheapest": (np.round(cost_key, 2), wall, energy_kwh),
            "fastest": (np.round(wall), cost_key, energy_kwh),
            "energy": (np.round(energy_kwh, 2), cost_key, wall),
            "balanced": (np.where(priced, wall * cost_key, np.inf), wall, cost_key)}[objective]
    k = keep[np.lexsort(tuple(x[keep] for x in reversed(keys)) + (~eligible[keep],))]
    ev.update(k=k, priced=priced, meets_deadline=meets_deadline, within_budget=within_budget, eligible=eligible)


def _cached_shapes_note(base, ev: dict) -> list[str]:
    """Why a candidate that fits can show more GiB/GPU than the GPU has (batches of varying length)."""
    if not (base.variable_shapes() and bool(np.any(ev["fits"] & (ev["mem"] > ev["cap"])))):
        return []
    return ["GiB/GPU is the nvidia-smi peak, blocks cached for other batch shapes included (each batch padded "
            "to its longest example): torch frees those before it runs out, so a candidate whose column exceeds "
            "the GPU's memory can still fit (tuneplan estimate says how much is cached)."]


def _space_notes(space: Space, objective: str) -> list[str]:
    ga = "grad-accum " + str(list(space.grad_accums)) if space.grad_accums else space.global_batch
    out = [f"Global batch: {ga} samples per optimizer step (gradient accumulation fills in what micro-batch x "
           "GPUs lacks)."]
    if objective == "balanced":
        out.append("balanced: the smallest time x cost (the Pareto point where 1% less time costs at least "
                   "1% more money).")
    return out


PIN_AS = {"micro_batches": int, "grad_accums": int, "grad_ckpt": bool}
"""How a pinned axis reads the value given for its JobSpec option (the others take it as given)."""


def _pin_axes(fixed_job_fields: dict, methods, micro_batches, grad_accums, shardings, grad_ckpt, rate,
              grid_gco2_kwh) -> tuple:
    """A single value for an axis pins it; grid fields given as fixed job fields do too. Returns the
    axes, the rate and grid intensity, and the job fields left fixed for every candidate."""
    fixed = {k: v for k, v in fixed_job_fields.items() if v is not None}
    axes = {"methods": methods, "micro_batches": [micro_batches] if isinstance(micro_batches, int) else micro_batches,
            "grad_accums": [grad_accums] if isinstance(grad_accums, int) else grad_accums,
            "shardings": _as_list(shardings) if isinstance(shardings, str) else shardings,
            "grad_ckpt": (grad_ckpt,) if isinstance(grad_ckpt, bool) else grad_ckpt}
    for name, axis in plan_axes().items():  # JobSpec's options declared with axis=...
        if name not in fixed:
            continue
        if axis == "gpu_counts":
            raise InputError("gpus", "the planner chooses the GPU count: give max_gpus (and gpus= the GPU types)")
        if axis in axes:  # a value for a searched option pins its axis
            axes[axis] = [PIN_AS.get(axis, lambda v: v)(fixed.pop(name))]
    rate = fixed.pop("rate_usd_per_gpu_hour", rate)
    grid_gco2_kwh = fixed.pop("grid_gco2_kwh", grid_gco2_kwh)
    for name, v in (("rate", rate), ("grid-gco2-kwh", grid_gco2_kwh)):
        if v is not None and (not math.isfinite(float(v)) or float(v) < 0):
            raise InputError(name, f"must be a number >= 0, got {v}")
    return (*(axes[k] for k in ("methods", "micro_batches", "grad_accums", "shardings")), tuple(axes["grad_ckpt"]),
            rate, grid_gco2_kwh, fixed)


def _price_table(gpu_specs: list[GPUSpec], rate, provider, prices,
                 notes: list[str]) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """$/GPU-hour per GPU type (NaN: no price) and where each came from; old prices said in `notes`."""
    from tuneplan.specs.prices import price_for, stale_price_warning

    rate_tab = np.full(len(gpu_specs), np.nan)
    price_info: dict[str, dict[str, Any]] = {}
    for i, g in enumerate(gpu_specs):
        if rate is not None:
            rate_tab[i] = float(rate)
            price_info[g.name] = {"usd_per_gpu_hour": float(rate), "source": "--rate"}
            continue
        p = price_for(g.name, provider=provider, path=prices)
        if p is None:
            where = f" from {provider}" if provider else ""
            price_info[g.name] = {"usd_per_gpu_hour": None, "source": f"no price{where} in the price file"}
            continue
        rate_tab[i] = p.usd_per_gpu_hour
        price_info[g.name] = {"usd_per_gpu_hour": p.usd_per_gpu_hour, "source": p.describe(),
                              "provider": p.provider, "date_seen": p.date_seen}
        old = stale_price_warning(p)
        if old:
            notes.append(old[0].upper() + old[1:] + ".")
    return rate_tab, price_info


def _interval_bounds(interval, calibration, ev: dict, notes: list[str], base, mspec, gpu_specs, seq_len: int
                     ) -> tuple[dict[str, Any] | None, np.ndarray, np.ndarray]:
    """Wall-clock bounds from the held-out residuals stored in the calibration, when it has them: with
    a width model, each candidate's as `estimate` gives it for that configuration (learn.intervals: the
    settings the plan searched count as said); else the pool an estimate of the same framework reads
    (learn.intervals.residual_pool)."""
    wall, train_s = ev["wall"], ev["totals"]["train_s"]
    nan = np.full(len(wall), np.nan)
    if not interval:
        return None, nan, nan
    from tuneplan.estimators.calibration import interval_residuals
    from tuneplan.learn.intervals import conformal_bounds, residual_pool

    res = interval_residuals("tuneplan", calibration)
    if res is None or len(res.get("throughput", [])) < 5:
        notes.append("No interval: no held-out residuals stored for this estimator.")
        return None, nan, nan
    width = res.get("width") or {}
    if "throughput" in width:
        lo_t, hi_t = _width_factors(width, interval, base, mspec, gpu_specs, ev["grid"], ev["out"], seq_len)
        what, n = "width from what the estimate assumed", len(width["throughput"]["z"])
    else:
        pool, what = residual_pool(res, base.framework)
        (lo_t, hi_t), n = conformal_bounds(np.asarray(pool), interval), len(pool)
    fixed_s = wall - train_s
    info = {"coverage": interval, "throughput_low_factor": float(np.min(lo_t)),
            "throughput_high_factor": float(np.max(hi_t)), "source": f"{res.get('source', '')} ({what})",
            "n_residuals": n}
    return info, fixed_s + train_s / hi_t, fixed_s + train_s / lo_t


def _width_factors(width: dict, interval: float, base, mspec, gpu_specs, grid, out, seq_len: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's throughput multipliers from the width model, computed once per distinct GPU,
    GPU count and communication-bound flag (what changes its contributions across the grid)."""
    from tuneplan.learn.intervals import (
        COMM_BOUND,
        comm_share,
        coverage_keys,
        filled_in,
        interval_flags,
        scale_bucket,
        width_bounds,
    )

    filled = filled_in(base) - {"grad_ckpt", "batch"}  # the plan chooses checkpointing and the batch shape
    comm = np.asarray(comm_share(out, "_s"), dtype=float)
    combos = np.column_stack([grid.gpu_idx, grid.gpus, np.broadcast_to(comm > COMM_BOUND, (len(grid),))])
    distinct, inverse = np.unique(combos.astype(np.int64), axis=0, return_inverse=True)
    lo, hi = np.empty(len(distinct)), np.empty(len(distinct))
    for j, (g, n, c) in enumerate(distinct):
        keys = {**coverage_keys(base, mspec, gpu_specs[int(g)], seq_len), "scale": scale_bucket(int(n))}
        flags = interval_flags(filled, keys, base.framework, 1.0 if c else 0.0, width.get("covered"))
        lo[j], hi[j] = width_bounds(width["throughput"], flags, interval)[:2]
    inverse = np.asarray(inverse).reshape(-1)
    return lo[inverse], hi[inverse]


def _table(ev: dict, t_lo, t_hi) -> pd.DataFrame:
    """The candidates table (rows `k`, best first), its cost-time Pareto front marked."""
    import pandas as pd

    k, grid, gpu_names, method_names, wall, cost, out, totals = (ev[x] for x in (
        "k", "grid", "gpu_names", "method_names", "wall", "cost", "out", "totals"))
    step_s = np.asarray(out["step_s"], dtype=float)
    tokens_step = np.asarray(out["tokens_per_step"], dtype=float)
    device_hours, energy_kwh, co2_kg, steps = (totals[x] for x in ("device_hours", "energy_kwh", "co2_kg", "steps"))
    shard_names = np.array(grid.sharding_labels, dtype=object)
    cols = {
        "gpu": gpu_names[grid.gpu_idx[k]], "gpus": grid.gpus[k], "nodes": grid.nodes[k],
        "method": method_names[grid.method_idx[k]], "micro_batch": grid.micro_batch[k],
        "grad_accum": grid.grad_accum[k], "global_batch": ev["gb"][k].astype(np.int64),
        "sharding": shard_names[grid.sharding_idx[k]], "grad_ckpt": grid.grad_ckpt[k].astype(bool),
        "time_s": wall[k], "time_h": wall[k] / 3600.0, "time_low_s": t_lo[k], "time_high_s": t_hi[k],
        "cost_usd": cost[k], "cost_low_usd": cost[k] * t_lo[k] / wall[k], "cost_high_usd": cost[k] * t_hi[k] / wall[k],
        "rate_usd_per_gpu_hour": ev["rate_row"][k], "device_hours": device_hours[k], "energy_kwh": energy_kwh[k],
        "co2_kg": co2_kg[k], "tokens_per_s": tokens_step[k] / step_s[k], "step_s": step_s[k],
        "steps": steps[k].astype(np.int64), "mfu": ev["mfu"][k], "memory_per_gpu_gib": ev["mem"][k],
        "memory_capacity_gib": ev["cap"][k],
        **{x: ev[x][k] for x in ("fits", "meets_deadline", "within_budget", "eligible")},
    }
    cols["pareto"] = pareto_mask(wall[k], cost[k]) if ev["priced"][k].any() else (
        wall[k] == wall[k].min() if len(k) else np.zeros(0, bool))
    return pd.DataFrame(cols)


def _recommend(df, ev: dict, objective, deadline_s, budget_usd) -> tuple:
    """(recommended, runner-up, why, message, closest): the best eligible row and the best other GPU
    type, count or method (another micro-batch of the same setup is no alternative); or which constraint
    rules everything out."""
    k, eligible, grid = ev["k"], ev["eligible"], ev["grid"]
    rec = ru = None
    why = message = ""
    closest = None
    n_el = int(eligible[k].sum())
    if n_el:
        rec = _row(df, 0)
        r0 = k[0]
        other = eligible[k] & ((grid.gpu_idx[k] != grid.gpu_idx[r0]) | (grid.gpus[k] != grid.gpus[r0])
                               | (grid.method_idx[k] != grid.method_idx[r0]))
        idx = np.flatnonzero(other)
        if len(idx):
            ru = _row(df, int(idx[0]))
        elif n_el > 1:
            ru = _row(df, 1)
        why = _why(objective, rec, ru, deadline_s, budget_usd)
    else:
        message, closest = _no_plan(df, ev, deadline_s, budget_usd, objective)
    return rec, ru, why, message, closest


def _stage_answer(df: pd.DataFrame, stage: str, objective: str, deadline_s, budget_usd) -> tuple:
    """(recommended, runner-up, why, message, closest) of a stage plan's table: the runner-up differs in GPU
    type, count, method or rollout split; RL adds why its placement wins."""
    from tuneplan.plan.stages import placement_why

    if not len(df) or not bool(df["eligible"].iloc[0]):
        return None, None, "", ("no candidate fits in memory" if not len(df) else "no candidate meets the deadline "
                                "and budget; the closest is listed first"), _row(df, 0) if len(df) else None
    rec = _row(df, 0)
    other = df["eligible"] & ((df["gpu"] != rec["gpu"]) | (df["gpus"] != rec["gpus"])
                              | (df["method"] != rec["method"]) | (df["rollout_gpus"] != rec["rollout_gpus"]))
    idx = np.flatnonzero(other.to_numpy())
    ru = _row(df, int(idx[0])) if len(idx) else None
    why = _why(objective, rec, ru, deadline_s, budget_usd) + (placement_why(df, rec) if stage in RL_STAGES else "")
    return rec, ru, why, "", None


def _row(df: pd.DataFrame, i: int) -> dict[str, Any]:
    r = {k: _py(v) for k, v in df.iloc[i].to_dict().items()}
    r["description"] = describe(r)
    return r


def _why(objective: str, rec: dict, ru: dict | None, deadline_s: float | None, budget_usd: float | None) -> str:
    lead = {"cheapest": "Cheapest", "fastest": "Fastest", "energy": "Least energy",
            "balanced": "Best balance of time and cost"}[objective]
    cons = []
    if deadline_s is not None:
        cons.append(f"meets the {hours(deadline_s)} deadline")
    if budget_usd is not None:
        cons.append(f"fits the {money(budget_usd)} budget")
    head = f"{lead} configuration" + (f" that {' and '.join(cons)}" if cons else "")
    s = f"{head}: {describe(rec)}, {money(rec['cost_usd'])} in {hours(rec['time_s'])}"
    if objective == "energy":
        s += f" using {rec['energy_kwh']:.1f} kWh"
    if ru is None:
        return s + "; no other GPU type, count or method qualifies."

    def compare(key: str, tie: float, same: str, amount, more: str, less: str) -> tuple[str, int]:
        if rec[key] is None or ru[key] is None:
            return "not comparable in cost (no price)", 0
        d = ru[key] - rec[key]
        if abs(d) < tie:
            return same, 0
        return (f"{amount(d)} {more}", 1) if d > 0 else (f"{amount(-d)} {less}", -1)

    cost = ("cost_usd", 0.005, "the same cost", money, "more", "cheaper")
    time = ("time_s", 1.0, "as fast", hours, "slower", "faster")
    energy = ("energy_kwh", 0.05, "the same energy", lambda v: f"{v:.1f} kWh", "more", "less")
    order = {"cheapest": (cost, time), "fastest": (time, cost), "energy": (energy, cost, time),
             "balanced": (cost, time)}[objective]
    parts = [compare(*c) for c in order]
    text = parts[0][0]
    for p, sign in parts[1:]:
        text += (" but " if sign < 0 else " and ") + p
    ru_text = describe(ru, short=describe(ru, short=True) != describe(rec, short=True))
    return s + f"; the runner-up, {ru_text}, is {text}."


def _no_plan(df: pd.DataFrame, ev: dict, deadline_s, budget_usd, objective) -> tuple[str, dict | None]:
    """Which constraint rules everything out, and the closest configuration."""
    grid, gpu_names, method_names, mem, cap = (ev[x] for x in ("grid", "gpu_names", "method_names", "mem", "cap"))
    if not ev["fits"].any():
        i = int(np.argmin(mem / cap))
        closest = {"gpu": gpu_names[grid.gpu_idx[i]], "gpus": int(grid.gpus[i]),
                   "method": method_names[grid.method_idx[i]], "micro_batch": int(grid.micro_batch[i]),
                   "grad_ckpt": bool(grid.grad_ckpt[i]), "memory_per_gpu_gib": float(mem[i]),
                   "memory_capacity_gib": float(cap[i])}
        return (f"no configuration fits in memory: the closest is {closest['gpus']} x {closest['gpu']} "
                f"{closest['method']} at micro-batch {closest['micro_batch']}"
                f"{' with checkpointing' if closest['grad_ckpt'] else ''}, needing {mem[i]:.1f} GiB per GPU "
                f"of {cap[i]:g} GiB; try more GPUs (--max-gpus), qlora, or a GPU with more memory", closest)
    priced = df["cost_usd"].notna().to_numpy()
    if objective in COST_OBJECTIVES or budget_usd is not None:
        if not priced.any():
            return ("no configuration that fits has a price: pass --rate or another --provider", None)
        d = df[priced]
    else:
        d = df
    t = d["time_s"].to_numpy()
    c = d["cost_usd"].to_numpy()
    i_fast = int(np.lexsort((np.where(np.isfinite(c), c, np.inf), t))[0])
    fastest = _row(d, i_fast)
    cheapest = None
    if np.isfinite(c).any():
        i_cheap = int(np.lexsort((t, np.where(np.isfinite(c), c, np.inf)))[0])
        cheapest = _row(d, i_cheap)
    dl_fail = deadline_s is not None and not (t <= deadline_s).any()
    bu_fail = budget_usd is not None and not (np.isfinite(c) & (c <= budget_usd)).any()
    f_txt = f"{describe(fastest)} at {hours(fastest['time_s'])} ({money(fastest['cost_usd'])})"
    c_txt = cheapest and f"{describe(cheapest)} at {money(cheapest['cost_usd'])} ({hours(cheapest['time_s'])})"
    if dl_fail and bu_fail:
        return (f"no configuration meets the {hours(deadline_s)} deadline or the {money(budget_usd)} budget: "
                f"the fastest is {f_txt}; the cheapest is {c_txt}", fastest)
    if dl_fail:
        return f"no configuration meets the {hours(deadline_s)} deadline: the fastest is {f_txt}", fastest
    if bu_fail:
        return f"no configuration is within the {money(budget_usd)} budget: the cheapest is {c_txt}", cheapest
    # each constraint can be met, but not both at once: the least relative violation
    viol = np.maximum(t / deadline_s, np.where(np.isfinite(c), c, np.inf) / budget_usd)
    best = _row(d, int(np.argmin(viol)))
    return (f"no configuration meets both the {hours(deadline_s)} deadline and the {money(budget_usd)} budget: "
            f"the closest is {describe(best)} at {hours(best['time_s'])} and {money(best['cost_usd'])}", best)


def _infeasible(ev: dict, deadline_s, budget_usd, objective, space: Space, provider) -> list[dict[str, Any]]:
    """One entry per (GPU type, method) asked for with no candidate meeting every constraint."""
    grid, gpu_names, method_names, mem, cap, fits, wall, cost = (ev[x] for x in (
        "grid", "gpu_names", "method_names", "mem", "cap", "fits", "wall", "cost"))
    eligible, priced, meets_deadline, within_budget = (ev[x] for x in (
        "eligible", "priced", "meets_deadline", "within_budget"))
    n_m = len(method_names)
    n_pairs = len(gpu_names) * n_m
    pair = grid.gpu_idx.astype(np.int64) * n_m + grid.method_idx

    def pmin(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        outv = np.full(n_pairs, np.inf)
        np.minimum.at(outv, pair[mask], values[mask])
        return outv

    n_el = np.bincount(pair[eligible], minlength=n_pairs)
    n_fit = np.bincount(pair[fits], minlength=n_pairs)
    min_mem = pmin(mem, np.ones(len(pair), bool))
    fast = pmin(wall, fits)
    cheap = pmin(np.where(priced, cost, np.inf), fits)
    fast_in_budget = pmin(wall, fits & within_budget)
    cheap_in_deadline = pmin(np.where(priced, cost, np.inf), fits & meets_deadline)
    ck = "on" if True in space.grad_ckpt else "off"
    shard = ", ".join(space.shardings)
    out = []
    for p in np.flatnonzero(n_el == 0):
        g, m = gpu_names[p // n_m], method_names[p % n_m]
        gcap = float(cap[np.flatnonzero(pair == p)[0]]) if (pair == p).any() else float("nan")
        if n_fit[p] == 0:
            reason = (f"out of memory even at micro-batch {min(space.micro_batches)} with checkpointing {ck} "
                      f"({shard}) on up to {max(space.gpu_counts)} GPUs: {min_mem[p]:.1f} GiB per GPU needed, "
                      f"{gcap:g} GiB available")
            kind = "memory"
        elif not np.isfinite(cheap[p]) and (objective in COST_OBJECTIVES or budget_usd is not None):
            where = f" from {provider}" if provider else ""
            reason, kind = f"no price for {g}{where} in the price file: pass --rate", "price"
        else:
            over_b = budget_usd is not None and not cheap[p] <= budget_usd
            late = deadline_s is not None and not fast[p] <= deadline_s
            bits = ([f"over budget (cheapest {money(cheap[p])})"] if over_b else []) + (
                [f"past the deadline (fastest {hours(fast[p])})"] if late else [])
            kind = {(True, False): "budget", (False, True): "deadline"}.get((over_b, late), "both")
            reason = " and ".join(bits) or (
                "no configuration meets both the deadline and the budget (within the deadline the cheapest is "
                f"{money(cheap_in_deadline[p])}; within the budget the fastest is {hours(fast_in_budget[p])})")
        out.append({"choice": f"{g} {m}", "gpu": g, "method": m, "reason": reason, "kind": kind})
    return out
