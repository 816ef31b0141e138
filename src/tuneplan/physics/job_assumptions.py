"""What a job's settings mean for the figures, said once for every estimate: the settings left at
tuneplan's defaults (method, micro-batch, epochs, LoRA rank and targets), the node count filled in
for more GPUs than one server holds, the adapters' dtype (LoRA family) and the master copy of 16-bit
weights (full and freeze fine-tuning)."""

from __future__ import annotations

from tuneplan.specs.job import JobSpec


def job_assumptions(job: JobSpec) -> list[str]:
    out: list[str] = []
    # the settings the caller left out that no framework filled either: JobSpec's own defaults
    filled = [text for fld, text, applies in (
        ("method", f"method {job.method}", True), ("micro_batch", f"micro-batch {job.micro_batch}", True),
        ("epochs", f"{job.epochs:g} epoch" + "s" * (job.epochs != 1), job.examples is not None or job.tokens is not None),
        ("lora_rank", f"LoRA rank {job.lora_rank}", job.is_lora_family),
        ("lora_targets", f"adapters on {', '.join(job.lora_targets)}", job.is_lora_family))
        if applies and fld not in job.given]
    if filled:
        out.append(f"Not given, tuneplan's defaults: {', '.join(filled)} (--method, --micro-batch, --epochs, "
                   "--lora-rank, --lora-targets set them).")
    if job.nodes > 1 and "nodes" not in getattr(job, "stated", ("nodes",)):
        out.append(f"Nodes not given (--nodes): {job.nodes} nodes of {job.gpus // job.nodes} GPUs, as many GPUs as "
                   "an HGX / DGX server or a cloud 8-GPU instance holds; collectives between nodes run over the "
                   "network (an NVL72 part's NVLink domain spans its nodes).")
    if job.is_lora_family:
        out.append(
            "Adapters in fp32 (peft >= 0.12's default): over 16-bit weights each adapted module keeps an fp32 "
            "copy of its input for backward (--adapter-dtype compute: adapters in the compute dtype, as older "
            "peft, litgpt and Megatron)." if job.adapter_dtype == "fp32" else
            "Adapters in the compute dtype (--adapter-dtype compute): no fp32 copies of their inputs.")
    if job.method in ("full", "freeze") and job.precision in ("bf16", "fp16"):
        out.append(
            f"{job.precision} weights with an fp32 master copy and fp32 optimizer moments (--master-weights fp32)."
            if job.fp32_master() else
            f"{job.precision} weights trained in place: no fp32 master copy, 16-bit optimizer moments "
            "(--master-weights fp32 for mixed precision over fp32 weights).")
    return out
