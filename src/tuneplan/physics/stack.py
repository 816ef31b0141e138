"""The numbers of the software stack a job runs on, as flat arrays for step.py and memory.py: precision
recipe, the framework's kernels (data/frameworks.yaml), checkpointing, parallel modes, offload, attention
span. Every key has a default (`get`: the generic framework in bf16).
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.ops import ATTENTION_KERNEL_CODES, FLASH_MAX_EFFICIENCY, GPU_GENERATION_CODES
from tuneplan.physics.precision import FP8_RECIPE_CODES, linear_tflops, low_precision_code, ops_by_precision

CKPT_CODES = {"none": 0, "selective": 1, "full": 2, "offload": 3}
CE_CODES = {"none": 0, "chunked": 1, "fused": 2, "bf16": 3}
OFFLOAD_CODES = {"none": 0, "optimizer": 1, "all": 2}

STACK_DEFAULTS = {
    "lowp": 0.0, "lin_peak_flops": np.nan, "bf16_peak_flops": np.nan, "ckpt_code": np.nan, "ckpt_share": 1.0,
    "act_offload": 0.0, "act_offload_layers": 0.0, "ce_code": 0.0, "fused_lora": 0.0, "fused_elementwise": 0.0, "dist_opt": 0.0,
    "fp32_grads": 0.0, "seq_par": 0.0, "tp_overlap": 0.0, "cp_ulysses": 0.0, "vpp": 1.0, "offload_code": 0.0,
    "attn_kernel": 0.0, "gpu_gen": 0.0, "eager_norm_rope": 0.0, "grad_buffers": 1.0, "attn_keys": np.nan, "attn_span": np.nan, "host_bw": np.nan,
    "opt_foreach": 0.0, "accum_no_sync": 0.0, "fsdp": 0.0, "adapters_in_blocks": 0.0, "fp8_recipe": 0.0,
    "etp": np.nan, "nvlink_domain": 0.0, "eval_batch": 0.0, "opt_in_bwd": 0.0, "expandable_segments": 0.0,
}
"""Value of each stack key when an arrays dict lacks it (NaN: derived from other keys in `get`)."""

DERIVED_DEFAULTS = {"lin_peak_flops": ("peak_flops", 1.0), "bf16_peak_flops": ("peak_flops", 1.0),
                    "attn_span": ("seq_len", 1.0), "attn_keys": ("seq_len", 0.5), "etp": ("tp", 1.0)}
"""(key, factor) a stack key defaults to: the peaks, the whole sequence (a causal kernel computes half of
it), and expert tensor parallel = the tensor-parallel degree (Megatron-Core's default)."""


def get(a: dict, key: str) -> np.ndarray:
    """a[key], or its default broadcast to the arrays' length (DERIVED_DEFAULTS; ckpt_code: full where
    grad_ckpt; host_bw NaN: the constants' offload bandwidth)."""
    if key in a:
        return np.asarray(a[key], dtype=float)
    n = np.size(a["micro_batch"])
    if key in DERIVED_DEFAULTS:
        src, factor = DERIVED_DEFAULTS[key]
        return np.asarray(a[src], dtype=float) * factor * np.ones(n)
    if key == "ckpt_code":
        return np.where(np.asarray(a["grad_ckpt"], dtype=float) > 0, 2.0, 0.0) * np.ones(n)
    return np.full(n, float(STACK_DEFAULTS[key]))


def host_bandwidth(a: dict, c) -> np.ndarray:
    """CPU <-> GPU rate per GPU, one direction (B/s), of every host copy: the catalog's host link (Grace
    parts' NVLink-C2C), else the constants' PCIe-class cpu_offload_gbs."""
    bw = get(a, "host_bw")
    return np.where(np.isfinite(bw), bw, c.cpu_offload_gbs * 1e9)


def host_link_words(gpu) -> str:
    """The host link rate an estimate's offload copies are costed at, and where it comes from."""
    gbs = getattr(gpu, "host_link_gbs", 0.0)
    if gbs:
        return f"{gbs:g} GB/s each way per GPU ({gpu.name}'s host link, data/gpus.csv host_link_gbs_bidir)"
    from tuneplan.physics.constants import DEFAULT_CONSTANTS

    return (f"{DEFAULT_CONSTANTS.cpu_offload_gbs:g} GB/s each way (tuneplan's PCIe 4 x16 figure, cpu_offload_gbs; "
            f"data/gpus.csv gives no host link for {gpu.name})")


def gpu_generation(gpu) -> int:
    arch = f"{getattr(gpu, 'architecture', '')} {getattr(gpu, 'name', '')}".lower()
    if getattr(gpu, "vendor", "NVIDIA") not in ("", "NVIDIA") and "nvidia" not in arch:
        return 2
    for word, code in GPU_GENERATION_CODES.items():
        if word in arch:
            return code
    for prefix, code in (("h1", 1), ("h2", 1), ("gh", 1), ("b1", 1), ("b2", 1), ("b3", 1), ("gb", 1),
                         ("a1", 0), ("a4", 0), ("a6", 0), ("l4", 0), ("rtx", 0), ("t4", 0), ("v1", 0)):
        if getattr(gpu, "name", "").lower().startswith(prefix):
            return code
    return 2


def attention_spans(model, seq_len: int) -> tuple[float, float]:
    """(mean keys per query a causal kernel computes, mean attended span) over the attention layers (the
    model's `attention_spans(seq_len)` hook where it has sliding-window layers, else the whole sequence)."""
    fn = getattr(model, "attention_spans", None)
    spans = list(fn(seq_len)) if callable(fn) else []
    if not spans:
        return 0.5 * seq_len, float(seq_len)
    s = np.minimum(np.asarray(spans, dtype=float), seq_len)
    keys = np.where(s < seq_len, s, 0.5 * seq_len)
    return float(keys.mean()), float(s.mean())


def stack_numbers(model, gpu, job, seq_len: int, with_ckpt: bool = True) -> dict[str, float]:
    """The stack's arrays for one configuration (see the module docstring); `with_ckpt=False` leaves the
    checkpointing mode to the arrays' grad_ckpt (the planner's grid axis: full or none)."""
    from tuneplan.specs.framework import get_framework

    fw = get_framework(job.framework)
    code = low_precision_code(job.precision)
    lin, _note = linear_tflops(gpu, job.precision) if code else (gpu.tflops(job.precision), None)
    bf16 = gpu.tflops("bf16") if job.precision != "fp32" else gpu.tflops("fp32")
    keys, span = attention_spans(model, seq_len)
    kernel = "eager" if not job.flash_attn else fw.attention
    seq_par = job.sequence_parallel if job.sequence_parallel is not None else fw.sequence_parallel
    # --fused-ce: a fused linear + cross-entropy (Liger, Cut Cross-Entropy); --no-fused-ce: torch's loss;
    # a trainer may run another loss under context / sequence parallelism (cp_cross_entropy)
    kind = fw.cp_cross_entropy if job.cp > 1 and fw.cp_cross_entropy else fw.cross_entropy
    ce = CE_CODES[kind] if job.fused_ce is None else (CE_CODES["fused"] if job.fused_ce else 0)
    out = {
        "lowp": float(code), "lin_peak_flops": lin * 1e12, "bf16_peak_flops": bf16 * 1e12,
        "ckpt_code": float(CKPT_CODES[job.checkpointing]), "ckpt_share": 1.0 / job.ckpt_every,
        "act_offload": float(job.act_offload), "act_offload_layers": float(job.act_offload_layers), "ce_code": float(ce), "fused_lora": float(fw.fused_lora),
        "fused_elementwise": float(fw.fused_elementwise), "eager_norm_rope": float(fw.eager_norm_rope),
        # DeepSpeed ZeRO (--sharding zero*) keeps contiguous gradient partitions whatever the trainer
        "grad_buffers": float(fw.grad_buffers or job.sharding.startswith("zero")),
        "dist_opt": float(fw.distributed_optimizer),
        "fp32_grads": float(fw.fp32_grads if job.fp32_grads is None else job.fp32_grads), "seq_par": float(bool(seq_par) and job.tp > 1),
        "tp_overlap": float(fw.tp_comm_overlap), "cp_ulysses": float(job.cp_mode == "ulysses"),
        "vpp": float(job.vpp), "etp": float(job.expert_tp), "offload_code": float(OFFLOAD_CODES[job.offload]),
        "attn_kernel": float(ATTENTION_KERNEL_CODES[kernel]), "gpu_gen": float(gpu_generation(gpu)),
        "attn_keys": keys, "attn_span": span,
        "host_bw": float(getattr(gpu, "host_link_gbs", 0.0) or 0.0) * 1e9 or np.nan,
        "opt_foreach": float(job.optimizer_impl == "foreach"),
        # FSDP under accumulation with no_sync (physics/fsdp.py accumulated_unsharded); the planner's grid
        # sets `fsdp` per sharding it tries
        "accum_no_sync": float(job.grad_accum_sync == "no-sync"), "fsdp": float(job.sharding.startswith("fsdp")),
        "adapters_in_blocks": float(job.fsdp_adapter_wrap == "with-block"),
        "fp8_recipe": float(FP8_RECIPE_CODES[job.fp8_recipe or fw.fp8_recipe]),
        # phases and allocator (physics/memory.py): the evaluation pass's batch (0: no evaluation), the
        # optimizer inside the backward, expandable allocator segments
        "eval_batch": float(job.eval_batch() if job.eval_every > 0 else 0),
        "opt_in_bwd": float(job.optimizer_in_bwd),
        "expandable_segments": float(fw.expandable_segments if job.expandable_segments is None
                                     else job.expandable_segments),
    }
    if not with_ckpt:
        out.pop("ckpt_code")
    return out


OPTIMIZER_IMPL_WORDS = {
    "foreach": "torch's multi-tensor path holds one second moment for all trained weights at the step, next to "
               "the gradients and both moments",
    "fused": "one fused kernel per parameter group, no temporary at the step",
    "for-loop": "one parameter at a time, no temporary beyond one tensor's"}
"""What each AdamW step implementation holds (physics/memory.py optimizer_step_bytes), for the assumptions."""
GRAD_ACCUM_SYNC_WORDS = {
    "every-micro-batch": "each micro-batch's backward reduce-scatters its gradients, a GPU keeps only its shard",
    "no-sync": "no_sync until the last micro-batch, so every GPU holds the unsharded gradients of all trained "
               "weights through the backward (reduce-scattered once a step; --grad-accum-sync every-micro-batch, "
               "accelerate's sync_each_batch, keeps the shards)"}
"""What each FSDP accumulation mode holds (physics/fsdp.py accumulated_unsharded), for the assumptions."""
FSDP_ADAPTER_WRAP_WORDS = {
    "separate": "the adapters in their own units (peft's fsdp_auto_wrap_policy, FSDP2), the frozen weights carry no gradient",
    "with-block": "the adapters inside each block's FSDP1 flat parameter, whose whole gradient is allocated: "
                  "gradient memory as if the blocks' frozen weights were trained"}
"""Where FSDP puts the adapters (physics/fsdp.py flat_parameter_gradients), for the assumptions."""


PROFILE_SETTINGS = (
    ("grad_ckpt", "grad_ckpt", "activation checkpointing"),
    ("micro_batch", "micro_batch", "micro-batch"),
    ("adapter_dtype", "adapter_fp32", "adapter dtype"),
    ("padding", "padding", "padding of unpacked samples"),
    ("master_weights", "master_weights", "fp32 master weights"),
)
"""(JobSpec field, frameworks.yaml key whose source says it, words) of the job settings a framework
profile decides when the job leaves them out (specs/job.py _framework_defaults)."""


def profile_defaults(fw, job) -> list[str]:
    """One line per job setting that has the framework profile's value, with the profile's source."""
    want = {"grad_ckpt": fw.grad_ckpt, "micro_batch": fw.micro_batch,
            "adapter_dtype": "fp32" if fw.adapter_fp32 else "compute", "padding": fw.padding,
            "master_weights": None if fw.master_weights == "auto" else fw.master_weights == "fp32"}
    have = {"grad_ckpt": job.grad_ckpt, "micro_batch": job.micro_batch, "adapter_dtype": job.adapter_dtype,
            "padding": job.padding,
            "master_weights": job.fp32_master() if job.method in ("full", "freeze") else None}
    relevant = {"adapter_dtype": job.is_lora_family, "padding": not job.packing}
    out = []
    for field, key, words in PROFILE_SETTINGS:
        if want[field] is None or have[field] != want[field] or not relevant.get(field, True):
            continue
        shown = {True: "on", False: "off"}.get(have[field], have[field]) if isinstance(have[field], bool) else have[field]
        src = fw.sources.get(key) or fw.sources.get("all", "data/frameworks.yaml")
        out.append(f"{words[0].upper() + words[1:]}: {shown}, {fw.label}'s default ({src}).")
    return out


FP8_RECIPE_WORDS = {
    "te": "each linear weight kept in bf16 with its fp8 copy and transpose cached for the step (4 bytes per weight, "
          "frozen ones too)",
    "torchao": "each linear weight kept in bf16 and cast to fp8 inside each GEMM, no copy held (2 bytes per weight)",
    "fp8-params": "each linear weight held in fp8 with its fp8 transpose (2 bytes per weight), the fp32 master in "
                  "the optimizer"}
"""What each fp8 recipe stores (physics/precision.py FP8_RECIPE_WEIGHT_BYTES), for the assumptions."""


def _whose(fw, key: str, is_default: bool, fallback: str | None = None) -> str:
    """Where a stack setting's value came from: the framework profile's default with its source, or as set."""
    if not is_default:
        return "as set"
    src = fw.sources.get(key, fallback)
    return f"{fw.label}'s default: {src}" if src else f"{fw.label}'s default"


def phase_assumptions(fw, job) -> list[str]:
    """Assumption lines of the memory phases and allocator settings, each with where its value came from
    (physics/memory.py eval_pass_bytes, optimizer_in_backward_bytes, variable_shape_bytes)."""
    from tuneplan.specs.job import ZERO_FP32_MASTER

    out = []
    if job.method in ("full", "freeze") and job.sharding.startswith("zero") and job.master_weights in (None, "auto") \
            and fw.master_weights == "none":
        out.append(f"fp32 master weights and moments under DeepSpeed ZeRO, though {fw.label} trains 16-bit weights in "
                   f"place on its own ({ZERO_FP32_MASTER}).")
    if job.fp32_grads is not None and job.fp32_grads != fw.fp32_grads and job.method in ("full", "freeze"):
        out.append(f"Gradients {'in an fp32 buffer' if job.fp32_grads else 'in the compute dtype'} (as set; "
                   f"{fw.label}'s default: {'fp32' if fw.fp32_grads else 'the compute dtype'}).")
    if job.eval_every > 0:
        b = job.eval_batch()
        whose = (_whose(fw, "eval_batch", not job.eval_batch_size) if job.eval_batch_size or fw.eval_batch else
                 "the training micro-batch: the framework states no evaluation batch")
        out.append(f"Evaluation pass every {job.eval_every} steps at {b} sample{'s' if b > 1 else ''} per GPU ({whose}): "
                   "forward only, one layer's tensors and the batch's logits beside the weights and optimizer "
                   "states; its peak is a phase of the step's (memory breakdown: eval_pass).")
    if job.optimizer_in_bwd:
        out.append("Optimizer in the backward (--optimizer-in-bwd, torchtune optimizer_in_bwd): each parameter is "
                   "stepped and its gradient freed as soon as it is ready, so one gradient (the largest trained "
                   "tensor's) is alive at a time and the step has no peak of its own.")
    exp = fw.expandable_segments if job.expandable_segments is None else job.expandable_segments
    if exp:
        out.append(f"Allocator expandable_segments ({_whose(fw, 'expandable_segments', job.expandable_segments is None)}): one growing segment, so batches of other lengths "
                   "cache no blocks of their own in the reserved peak.")
    return out


def stack_assumptions(model, gpu, job) -> list[str]:
    """What the estimate assumed about the stack: the framework's kernels, which operations run at which
    precision (and any fallback), the checkpointing and offload modes, the parallel modes."""
    from tuneplan.specs.framework import get_framework

    fw = get_framework(job.framework)
    given = {"generic": " (the neutral stack: no framework's defaults).",
             "hf-trainer": " (--framework hf-trainer, also taken when no framework is given: the HF Trainer's current "
                           "defaults; data/frameworks.yaml, each with its source)."}
    out = [fw.summary().capitalize() + given.get(fw.name, " (--framework: data/frameworks.yaml, each with its "
                                                          "source).")]
    out += profile_defaults(fw, job)
    if job.optimizer == "adamw":
        whose = _whose(fw, "optimizer_impl", job.optimizer_impl == fw.optimizer_impl, "torch.optim.AdamW on CUDA")
        out.append(f"AdamW step {job.optimizer_impl} ({whose}): " + OPTIMIZER_IMPL_WORDS[job.optimizer_impl] + ".")
    if job.sharding.startswith("fsdp") and job.grad_accum > 1 and job.sharding_kind() != "none":
        whose = _whose(fw, "grad_accum_sync", job.grad_accum_sync == fw.grad_accum_sync)
        out.append(f"FSDP gradient accumulation {job.grad_accum_sync} ({whose}): "
                   + GRAD_ACCUM_SYNC_WORDS[job.grad_accum_sync] + ".")
    if (job.sharding.startswith("fsdp") and job.sharding_kind() not in ("none", "zero1")
            and job.method not in ("full", "freeze")):
        whose = _whose(fw, "fsdp_adapter_wrap", job.fsdp_adapter_wrap == fw.fsdp_adapter_wrap)
        out.append(f"FSDP adapter units {job.fsdp_adapter_wrap} ({whose}): " + FSDP_ADAPTER_WRAP_WORDS[job.fsdp_adapter_wrap] + ".")
    if low_precision_code(job.precision) == 1:
        recipe = job.fp8_recipe or fw.fp8_recipe
        whose = _whose(fw, "fp8_recipe", recipe == fw.fp8_recipe, "Transformer Engine, the common fp8 path")
        out.append(f"fp8 recipe {recipe} ({whose}): {FP8_RECIPE_WORDS[recipe]}.")
    out += phase_assumptions(fw, job)
    line = ops_by_precision(job.precision, job.base_quant(getattr(model, "quant", "none")))
    if line:
        out.append(line)
    if low_precision_code(job.precision):
        _tf, note = linear_tflops(gpu, job.precision)
        if note:
            out.append(note + ".")
    kernel = "eager" if not job.flash_attn else fw.attention
    gen = gpu_generation(gpu)
    if kernel != "eager":
        k = ATTENTION_KERNEL_CODES[kernel]
        emax = FLASH_MAX_EFFICIENCY.get((0 if k == 3 else k, gen), 0.39) * (0.5 if k == 3 else 1.0)
        out.append(f"Attention in bf16 with {kernel} at up to {emax:.2f} of the bf16 peak (x span/(span+269) x "
                   "head_dim/(head_dim+25.6), FlashAttention papers' curves); causal: half the square.")
    mode = job.checkpointing
    if mode != "none":
        every = f", one layer in {job.ckpt_every}" if job.ckpt_every > 1 else ""
        out.append(f"Activation checkpointing: {mode}{every}.")
    if job.act_offload or job.act_offload_layers or job.offload != "none":
        out.append("Offload: " + ", ".join(x for x in (
            "saved activations to host memory (two layers stay)" if job.act_offload else
            f"saved activations of {job.act_offload_layers} layers per stage to host memory"
            if job.act_offload_layers else "",
            {"optimizer": "optimizer states and master weights on the host (ZeRO-offload)",
             "all": "parameters, gradients and optimizer states on the host"}.get(job.offload, "")) if x)
            + f"; host copies at {host_link_words(gpu)}.")
    if job.tp > 1:
        sp = job.sequence_parallel if job.sequence_parallel is not None else fw.sequence_parallel
        out.append("Sequence parallel: norms and residual activations split over tp." if sp else
                   "No sequence parallel: the norms' activations stay whole on every tensor-parallel rank.")
    if job.cp > 1:
        out.append(f"Context parallel: {'Ulysses all-to-alls' if job.cp_mode == 'ulysses' else 'ring attention, K/V exchange overlapped with attention'}.")
    if job.pp > 1:
        m = job.grad_accum
        out.append(f"Pipeline: {'interleaved, ' + str(job.vpp) + ' virtual stages per rank' if job.vpp > 1 else '1F1B'}; "
                   f"{m} micro-batch{'es' if m > 1 else ''} per step (the gradient accumulation: global batch / "
                   f"(micro-batch x dp)), bubble (pp - 1)/(m x vpp) = {(job.pp - 1) / (m * job.vpp):.1%} of them.")
    domain = getattr(gpu, "nvlink_domain_gpus", 0)
    if job.nodes > 1 and domain > job.gpus_per_node:
        out.append(f"NVLink domain: {gpu.name} joins {domain} GPUs over its {job.gpus_per_node}-GPU nodes "
                   f"(data/gpus.csv); collectives within {min(domain, job.gpus)} consecutive GPUs run at its NVLink "
                   "bandwidth, beyond at the network's.")
    if job.ep > 1:
        etp = job.expert_tp
        edp = job.gpus // job.pp // (job.ep * etp)
        out.append(f"Expert parallel: ep {job.ep} x expert tensor parallel {etp}"
                   f"{' (--tp, Megatron-Core default)' if job.etp is None else ''}, the experts' data parallel "
                   f"{edp}; token dispatch/combine all-to-all over {job.ep * etp} consecutive GPUs "
                   f"({'inside one node' if job.ep * etp <= job.gpus_per_node else 'across nodes'}); routing "
                   "assumed balanced and dropless (no expert rank waits on a busier one, no capacity factor), the "
                   "tokens permuted into expert order and back unfused (megatron-core's default).")
    return out
