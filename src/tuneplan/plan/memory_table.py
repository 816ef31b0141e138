"""Memory per GPU of one model under each fine-tuning method and precision, and which common GPUs
it fits on: the "will it fit?" table (`tuneplan memory MODEL`), like accelerate's estimate-memory
but for training (weights, gradients, optimizer states, activations, logits, allocator, CUDA context).

Every cell is the same estimator's memory that `tuneplan estimate` gives for that method on that
GPU (the shipped calibration's, the learned correction included), in one vectorised call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneplan.errors import InputError
from tuneplan.plan.fixes import FULL_WEIGHT_METHODS

COMMON_GPUS = ("RTX4090-24GB", "L4-24GB", "RTX5090-32GB", "L40S-48GB", "A100-SXM4-40GB", "A100-SXM4-80GB",
               "H100-SXM5-80GB", "H200-SXM-141GB", "B200-180GB", "MI300X-192GB")
"""The GPUs the table checks by default: the consumer, workstation and data-centre parts most
fine-tuning runs on, smallest memory first (catalog names, `tuneplan gpus`)."""
REFERENCE_GPU = "H100-SXM5-80GB"
"""The GPU whose memory figures the table prints (the CUDA context and allocator are the same order on
every part; each GPU's own fit is computed on that GPU)."""
DEFAULT_METHODS = ("full", "freeze", "lora", "dora", "qlora", "gptq-lora")
DEFAULT_PRECISIONS = ("bf16", "fp32")
DEFAULT_SEQ_LEN = 2048
"""Tokens per sample when not given: a common SFT length (LLaMA-Factory's cutoff_len default 2048)."""
DEFAULT_MICRO_BATCH = 1
"""Samples per GPU when not given: the smallest batch, so the table says whether the model fits at all."""
QUANTISED_METHODS = ("qlora", "gptq-lora", "loftq")


@dataclass
class MemoryTable:
    model: str
    seq_len: int
    micro_batch: int
    gpus_per_run: int
    reference_gpu: str
    gpus: list[tuple[str, float]]  # (name, GiB) checked
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "seq_len": self.seq_len, "micro_batch": self.micro_batch,
                "gpus_per_run": self.gpus_per_run, "reference_gpu": self.reference_gpu,
                "gpus_checked": [{"name": n, "memory_gib": m} for n, m in self.gpus], "rows": self.rows,
                "notes": self.notes}


def _variants(methods: list[str], precisions: list[str]) -> list[tuple[str, str, dict[str, Any], str]]:
    """(method, precision, job fields, label) for each combination that can run; a 16-bit full or freeze
    fine-tuning twice: over an fp32 master copy (mixed precision) and trained in place."""
    out = []
    for m in methods:
        for p in precisions:
            if m in QUANTISED_METHODS and p == "fp32":
                continue  # 4-bit bases compute in 16 bits
            if m in FULL_WEIGHT_METHODS and p in ("bf16", "fp16"):
                out.append((m, p, {"master_weights": "fp32"}, f"{p} mixed precision, fp32 master"))
                out.append((m, p, {"master_weights": "none"}, f"{p} weights trained in place"))
            elif m in QUANTISED_METHODS:
                out.append((m, p, {}, f"{p} compute, {'4-bit NF4' if m != 'gptq-lora' else 'GPTQ int4'} base"))
            else:
                out.append((m, p, {}, p))
    return out


def memory_table(model: Any, *, methods: list[str] | None = None, precisions: list[str] | None = None,
                 seq_len: int | None = None, micro_batch: int | None = None, on: list[str] | None = None,
                 calibration: Any = None, **job_fields: Any) -> MemoryTable:
    """Memory per GPU of `model` for each method x precision at `seq_len` and `micro_batch`, on the
    reference GPU, and the GPUs of `on` (default COMMON_GPUS) each combination fits on. Other job
    fields (grad_ckpt, optimizer, gpus, nodes, sharding, lora_rank...) as JobSpec's."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.physics.terms import build_arrays
    from tuneplan.specs.gpu import resolve_gpu
    from tuneplan.specs.job import METHODS, PRECISIONS, make_job
    from tuneplan.specs.resolve import resolve_model_arg

    mspec = resolve_model_arg(model)
    methods = list(dict.fromkeys(methods or DEFAULT_METHODS))
    precisions = list(dict.fromkeys(precisions or DEFAULT_PRECISIONS))
    for name, given, allowed in (("method", methods, METHODS), ("precision", precisions, PRECISIONS)):
        for v in given:
            if v not in allowed:
                raise InputError(f"{name}s", f"unknown {name} '{v}'", allowed)
    seq = int(seq_len or DEFAULT_SEQ_LEN)
    mb = int(micro_batch or DEFAULT_MICRO_BATCH)
    gspecs = [resolve_gpu(g) for g in dict.fromkeys(on or COMMON_GPUS)]
    gspecs.sort(key=lambda g: g.memory_gib)
    ref = resolve_gpu(REFERENCE_GPU)
    est = get_estimator("tuneplan", calibration)
    fixed = {k: v for k, v in job_fields.items() if v is not None}
    variants = _variants(methods, precisions)
    if not variants:
        raise InputError("precisions", "no method runs at these precisions (4-bit bases compute in bf16 or fp16)")
    def fields(m: str) -> dict:
        return {**fixed, "optimizer": "adamw"} if fixed.get("optimizer") == "galore-adamw" and m != "full" else fixed

    jobs = [make_job(method=m, precision=p, micro_batch=mb, seq_len=seq, **{**fields(m), **extra})
            for m, p, extra, _ in variants]
    cols = [ref, *gspecs]
    a = build_arrays([(mspec, g, j, seq) for j in jobs for g in cols], est.constants)
    out = est.predict_arrays(a)
    from tuneplan.physics.terms import usable_memory_gib  # the fit's capacity: less inline ECC on GDDR parts

    mem = np.asarray(out["memory_gib"], dtype=float).reshape(len(jobs), len(cols))
    fits = np.asarray(out["fits"], dtype=bool).reshape(len(jobs), len(cols))
    rows = []
    for i, (m, p, extra, label) in enumerate(variants):
        on = [g.name for g, ok in zip(gspecs, fits[i, 1:], strict=True) if ok]
        rows.append({"method": m, "precision": p, "weights": label, "master_weights": extra.get("master_weights"),
                     "memory_per_gpu_gib": float(mem[i, 0]),
                     "memory_by_gpu_gib": {g.name: float(v) for g, v in zip(gspecs, mem[i, 1:], strict=True)},
                     "fits_on": on, "smallest_fit": on[0] if on else None})
    j0 = jobs[0]
    step = f" ({j0.optimizer_impl} step)" if j0.optimizer == "adamw" else ""
    notes = [f"Memory per GPU as nvidia-smi shows it, at sequence length {seq} and micro-batch {mb}"
             f"{' with activation checkpointing (' + j0.checkpointing + ')' if j0.grad_ckpt else ', no activation checkpointing'}"
             f", {j0.optimizer}{step}, {j0.gpus} GPU(s) per run ({j0.sharding}); figures on {ref.name}, fit checked on "
             "each GPU itself.",
             "Longer sequences and larger micro-batches add activations and logits: `tuneplan estimate --model M "
             "--gpu G --seq-len S --micro-batch B` for one case, `tuneplan curve` for the whole range."]
    if fixed.get("optimizer") == "galore-adamw" and any(m != "full" for m in methods):
        notes.append("GaLore-AdamW projects the full weights' gradients: the full rows use it "
                     f"(rank {jobs[0].galore_rank}), the other methods AdamW.")
    cached = np.asarray(out.get("variable_shape_gib", np.zeros(mem.size)), dtype=float).reshape(mem.shape)
    if bool(np.any(cached > 0)):
        notes.append("Each batch is padded to its longest example, so the nvidia-smi figure holds blocks cached for "
                     "other batch shapes (up to " + f"{cached.max():.1f}" + " GiB here); torch frees them before it "
                     "runs out, so a GPU smaller than the figure can still fit it (the fit is checked without them).")
    notes += [g.resolved_as + "." for g in gspecs if g.resolved_as]
    return MemoryTable(model=mspec.name, seq_len=seq, micro_batch=mb, gpus_per_run=j0.gpus, reference_gpu=ref.name,
                       gpus=[(g.name, usable_memory_gib(g)) for g in gspecs], rows=rows, notes=notes)
