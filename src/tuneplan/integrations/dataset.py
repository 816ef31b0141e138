"""An estimate on the user's own dataset (`--data`): the examples and their token counts replace
--examples / --tokens-per-example, the collator's batches give the time (the mean step over the sampler's
micro-batch lengths, each step waiting for its slowest data-parallel rank) and the peak memory (at the
longest batch the sampler can form, with the fixes when it does not fit). docs/data.md, "Time from the real
distribution" and "The worst batch"."""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

from tuneplan.api import EstimateResult, estimate
from tuneplan.corpus.collate import Collation, collate, length_bins, pack_bfd, truncate
from tuneplan.corpus.summary import DataSummary
from tuneplan.errors import InputError
from tuneplan.specs.job import JobSpec, make_job

SIZE_FIELDS = ("examples", "tokens", "tokens_per_example")
"""Job fields the data replaces."""


def data_collation(summary: DataSummary, job: JobSpec, *, group_by_length: bool = False,
                   packing_strategy: str | None = None) -> tuple[Collation, bool, str]:
    """The collator of this job over the data: (collation, packing, how it was chosen). Packing and
    padding: the job's flags, else the framework's data path (data/frameworks.yaml)."""
    from tuneplan.specs.framework import get_framework

    fw = get_framework(job.framework)
    packing = bool(job.packing or getattr(fw, "packing", False))
    strategy = packing_strategy or getattr(fw, "packing_strategy", None) or "bfd"
    padding = "group-by-length" if group_by_length else job.padding
    c = collate(summary.length, micro_batch=job.micro_batch, seq_len=job.seq_len, padding=padding,
                packing=packing, packing_strategy=strategy)
    why = ("--packing" if job.packing else f"framework {job.framework}'s default" if packing
           else "--group-by-length" if group_by_length else f"padding {job.padding}")
    return c, packing, why


def synced_step_time(batch_lengths, lengths: list[int], step_times, grad_accum: int, dp: int) -> float:
    """The mean optimizer-step time over the sampler's micro-batches: a micro-batch of length L takes
    step_time(L) / grad_accum (interpolated between the evaluated `lengths`); each data-parallel rank runs
    grad_accum micro-batches, and the step waits for the slowest rank (the gradients are reduced
    together). Consecutive micro-batches go to the ranks in turn, as DistributedSampler deals them."""
    import numpy as np

    per_micro = np.interp(np.asarray(batch_lengths, dtype=float), lengths, step_times) / grad_accum
    k = grad_accum * dp
    full = len(per_micro) // k * k
    steps = list(per_micro[:full].reshape(-1, grad_accum, dp).sum(axis=1).max(axis=1)) if full else []
    if len(per_micro) > full:  # the last, short step: its ranks' share of what is left
        rest = per_micro[full:]
        steps.append(max(rest[r::dp].sum() for r in range(dp)))
    return float(np.mean(steps))


def _bisect_fit(fits, lo: int, hi: int) -> int | None:
    """The largest length in [lo, hi] for which `fits(length)` (monotone: longer never fits better)."""
    n_fit = bisect.bisect_left(range(lo, hi + 1), True, key=lambda length: not fits(length))
    return lo + n_fit - 1 if n_fit else None


def estimate_with_data(model: Any, gpu: Any = None, *, summary: DataSummary, group_by_length: bool = False,
                       packing_strategy: str | None = None, interval: float | None = 0.8,
                       estimate_kwargs: dict | None = None, **job_kwargs: Any) -> EstimateResult:
    """`estimate` with the data's examples and token distribution; the result's `extra["data"]` holds the
    counts, the collator, the time bins and the worst-batch verdict with its fixes."""
    import numpy as np

    given = [k for k in SIZE_FIELDS if job_kwargs.get(k) is not None]
    if given:
        raise InputError("data", f"replaces --{given[0].replace('_', '-')}: give the data or the sizes, not both")
    ekw = dict(estimate_kwargs or {})
    job0 = make_job(**job_kwargs)
    col, packing, why = data_collation(summary, job0, group_by_length=group_by_length,
                                       packing_strategy=packing_strategy)
    n = summary.examples
    base = {k: v for k, v in job_kwargs.items() if k not in ("seq_len", "packing", "padding")}
    base["packing"] = packing or None
    if not packing:
        base["padding"] = "max" if col.mode == "padded to max" else "longest"
    memo: dict[tuple, EstimateResult] = {}

    def at(length: int, **over) -> EstimateResult:
        """One step's figures at one batch length (no data size: memory, fit, step time): a batch of one
        shape, so without the allocator's cache of freed blocks of other shapes (torch frees it before it
        runs out of memory; the main estimate's memory includes it)."""
        key = (int(length), tuple(sorted(over.items())))
        if key not in memo:
            one_shape = {} if packing else {"padding": "max"}
            memo[key] = estimate(model, gpu, interval=None, **ekw,
                                 **(base | one_shape | {"seq_len": int(length)} | over))
        return memo[key]

    bins: list[dict] = []
    if col.seq_len is not None and (packing or col.mode == "padded to max"):
        run_len = col.seq_len
        tpe = (col.padded_tokens if packing else col.real_tokens) / n  # packed: samples = these tokens / length
        time_line = f"every micro-batch {run_len:,} tokens long ({col.mode})"
    else:
        shares = length_bins(col.batch_lengths)
        lens = sorted({L for L, _ in shares} | {int(col.batch_lengths.min()), int(col.batch_lengths.max())})
        at_len = np.maximum.accumulate([at(L).step_time_s for L in lens])  # a longer batch is never quicker
        mean_step = synced_step_time(col.batch_lengths, lens, at_len, job0.grad_accum, job0.dp)
        run_len = int(round(float(np.interp(mean_step, at_len, lens)))) if len(lens) > 1 else lens[0]
        tpe = col.real_tokens / n
        bins = [{"batch_len": L, "share": w, "step_time_s": at(L).step_time_s} for L, w in shares]
        sync = (f"each optimizer step as long as its slowest of {job0.dp} data-parallel ranks, "
                if job0.dp > 1 else "")
        time_line = (f"step time over the data's micro-batch lengths ({sync}evaluated at {len(lens)} lengths "
                     f"from {lens[0]:,} to {lens[-1]:,} tokens, interpolated between): {mean_step:.3g} s per step "
                     f"on average, the step time at {run_len:,} tokens, which the run totals use (the mean length, "
                     f"{col.real_tokens / n:,.0f} tokens, would give {at(max(1, round(col.real_tokens / n))).step_time_s:.3g} s)")
    # padded to the longest: run_len is already the length a step computes, not a cap over the mean that
    # physics/run.batch_lengths would spread (the data's real tokens are put back on the workload)
    size = {"examples": float(n)} | ({} if bins else {"tokens_per_example": float(tpe)})
    res = estimate(model, gpu, interval=interval, **ekw, **(base | {"seq_len": int(run_len)} | size))
    res.workload = dataclasses.replace(res.workload, real_tokens_per_epoch=float(tpe * n))
    worst = _worst_batch(res, col, summary, job0, at)
    if bins:  # the sequence length is the data's time-equivalent batch length, not a --seq-len bound
        head = f"Sequence length {res.workload.seq_len} tokens per sample (--seq-len)"
        res.assumptions = [a.replace(head, f"Sequence length {res.workload.seq_len} tokens per sample (the "
                                           "length whose step time is the mean over the data's batch lengths)")
                            .replace("compute assumes seq_len, the upper bound", "compute assumes that length")
                           if a.startswith(head) else a for a in res.assumptions]
    res.assumptions += [summary.assumption(),
                        f"Collator: {col.mode} ({why}); {col.real_tokens:,} real tokens, {col.padded_tokens:,} "
                        f"computed, padding waste {col.padding_waste:.1%}"
                        + (f"; {col.examples_cut:,} example(s) truncated at {col.seq_len:,} tokens" if col.examples_cut else "")
                        + f"; time: {time_line}."]
    if not worst["fits_longest"]:
        res.warnings.append(worst["verdict"])
    steps = max(1, math.ceil(col.samples / (job0.micro_batch * job0.grad_accum * job0.dp)))
    per_step = {"real_tokens": col.real_tokens / steps, "padded_tokens": col.padded_tokens / steps}
    res.extra["data"] = {"summary": summary.to_dict(), "collator": col.to_dict(), "time_bins": bins,
                         "run_seq_len": int(run_len), "per_optimizer_step": per_step, "worst_batch": worst}
    return res


def _worst_batch(res: EstimateResult, col: Collation, summary: DataSummary, job: JobSpec, at) -> dict:
    """Memory at the median, p99 and longest micro-batch; the verdict and the fixes."""
    cap = res.memory_capacity_gib
    lengths = {"median": math.ceil(col.batch_len_p50), "p99": math.ceil(col.batch_len_p99),
               "longest": col.batch_len_max}
    rows = {k: at(L) for k, L in lengths.items()}
    out: dict[str, Any] = {k: {"batch_len": lengths[k], "memory_per_gpu_gib": r.memory_per_gpu_gib, "fits": r.fits}
                           for k, r in rows.items()}
    out.update(memory_capacity_gib=cap, fits_longest=rows["longest"].fits)
    mb = job.micro_batch
    longest = lengths["longest"]
    if rows["longest"].fits:
        out["verdict"] = (f"fits at the longest batch the sampler can form ({mb} x {longest:,} tokens: "
                          f"{rows['longest'].memory_per_gpu_gib:.1f} of {cap:g} GiB per GPU)")
        out["fixes"] = []
        return out
    fit_len = _bisect_fit(lambda L: at(L).fits, 1, longest - 1)
    out["longest_fitting_batch_len"] = fit_len
    share = float((col.batch_lengths > (fit_len or 0)).mean())
    # the expected first over-long micro-batch in a random order; group-by-length puts the longest first
    first = 1 if "group-by-length" in col.mode or share <= 0 else math.ceil(1.0 / share)
    oom_step = math.ceil(first / (job.grad_accum * job.dp))
    fixes = _fixes(col, summary, job, fit_len, longest, at)
    out.update(share_over=share, oom_step=oom_step, fixes=fixes)
    unless = "; ".join(f["change"] for f in fixes[:3]) or "a larger GPU or more sharding"
    if lengths["median"] == longest:  # one shape: packed, padded to max, or every batch as long
        out["verdict"] = (f"does not fit: every micro-batch is {mb} x {longest:,} tokens "
                          f"({rows['longest'].memory_per_gpu_gib:.1f} GiB of {cap:g}): an OOM at the first step "
                          f"unless {unless}")
    elif rows["median"].fits:
        out["verdict"] = (f"fits on the median batch ({mb} x {lengths['median']:,} tokens: "
                          f"{rows['median'].memory_per_gpu_gib:.1f} GiB of {cap:g}); the longest {share:.1%} of "
                          f"batches (over {fit_len:,} tokens) need up to {rows['longest'].memory_per_gpu_gib:.1f} GiB: "
                          f"expect an OOM around step {oom_step:,} unless {unless}")
    else:
        out["verdict"] = (f"does not fit even on the median batch ({mb} x {lengths['median']:,} tokens: "
                          f"{rows['median'].memory_per_gpu_gib:.1f} GiB of {cap:g}); the longest batch needs "
                          f"{rows['longest'].memory_per_gpu_gib:.1f} GiB: an OOM at the first step unless {unless}")
    return out


def _fixes(col: Collation, summary: DataSummary, job: JobSpec, fit_len: int | None, longest: int, at) -> list[dict]:
    """The cheapest changes that make the longest batch fit, each with what it costs."""
    fixes: list[dict] = []
    if fit_len:
        cut, n_cut, t_cut = truncate(summary.length, fit_len)
        total = max(1, int(summary.length.sum()))
        cut_text = f"cuts {n_cut:,} example(s), {t_cut:,} tokens ({t_cut / total:.2%} of the data)"
        if "wrapped" in col.mode:  # shorter sequences cut from the concatenated tokens: nothing lost
            fixes.append({"change": f"pack to --seq-len {fit_len:,}",
                          "effect": f"{-(-col.real_tokens // fit_len):,} packed sequences, no example cut"})
        elif "packed" in col.mode:  # shorter packed sequences; bfd truncates the examples longer than them
            fixes.append({"change": f"pack to --seq-len {fit_len:,}",
                          "effect": f"{pack_bfd(cut, fit_len):,} packed sequences; best-fit decreasing "
                                    + (cut_text if n_cut else "cuts no example")})
        else:
            fixes.append({"change": f"truncate to --seq-len {fit_len:,}", "effect": cut_text})
            samples = pack_bfd(cut, fit_len)
            waste = 1.0 - float(cut.sum()) / (samples * fit_len)
            fixes.append({"change": f"--packing --seq-len {fit_len:,}",
                          "effect": f"{samples:,} packed sequences, padding waste {waste:.1%}, every batch one shape"})
    smaller = _smaller_micro_batch(job, longest, at)
    fixes += [smaller] if smaller else []
    if job.checkpointing == "none":
        r = at(longest, grad_ckpt=True)
        if r.fits:
            fixes.append({"change": "--grad-ckpt", "effect": f"the longest batch needs {r.memory_per_gpu_gib:.1f} "
                                                             "GiB (about a third more compute)"})
        elif not smaller and job.micro_batch > 1:  # neither alone: both together
            both = _smaller_micro_batch(job, longest, at, grad_ckpt=True)
            fixes += [both] if both else []
    return fixes


def _smaller_micro_batch(job: JobSpec, longest: int, at, **over) -> dict | None:
    """The largest micro-batch below the job's at which the longest batch fits (with `over`, e.g.
    checkpointing), the global batch kept by accumulation; None when not even 1 fits."""
    mb = job.micro_batch
    for m in range(mb - 1, 0, -1):
        r = at(longest, micro_batch=m, **over)
        if r.fits:
            ga = job.grad_accum * math.ceil(mb / m)
            flags = f"--micro-batch {m} --grad-accum {ga}" + (" --grad-ckpt" if over.get("grad_ckpt") else "")
            return {"change": flags,
                    "effect": f"the longest batch needs {r.memory_per_gpu_gib:.1f} GiB; the global batch kept "
                              "(or a token-budget sampler: a smaller micro-batch for long samples only)"}
    return None
