"""The work a run does (samples, tokens, steps) and the run-level totals built on a step time:
wall clock with its overheads (model load, evaluation, checkpoint saves), device-hours, cost,
energy and CO2."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tuneplan.errors import InputError
from tuneplan.physics.constants import DEFAULT_CONSTANTS, DEFAULT_GRID_GCO2_KWH, PhysicsConstants
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
    if seq is None:
        if tpe is not None:
            seq, src = int(math.ceil(tpe)), "mean tokens per example"
        else:
            raise InputError("seq-len", "is needed when --tokens-per-example is not given")
    else:
        src = "--seq-len"
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
    return Workload(seq_len=int(seq), samples_per_epoch=float(samples), real_tokens_per_epoch=float(real),
                    processed_tokens_per_epoch=float(samples * seq), epochs=job.epochs, seq_len_source=src)


@dataclass(frozen=True)
class RunTotals:
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

    def to_dict(self) -> dict:
        return asdict(self)


def run_totals(job: JobSpec, wl: Workload, step_s: float, forward_micro_s: float, compute_share: float,
               params_total: float, weight_bytes: float, checkpoint_bytes: float, tdp_w: float,
               rate: float | None, c: PhysicsConstants = DEFAULT_CONSTANTS) -> RunTotals:
    steps_per_epoch = math.ceil(wl.samples_per_epoch / job.global_batch)
    steps = max(1, math.ceil(steps_per_epoch * wl.epochs))
    train_s = steps * step_s
    load_s = job.load_time_s if job.load_time_s is not None else weight_bytes / (job.disk_gbs * 1e9)
    eval_s = 0.0
    if job.eval_every and job.eval_examples:
        n_evals = steps // job.eval_every
        micro_steps = math.ceil(job.eval_examples / (job.micro_batch * job.dp))
        eval_s = n_evals * micro_steps * forward_micro_s
    saves = (steps // job.save_every if job.save_every else 0) + (1 if job.save_final else 0)
    checkpoint_s = saves * checkpoint_bytes / (job.disk_gbs * 1e9)
    wall = load_s + train_s + eval_s + checkpoint_s
    device_hours = wall * job.gpus / 3600.0
    util = min(1.0, max(0.0, compute_share))
    busy = c.idle_power_fraction + (1.0 - c.idle_power_fraction) * util
    train_power = tdp_w * busy
    idle_power = tdp_w * c.idle_power_fraction
    energy_j = job.gpus * (train_power * (train_s + eval_s) + idle_power * (load_s + checkpoint_s))
    energy_kwh = energy_j / 3.6e6
    grid = job.grid_gco2_kwh if job.grid_gco2_kwh is not None else DEFAULT_GRID_GCO2_KWH
    return RunTotals(
        steps=steps, train_s=train_s, load_s=load_s, eval_s=eval_s, checkpoint_s=checkpoint_s,
        wall_clock_s=wall, device_hours=device_hours,
        cost_usd=None if rate is None else device_hours * rate,
        energy_kwh=energy_kwh, co2_kg=energy_kwh * grid / 1000.0,
        avg_power_w=energy_j / wall / job.gpus if wall > 0 else 0.0,
    )
