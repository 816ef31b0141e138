"""When a configuration does not fit: the changes that would make it fit, cheapest first.

Each candidate change is evaluated with the same estimator (memory and step time); the ones that
fit are ranked by GPU-seconds per sample, so "the cheapest change that makes the run fit" comes
first. Each suggestion names the flags to pass; one kind of change (a smaller micro-batch, more
GPUs, ...) is offered once, at its cheapest, and a combination is offered only when no part of it
alone already fits more cheaply."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tuneplan.errors import InputError
from tuneplan.plan.space import GPUS_PER_NODE
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import JobSpec
from tuneplan.specs.model import ModelSpec

FULL_WEIGHT_METHODS = ("full", "freeze")
LORA_METHODS = ("full", "freeze", "lora", "dora", "alora")
GPU_COUNTS = (2, 4, 8, 16, 32, 64)
"""GPU counts offered as a fix (one node holds GPUS_PER_NODE)."""


@dataclass(frozen=True)
class Fix:
    """One change to a job: what it is in words, the flags that make it, the JobSpec fields it sets,
    and its kinds (one suggestion per set of kinds)."""

    words: str
    flags: str
    change: dict
    kinds: frozenset[str]

    def plus(self, other: Fix) -> Fix:
        return Fix(f"{self.words} + {other.words}", f"{self.flags} {other.flags}", {**self.change, **other.change},
                   self.kinds | other.kinds)


def _fix(words: str, flags: str, change: dict, kind: str | None = None) -> Fix:
    """A single change; its kind is the first field it sets unless named."""
    return Fix(words, flags, change, frozenset({kind or next(iter(change))}))


def _batch_fixes(job: JobSpec) -> list[Fix]:
    out = []
    for mb in sorted({max(1, job.micro_batch // f) for f in (2, 4, 8, 16, 64)}, reverse=True):
        if mb < job.micro_batch:
            ga = job.grad_accum * max(1, job.micro_batch // mb)
            out.append(_fix(f"micro-batch {mb} with grad-accum {ga}, the same global batch",
                            f"--micro-batch {mb} --grad-accum {ga}", {"micro_batch": mb, "grad_accum": ga}))
    return out


def _scale_fixes(job: JobSpec) -> list[Fix]:
    out = []
    if job.gpus > 1 and job.sharding in ("ddp", "none", "zero1", "zero2"):
        out.append(_fix(f"FSDP / ZeRO-3 over the {job.gpus} GPUs", "--sharding fsdp", {"sharding": "fsdp"}))
    for g in GPU_COUNTS:
        if g > job.gpus:
            nodes = max(1, g // GPUS_PER_NODE)
            out.append(_fix(f"{g} GPUs ({nodes} node{'s' if nodes > 1 else ''}) with FSDP",
                            f"--gpus {g} --nodes {nodes} --sharding fsdp", {"gpus": g, "nodes": nodes, "sharding": "fsdp"}))
    out.append(_fix("CPU offload of parameters and optimizer states", "--sharding zero3-offload",
                    {"sharding": "zero3-offload"}, "offload"))
    return out


def _candidates(job: JobSpec) -> list[Fix]:
    out = _batch_fixes(job)
    full_weights, adamw = job.method in FULL_WEIGHT_METHODS, job.optimizer == "adamw"
    if not job.grad_ckpt:
        out.append(_fix("gradient checkpointing", "--grad-ckpt", {"grad_ckpt": True}))
    if adamw and full_weights and job.optimizer_impl == "foreach":
        out.append(_fix("a fused AdamW step (no foreach temporary)", "--optimizer-impl fused", {"optimizer_impl": "fused"}))
    if job.sharding.startswith("fsdp") and job.grad_accum > 1 and job.grad_accum_sync == "no-sync":
        out.append(_fix("FSDP gradients reduced every micro-batch (accelerate's sync_each_batch)",
                        "--grad-accum-sync every-micro-batch", {"grad_accum_sync": "every-micro-batch"}))
    if job.sharding.startswith("fsdp") and not full_weights and job.fsdp_adapter_wrap == "with-block":
        out.append(_fix("adapters in their own FSDP units (peft's fsdp_auto_wrap_policy, or FSDP2)",
                        "--fsdp-adapter-wrap separate", {"fsdp_adapter_wrap": "separate"}))
    if adamw and full_weights:
        out.append(_fix("8-bit AdamW", "--optimizer adamw-8bit", {"optimizer": "adamw-8bit"}))
    if adamw and job.method == "full":
        out.append(_fix("GaLore-AdamW: the block linears' moments at rank 128", "--optimizer galore-adamw",
                        {"optimizer": "galore-adamw"}))
    if full_weights:
        out.append(_fix("LoRA instead of full fine-tuning", "--method lora", {"method": "lora"}))
    if job.method in LORA_METHODS:
        out.append(_fix("QLoRA: 4-bit NF4 base weights", "--method qlora", {"method": "qlora", "quant": None}))
    return out + _scale_fixes(job)


def _combinations(job: JobSpec, singles: list[Fix]) -> list[Fix]:
    """Each change with plain gradient checkpointing, and with micro-batch 1 plus checkpointing."""
    if job.grad_ckpt and job.micro_batch == 1:
        return []
    ckpt = _fix("gradient checkpointing", "--grad-ckpt", {"grad_ckpt": True})
    mb1 = _fix("micro-batch 1", f"--micro-batch 1 --grad-accum {job.grad_accum * job.micro_batch}",
               {"micro_batch": 1, "grad_accum": job.grad_accum * job.micro_batch})
    out = []
    for f in singles:
        if "grad_ckpt" in f.kinds:
            continue
        if not job.grad_ckpt:
            out.append(f.plus(ckpt))
        if "micro_batch" not in f.kinds and job.micro_batch > 1:
            out.append(f.plus(mb1).plus(ckpt) if not job.grad_ckpt else f.plus(mb1))
    return out


def _evaluate(model: ModelSpec, gpu: GPUSpec, job: JobSpec, seq_len: int, estimator,
              fixes: list[Fix]) -> list[tuple[float, float, Fix]]:
    """(GPU-seconds per sample, GiB per GPU, fix) of each fix that makes the run fit."""
    from tuneplan.physics.terms import build_arrays

    base = asdict(job)
    fits = []
    for fix in fixes:
        try:
            j = JobSpec(**{**base, **fix.change})
            a = build_arrays([(model, gpu, j, seq_len)], getattr(estimator, "constants", None))
        except (ValueError, InputError):
            continue
        out = estimator.predict_arrays(a)
        if bool(out["fits"][0]):
            fits.append((float(out["step_s"][0]) * j.gpus / j.global_batch, float(out["memory_gib"][0]), fix))
    return fits


NEAR_TIE = 0.01
"""GPU-seconds per sample within this share of the cheapest of a kind of change are a tie, which the change
with fewer GPUs wins (the physics' per-sample cost of FSDP over 8 or 64 GPUs differs by less)."""


def suggest_fixes(model: ModelSpec, gpu: GPUSpec, job: JobSpec, seq_len: int, estimator,
                  limit: int = 3) -> list[str]:
    """Up to `limit` changes that make the run fit, cheapest (GPU-seconds per sample) first, each
    with its flags: single changes, and a change with gradient checkpointing (and micro-batch 1) when
    alone it is not enough. One suggestion per kind of change, at its cheapest; a combination only
    when none of its parts alone fits at a lower cost."""
    singles = _candidates(job)
    fits = sorted(_evaluate(model, gpu, job, seq_len, estimator, singles + _combinations(job, singles)),
                  key=lambda t: t[0])
    chosen: list[tuple[float, float, Fix]] = []
    for cost, _, fix in fits:
        if any(c[2].kinds <= fix.kinds for c in chosen):
            continue  # the same kind of change (or a part of this one) already fits, more cheaply
        if any(t[2].kinds < fix.kinds and t[0] <= cost * (1.0 + NEAR_TIE) for t in fits):
            continue  # a part of this combination alone fits as cheaply
        # of this kind, the smallest job among those as cheap (within NEAR_TIE): 8 GPUs, not 64, at
        # the same GPU-seconds per sample
        ties = [t for t in fits if t[2].kinds == fix.kinds and t[0] <= cost * (1.0 + NEAR_TIE)]
        chosen.append(min(ties, key=lambda t: (t[2].change.get("gpus", job.gpus), t[0])))
    if not chosen:
        return ["even the frozen weights do not fit; use a GPU with more memory, or more GPUs with tensor "
                "parallelism (--tp)"]
    return [f"{fix.words} ({fix.flags}): {gib:.1f} GiB per GPU, {cost * 1000:.1f} GPU-ms per sample"
            for cost, gib, fix in chosen[:limit]]
