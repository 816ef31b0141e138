"""The work a run does (samples, tokens, steps) and the run-level totals built on a step time:
wall clock with its overheads (model load, evaluation, checkpoint saves), device-hours, cost,
energy and CO2."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from tuneplan.errors import InputError
from tuneplan.physics.codes import full_weights
from tuneplan.physics.constants import DEFAULT_CONSTANTS, DEFAULT_GRID_GCO2_KWH, PhysicsConstants
from tuneplan.physics.stack import get
from tuneplan.specs.job import JobSpec


@dataclass(frozen=True)
class Workload:
    seq_len: int  # tokens per sample as processed (padded or packed length)
    samples_per_epoch: float
    real_tokens_per_epoch: float  # examples x mean tokens (what the data holds)
    processed_tokens_per_epoch: float  # samples x seq_len (what the GPUs compute on)
    epochs: float
    seq_len_source: str

    def to_dict(self) -> dict:
        return asdict(self)


def workload(job: JobSpec) -> Workload:
    """Samples and tokens per epoch from examples / tokens-per-example / tokens / seq-len."""
    tpe, ex, tok = job.tokens_per_example, job.examples, job.tokens
    seq = job.seq_len
    src = "--seq-len"
    if seq is None:
        if tpe is None:
            raise InputError("seq-len", "is needed when --tokens-per-example is not given")
        seq, src = int(math.ceil(tpe)), "mean tokens per example"
    if ex is not None and tpe is not None:
        real = ex * tpe
    elif tok is not None:
        real = tok
        if tpe is not None:
            ex = tok / tpe
    elif ex is not None:
        real = ex * seq
    else:
        raise InputError("examples", "give --examples with --tokens-per-example, or --tokens")
    samples = real / seq if job.packing or ex is None else ex  # packed: tokens / length; else one per example
    run_len = longest_of(seq - job.length_gap(), seq, job.micro_batch)  # batch_lengths
    return Workload(seq_len=int(seq), samples_per_epoch=float(samples), real_tokens_per_epoch=float(real),
                    processed_tokens_per_epoch=float(samples * run_len), epochs=job.epochs, seq_len_source=src)


def longest_of(mean, cap, k):
    """Expected longest of k examples (tokens), their lengths assumed uniform on [max(0, 2 mean - cap),
    min(cap, 2 mean)] (only the mean is known): lo + (hi - lo) k / (k + 1); one example: the mean."""
    lo, hi = np.maximum(2.0 * mean - cap, 0.0), np.minimum(cap, 2.0 * mean)
    return lo + (hi - lo) * k / (k + 1.0)


def batch_lengths(a: dict) -> tuple[dict, np.ndarray]:
    """(the arrays at the length a micro-step computes, the mean tokens per example): batches padded to their
    longest example (`length_gap` > 0) run at the expected longest of their micro-batch (`longest_of`),
    attention spans capped by it. Step time and FLOPs take these, tokens per step the mean; memory keeps
    the cap (the longest example sets the peak)."""
    gap = a.get("length_gap", 0.0)
    if not np.any(np.asarray(gap) > 0):
        return a, a["seq_len"]
    mean = a["seq_len"] - gap
    seq = longest_of(mean, a["seq_len"], a["micro_batch"])
    return {**a, "seq_len": seq, "attn_span": np.minimum(get(a, "attn_span"), seq),
            "attn_keys": np.minimum(get(a, "attn_keys"), 0.5 * seq)}, mean


def seq_len_warning(max_position_embeddings: int | None, model_name: str, wl: Workload) -> list[str]:
    """A sequence longer than the model's positions is a warning (RoPE scaling is common), not an error."""
    if max_position_embeddings and wl.seq_len > max_position_embeddings:
        return [f"seq_len {wl.seq_len} is above {model_name}'s max_position_embeddings "
                f"({max_position_embeddings}): fine with RoPE scaling, otherwise truncate"]
    return []


def workload_assumptions(job: JobSpec, wl: Workload, c: PhysicsConstants = DEFAULT_CONSTANTS) -> list[str]:
    """How each sample is shaped: packed, padded to the sequence length, or to its batch's longest."""
    gap, mb = job.length_gap(), job.micro_batch
    bound = (f"the expected longest of {mb} example(s), {float(longest_of(wl.seq_len - gap, wl.seq_len, mb)):.0f} "
             f"tokens, their lengths taken as spread evenly about the mean ({wl.seq_len - gap:.0f}) up to seq_len"
             if gap > 0 else "seq_len, the upper bound" if wl.seq_len_source == "--seq-len" else
             "the mean length, a lower bound: a batch runs at its longest example's length, which for a "
             "batch of several examples of varying length can be a few times the mean (give --seq-len "
             "your longest example for the upper bound, or pack)")
    return [
        f"Sequence length {wl.seq_len} tokens per sample ({wl.seq_len_source}); "
        + ("samples packed to it." if job.packing else
           "each example padded to it." if job.padding == "max" else
           f"each batch padded to its longest example: compute assumes {bound}; batch "
           "shapes vary, so reserved memory (the allocator part) holds "
           f"{c.variable_shape_reserve:.2f}x the per-token "
           "activations and loss buffers more (freed blocks of shorter batches stay cached); torch frees "
           "them before it runs out, so they do not count against the fit."),
    ]


def weight_bytes(a: dict) -> np.ndarray:
    """Bytes loaded from disk at the start: the frozen weights as stored plus the trained ones."""
    return (a["params_frozen_linear"] * a["frozen_linear_bytes"] + a["params_frozen_other"] * a["frozen_other_bytes"]
            + a["params_trainable"] * a["weight_bytes_compute"])


def checkpoint_bytes(a: dict) -> np.ndarray:
    """Bytes a checkpoint save writes: the trained parameters, 16-bit for full weights, fp32 adapters."""
    return a["params_trainable"] * np.where(full_weights(a["method_code"]), 2.0, 4.0)


def run_totals(job: JobSpec, wl: Workload, a: dict, out: dict, rate=None, grid_gco2_kwh: float | None = None,
               c: PhysicsConstants = DEFAULT_CONSTANTS) -> dict[str, np.ndarray]:
    """Run-level totals of every configuration: the step time (`out` over the arrays `a`, which give the
    per-row job numbers) becomes the wall clock with load, evaluation and saves (`job`'s shared settings),
    device-hours, cost (`rate`: $/GPU-hour per row or one; None or NaN: none), energy and CO2
    (`grid_gco2_kwh`, default the job's, else DEFAULT_GRID_GCO2_KWH)."""
    step_s = np.asarray(out["step_s"], dtype=float)
    n = len(step_s)
    mb, ga, dp = (np.asarray(a[k], dtype=float) for k in ("micro_batch", "grad_accum", "dp"))
    gpus = np.asarray(a["gpus"], dtype=float)
    steps = np.maximum(1.0, np.ceil(np.ceil(wl.samples_per_epoch / (mb * ga * dp)) * wl.epochs))
    train_s = steps * step_s
    disk = job.disk_gbs * 1e9
    load_s = (np.full(n, float(job.load_time_s)) if job.load_time_s is not None
              else np.asarray(weight_bytes(a), dtype=float) / disk)
    if job.eval_every and job.eval_examples:
        forward_micro_s = np.asarray(out["forward_s"] if "forward_s" in out else np.zeros(n), dtype=float) / ga
        eval_s = np.floor(steps / job.eval_every) * np.ceil(job.eval_examples / (mb * dp)) * forward_micro_s
    else:
        eval_s = np.zeros(n)
    saves = (np.floor(steps / job.save_every) if job.save_every else 0.0) + (1.0 if job.save_final else 0.0)
    checkpoint_s = saves * np.asarray(checkpoint_bytes(a), dtype=float) / disk
    wall = load_s + train_s + eval_s + checkpoint_s
    device_hours = wall * gpus / 3600.0
    util = np.clip(np.asarray(out.get("compute_s", step_s), dtype=float) / step_s, 0.0, 1.0)
    tdp = np.asarray(a["tdp_w"], dtype=float)
    idle = c.idle_power_fraction
    energy_j = gpus * (tdp * (idle + (1.0 - idle) * util) * (train_s + eval_s) + tdp * idle * (load_s + checkpoint_s))
    energy_kwh = energy_j / 3.6e6
    grid = grid_gco2_kwh if grid_gco2_kwh is not None else job.grid_gco2_kwh
    grid = DEFAULT_GRID_GCO2_KWH if grid is None else float(grid)
    cost = device_hours * (np.nan if rate is None else np.asarray(rate, dtype=float))
    return {"steps": steps, "train_s": train_s, "load_s": load_s, "eval_s": eval_s, "checkpoint_s": checkpoint_s,
            "wall_clock_s": wall, "device_hours": device_hours, "cost_usd": cost, "energy_kwh": energy_kwh,
            "co2_kg": energy_kwh * grid / 1000.0,
            "avg_power_w": np.where(wall > 0, energy_j / np.where(wall > 0, wall, 1.0) / gpus, 0.0)}


@dataclass(frozen=True)
class RunTotals:
    """One configuration's run totals (a row of `run_totals`)."""

    steps: int
    train_s: float
    load_s: float
    eval_s: float
    checkpoint_s: float
    wall_clock_s: float
    device_hours: float
    cost_usd: float | None
    energy_kwh: float
    co2_kg: float
    avg_power_w: float

    @classmethod
    def row(cls, totals: dict[str, np.ndarray], i: int = 0) -> RunTotals:
        v = {k: float(x[i]) for k, x in totals.items()}
        v["steps"] = int(v["steps"])
        v["cost_usd"] = None if math.isnan(v["cost_usd"]) else v["cost_usd"]
        return cls(**v)

    def to_dict(self) -> dict:
        return asdict(self)

    def assumptions(self, job: JobSpec, tdp_w: float, rate_source: str) -> list[str]:
        grid = job.grid_gco2_kwh if job.grid_gco2_kwh is not None else DEFAULT_GRID_GCO2_KWH
        return [
            f"Wall clock includes model load ({self.load_s:.0f} s), evaluation ({self.eval_s:.0f} s) and "
            f"checkpoint saves ({self.checkpoint_s:.0f} s) at {job.disk_gbs:g} GB/s disk.",
            f"Energy: GPU power {tdp_w:.0f} W TDP scaled by busy share; CO2 at {grid:g} g/kWh.",
            f"Price: {rate_source}." if self.cost_usd is not None else f"Cost not computed: {rate_source}.",
        ]
