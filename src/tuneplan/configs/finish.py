"""What is derived after every file is read: axolotl's unfrozen-parameter patterns as trained blocks,
GPU counts or accumulation from a stated global batch, and the work from max_steps."""

from __future__ import annotations

import re
from pathlib import Path

from tuneplan.configs.base import ConfigRead

DEFAULT_STEPS = 1000
"""Optimizer steps estimated when neither the config nor the flags say how much data there is (the
per-step figures do not depend on it; the wall clock and cost are for this many steps)."""
LAYER_NAMES = ("model.layers.{i}.", "model.layers.{i}.block_sparse_moe.experts", "model.layers.{i}.mlp")
"""Parameter names of block i, matched against unfrozen_parameters' patterns."""


def _unfrozen_layers(out: ConfigRead) -> None:
    if not (pats := out.value("unfrozen")):
        return
    v = next(x for x in out.values if x.field == "unfrozen")
    out.values.remove(v)
    try:
        from tuneplan.specs.catalog import resolve_model

        n_layers = resolve_model(out.model).n_layers if out.model else None
    except Exception:  # noqa: BLE001 - any resolution problem: reported below, the estimate decides
        n_layers = None
    if not n_layers:
        out.notes.append(f"{v.file}: unfrozen_parameters: the model's block count is unknown, so the trained "
                         "blocks are not counted (freeze with the default trainable layers)")
        return
    regs = []
    for p in pats:
        try:
            regs.append(re.compile(p))
        except re.error:
            out.ignore(v.file, "unfrozen_parameters", f"pattern '{p}' is not a valid regular expression")
    hit = [i for i in range(n_layers) if any(r.search(n.format(i=i)) for r in regs for n in LAYER_NAMES)]
    other = [p for p in pats if "layers" not in p]
    if not hit:
        out.notes.append(f"{v.file}: unfrozen_parameters names no block of the {n_layers}: estimated as freeze "
                         "with one trained block")
        out.set("trainable_layers", 1, v.file, "unfrozen_parameters")
        return
    last = list(range(n_layers - len(hit), n_layers))
    where = f"blocks {hit[0]}-{hit[-1]}" if hit == list(range(hit[0], hit[-1] + 1)) else f"{len(hit)} blocks"
    note = f"patterns match {where} of {n_layers}; whole blocks counted as trained"
    if hit != last:
        note += " (counted as the last blocks)"
    if other:
        note += f"; {', '.join(other)} trained too, not counted"
    out.set("trainable_layers", len(hit), v.file, "unfrozen_parameters", note)


def _global_batch(out: ConfigRead) -> None:
    if not (gb := out.value("global_batch")):
        return
    v = next(x for x in out.values if x.field == "global_batch")
    mb, ga = out.value("micro_batch", 1), out.value("grad_accum", 1)
    # the global batch spans the data-parallel ranks: gpus / (tp x pp x cp) (Megatron's num_microbatches
    # = global_batch_size / (micro_batch_size x dp)); a pipeline's micro-batches are the accumulation
    model_par = out.value("tp", 1) * out.value("pp", 1) * out.value("cp", 1)
    if not out.stated("gpus"):
        per = mb * ga
        if gb % per == 0 and gb // per >= 1 and not (out.stated("grad_accum") is False and v.key.endswith(
                "global_batch_size")):
            n = gb // per * model_par
            note = f"global batch {gb} / (micro-batch {mb} x accumulation {ga})"
            if model_par > 1:
                note += f" = {gb // per} data-parallel ranks, x tp x pp x cp {model_par}"
            out.set("gpus", n, v.file, v.key, note)
    elif not out.stated("grad_accum"):
        dp = out.value("gpus") // model_par
        if dp >= 1 and gb % (mb * dp) == 0:
            out.set("grad_accum", gb // (mb * dp), v.file, v.key,
                    f"global batch {gb} / ({mb} x {dp} data-parallel ranks)")


FORMAT_FRAMEWORKS = {"trl": "trl", "llamafactory": "llama-factory", "axolotl": "axolotl", "litgpt": "litgpt",
                     "torchtune": "torchtune"}
"""The data/frameworks.yaml entry of each config format whose trainer it names."""
LAUNCHER_FRAMEWORKS = {"deepspeed": "deepspeed", "accelerate": "accelerate"}
"""The profile of a launcher's file read without a trainer's (a DeepSpeed JSON: DeepSpeed's engine; an
accelerate config: a training loop under accelerate)."""


def _framework(out: ConfigRead) -> None:
    """`framework`: the profile of the trainer the files are for (the first trainer format read), else of
    the launcher (DeepSpeed before accelerate); its defaults then fill what the files leave out."""
    for table in (FORMAT_FRAMEWORKS, LAUNCHER_FRAMEWORKS):
        for f, file in zip(out.formats, out.files, strict=True):
            if f in table:
                out.set("framework", table[f], Path(file).name, "", f"the file is in {f}'s format: data/frameworks.yaml's {table[f]} profile")
                return


def _fsdp_accumulation(out: ConfigRead) -> None:
    """Under FSDP with gradient accumulation, how the config's trainer reduces the gradients: its
    framework's `grad_accum_sync` (data/frameworks.yaml, with its source), stated where it is no_sync
    (every GPU holds the unsharded gradients until the last micro-batch) unless a file says otherwise
    (accelerate's sync_each_batch)."""
    from tuneplan.specs.framework import get_framework

    if not str(out.value("sharding", "")).startswith("fsdp") or (out.value("grad_accum") or 1) <= 1:
        return
    name = next((FORMAT_FRAMEWORKS[f] for f in out.formats if f in FORMAT_FRAMEWORKS), None)
    if name is not None and get_framework(name).grad_accum_sync == "no-sync":
        out.assume("grad_accum_sync", "no-sync", out.files[0] if out.files else "",
                   f"{name} runs every micro-batch but the last under FSDP's no_sync (data/frameworks.yaml)")


def finish(out: ConfigRead) -> None:
    _framework(out)
    _unfrozen_layers(out)
    _global_batch(out)
    _fsdp_accumulation(out)


def fill_work(job: dict, out: ConfigRead | None = None) -> list[str]:
    """Fill `examples` when neither the config nor the flags give the data size: max_steps x the global
    batch when a max_steps is stated, else `DEFAULT_STEPS` steps. Returns the assumptions made."""
    if any(job.get(k) is not None for k in ("examples", "tokens")):
        return []
    mb, ga = job.get("micro_batch", 4), job.get("grad_accum", 1)
    dp = job.get("gpus", 1) // max(1, job.get("tp", 1) * job.get("pp", 1) * job.get("cp", 1))
    steps = out.value("max_steps") if out is not None else None
    batch = mb * ga * max(1, dp)
    if steps:
        job["examples"] = float(steps * batch)
        job["epochs"] = 1.0
        return [f"Work: max_steps {steps} x global batch {batch} = {steps * batch:,} samples (the config's "
                "max_steps, one pass)."]
    job["examples"] = float(DEFAULT_STEPS * batch)
    return [f"Work: the config states no dataset size, so the estimate is for {DEFAULT_STEPS:,} optimizer steps "
            f"per epoch ({DEFAULT_STEPS * batch:,} samples of the global batch {batch}); pass --examples or "
            "--tokens for your data."]
