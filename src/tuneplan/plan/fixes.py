"""When a configuration does not fit: the changes that would make it fit, cheapest first.

Each candidate change is evaluated with the same estimator (memory and step time); the ones that
fit are ranked by GPU-seconds per sample, so "the cheapest change that makes the run fit" comes
first."""

from __future__ import annotations

from tuneplan.errors import InputError
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import JobSpec
from tuneplan.specs.model import ModelSpec


def _candidates(job: JobSpec) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    if job.micro_batch > 1:
        for mb in sorted({max(1, job.micro_batch // f) for f in (2, 4, 8, 16, 64)}, reverse=True):
            if mb < job.micro_batch:
                ga = job.grad_accum * max(1, job.micro_batch // mb)
                out.append((f"micro-batch {mb} with grad-accum {ga} (same global batch)",
                            {"micro_batch": mb, "grad_accum": ga}))
    if not job.grad_ckpt:
        out.append(("gradient checkpointing (--grad-ckpt)", {"grad_ckpt": True}))
    if job.optimizer == "adamw" and job.method in ("full", "freeze"):
        out.append(("8-bit AdamW (--optimizer adamw-8bit)", {"optimizer": "adamw-8bit"}))
    if job.method in ("full", "freeze"):
        out.append(("LoRA instead of full fine-tuning (--method lora)", {"method": "lora"}))
    if job.method in ("full", "freeze", "lora", "dora", "alora"):
        out.append(("QLoRA: 4-bit NF4 base weights (--method qlora)", {"method": "qlora", "quant": None}))
    if job.gpus > 1 and job.sharding in ("ddp", "none", "zero1", "zero2"):
        out.append((f"FSDP / ZeRO-3 over the {job.gpus} GPUs (--sharding fsdp)", {"sharding": "fsdp"}))
    for g in (2, 4, 8, 16, 32, 64):
        if g > job.gpus:
            nodes = max(1, g // 8) if g > 8 else 1
            out.append((f"{g} GPUs ({nodes} node{'s' if nodes > 1 else ''}) with FSDP "
                        f"(--gpus {g} --nodes {nodes} --sharding fsdp)",
                        {"gpus": g, "nodes": nodes, "sharding": "fsdp"}))
    out.append(("CPU offload of parameters and optimizer states (--sharding zero3-offload)",
                {"sharding": "zero3-offload"}))
    return out


def suggest_fixes(model: ModelSpec, gpu: GPUSpec, job: JobSpec, seq_len: int, estimator,
                  limit: int = 3) -> list[str]:
    """Up to `limit` single changes that make the run fit, cheapest (GPU-seconds per sample) first,
    combined with gradient checkpointing / smaller micro-batches when alone they are not enough."""
    from tuneplan.physics.terms import build_arrays

    fits: list[tuple[float, str]] = []
    base = job.model_dump()
    combos = _candidates(job)
    # second-order: each change plus micro-batch 1 and checkpointing
    extra = [(f"{d} + micro-batch 1 + gradient checkpointing",
              {**ch, "micro_batch": 1, "grad_ckpt": True,
               "grad_accum": job.grad_accum * job.micro_batch}) for d, ch in combos if "micro_batch" not in ch]
    for desc, change in combos + extra:
        try:
            j = JobSpec(**{**base, **change})
        except (ValueError, InputError):
            continue
        try:
            a = build_arrays([(model, gpu, j, seq_len)], getattr(estimator, "constants", None))
        except InputError:
            continue
        out = estimator.predict_arrays(a)
        if bool(out["fits"][0]):
            gpu_s_per_sample = float(out["step_s"][0]) * j.gpus / j.global_batch
            fits.append((gpu_s_per_sample, f"{desc}: {float(out['memory_gib'][0]):.1f} GiB per GPU, "
                                           f"{gpu_s_per_sample * 1000:.1f} GPU-ms per sample"))
    fits.sort(key=lambda t: t[0])
    seen: list[str] = []
    for _, s in fits:
        if s not in seen:
            seen.append(s)
    if not seen:
        need = ("even the frozen weights do not fit; use a GPU with more memory or more GPUs with "
                "tensor parallelism")
        return [need]
    return seen[:limit]
