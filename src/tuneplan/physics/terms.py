"""From specs to numbers: `model_terms` turns (model, method options) into scalars (FLOPs per token,
parameter groups, bytes per weight); `build_arrays` adds the job's and the GPU's into a flat dict of numpy
arrays, so one call of `physics.step_time` / `physics.memory` evaluates one configuration or a million.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tuneplan.errors import InputError
from tuneplan.physics.architecture import mixer_terms, vision_terms, vision_trainable_split
from tuneplan.physics.codes import METHOD_CODES, OPTIMIZER_CODES, SHARDING_CODES
from tuneplan.physics.moe_lora import is_routed_expert, peft_reaches_stacks, stacked_adapters
from tuneplan.physics.peft_methods import MODULE_METHODS, lora_equivalent, method_terms
from tuneplan.physics.precision import FP8_WEIGHT_BYTES
from tuneplan.physics.stack import stack_numbers
from tuneplan.physics.targets import FUSED_TARGETS, normalise_targets
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import LORA_FAMILY, JobSpec
from tuneplan.specs.model import ModelSpec

PEFT_PHYSICS = MODULE_METHODS + ("prefix-tuning", "prompt-tuning", "p-tuning", "ln-tuning", "adapter")
PRECISION_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 2.0, "nvfp4": 2.0, "mxfp4": 2.0}
"""Bytes per weight and activation element at the compute precision. Low-precision training (fp8, fp4)
keeps bf16 weights and activations; its cast copies are physics/precision.py's."""
QUANT_BYTES_PER_WEIGHT = {
    "none": None,  # = precision bytes
    "int8": 1.0 + 4.0 / 4096,  # LLM.int8: int8 weights + fp32 row scales (negligible)
    "nf4": 0.5 + 0.127 / 8,  # QLoRA: 4-bit NF4 + double-quantised absmax (0.127 bit/param, Dettmers 2023)
    "gptq-int4": 0.5 + (16 + 4) / 8 / 128,  # 4-bit + fp16 scale and 4-bit zero per group of 128
    "gptq-int8": 1.0 + (16 + 8) / 8 / 128,  # 8-bit + fp16 scale and 8-bit zero per group of 128
    "awq-int4": 0.5 + (16 + 4) / 8 / 128,  # AWQ: same group-128 layout
    "fp8": FP8_WEIGHT_BYTES,  # fp8 base weights + scales (physics/precision.py)
    # AQLM 1x16 (Egiazarian et al. 2024): 2-bit codes per weight + one 2^16 x 8 fp16 codebook per layer
    # (1 MiB, 1/16 byte per weight of a 4096 x 4096 layer) and fp16 per-channel scales
    "aqlm-2bit": 2.0 / 8 + 2**16 * 8 * 2 / (4096 * 4096) + 2.0 / 4096,
}
DEQUANT_KIND = {"nf4": 1.0, "gptq-int4": 4.0, "awq-int4": 2.0, "int8": 2.0, "aqlm-2bit": 2.0, "fp8": 3.0,
                "gptq-int8": 5.0}
"""Dequantisation traffic per pass: 1 NF4 (bitsandbytes), 2 fused int kernels (AWQ/int8; AQLM's
codebook kernels taken as the same class); 3 fp8 base weights (physics/precision.FP8_DEQUANT_BYTES);
4 and 5 GPTQ 4- and 8-bit unpacked in eager PyTorch ops in the forward (step.gptq_eager_bytes)."""

ROW_PARALLEL = frozenset({"o", "down", "fc2", "out_proj", "dense", "wo", "shared_down", "dense_4h_to_h"})
"""Linears tensor parallelism splits along their input (row-parallel: attention output, MLP down); the
others split along their output (Shoeybi et al., 'Megatron-LM', 2019, Sec. 3)."""


@dataclass(frozen=True)
class ModelTerms:
    """Scalars of one (model, method options) pair. FLOPs are forward, per token, whole model."""

    fwd_block_flops: float  # block matmuls (MoE: active experts, or all in dense mode)
    head_flops: float  # LM head
    attn_flops_per_seq: float  # x seq_len x causal factor = quadratic attention FLOPs per token
    adapter_flops: float  # LoRA-family adapters
    bwd_block_factor: float  # backward / forward FLOPs for block matmuls
    bwd_head_factor: float
    bwd_attn_factor: float
    bwd_layer_fraction: float  # share of layers the backward pass runs through
    recompute_fraction: float  # share of the forward recomputed under gradient checkpointing
    params_total: float
    params_active: float  # per token, forward (MoE dense mode: all experts)
    params_trainable: float
    params_frozen_linear: float  # frozen block matmul weights (quantised in QLoRA/GPTQ)
    params_frozen_other: float  # frozen embeddings, head, norms, non-quantised parts
    params_adapted: float  # weights under a DoRA/LoRA adapter (for DoRA's norm traffic)
    params_expert: float  # expert weights (divided by expert parallelism)
    frozen_linear_bytes: float  # bytes per frozen block weight
    frozen_other_bytes: float
    dequant_bytes: float  # dequantisation kind: 0 none, 1 NF4, 2 AWQ/int8 kernels, 3 fp8, 4/5 GPTQ eager (DEQUANT_KIND)
    optimizer_code: int
    galore_rank: float  # GaLore's projection rank r (physics/memory.py galore_state_elements)
    galore_min_dims: float  # block linears: sum of min(in, out) over every matrix (GaLore's projector, per rank)
    galore_max_dims: float  # block linears: sum of max(in, out) over every matrix (GaLore's moments, per rank)
    params_block_linear: float  # block linear weights (GaLore projects their gradients)
    method_code: int
    n_layers: int
    attn_layers: int
    hidden: int
    intermediate: float  # dense MLP width (per layer average over dense layers)
    moe_intermediate: float
    n_experts: int
    top_k: float  # experts a token passes (dense MoE mode: all)
    moe_layers: int
    kv_dim: int
    q_dim: int
    n_heads: int
    vocab: int
    gated: bool
    lora_rank: float
    adapted_inputs_per_layer: float  # distinct input widths adapted per layer (LoRA dropout copies)
    adapter_io_elements: float  # per token, whole model: inputs + outputs of the adapted modules (elements)
    adapter_in_elements: float  # per token, whole model: inputs of the adapted modules, one per module
    adapted_modules: float  # adapted linear modules in the whole model (each adds its own small kernels)
    weight_bytes_compute: float  # bytes per weight at the compute precision
    # PEFT methods outside the LoRA physics (physics/peft_methods.py; zero for every other method)
    peft_fp32_flops: float = 0.0  # per token, forward: matmuls with weights built in fp32 (backward 2x)
    peft_step_flops: float = 0.0  # per micro-step, forward: weight products in the compute dtype (BOFT)
    peft_step_flops_fp32: float = 0.0  # per micro-step, forward: weights built in fp32 (LoHa, LoKr, HRA...)
    peft_saved_bytes: float = 0.0  # per token, whole model: extra activations kept for backward
    peft_sample_bytes: float = 0.0  # per sample: prefix keys and values
    peft_fixed_act_bytes: float = 0.0  # built weights kept for backward, per micro-step
    peft_buffer_bytes: float = 0.0  # frozen buffers (VeRA's shared projections, BOFT's permutations)
    peft_state_bytes: float = 0.0  # extra training state (AdaLoRA's importance statistics)
    peft_kernels: float = 0.0  # small kernels per micro-step
    virtual_tokens: float = 0.0  # positions prompt/p-tuning prepend to each sample
    prefix_tokens: float = 0.0  # keys/values prefix tuning adds to each attention layer
    # architecture terms (physics.architecture): local attention, MLA, Mamba, vision towers
    attn_local_flops_per_key: float = 0.0  # FLOPs per (query, key) over the sliding / chunked layers
    attn_window: float = 0.0  # tokens a local attention layer sees
    attn_latent_elements: float = 0.0  # MLA compressed q / kv kept per token per attention layer
    ssm_flops: float = 0.0  # Mamba scans + conv1d per token, forward, all Mamba layers
    ssm_act_elements: float = 0.0  # Mamba activations kept per token, all Mamba layers
    dense_mlp_layers: float = -1.0  # layers with a dense MLP
    images: float = 0.0  # images per sample
    image_tokens: float = 0.0  # LM tokens the images add to each sample
    vision_flops_per_sample: float = 0.0  # tower + projector forward FLOPs per sample
    vision_trainable: float = 0.0  # 1 when the tower is trained (backward through it), else 0
    vision_act_bytes_per_sample: float = 0.0  # saved activations per sample when trained (16-bit)
    vision_ckpt_bytes_per_sample: float = 0.0  # the same under gradient checkpointing (layer inputs + one layer)
    params_vision: float = 0.0
    expert_fwd_flops: float = 0.0  # the part of fwd_block_flops in MoE experts' GEMMs (per token)
    linear_io_elements: float = 0.0  # per token, whole model: inputs + outputs of the block linears (elements)
    head_dim: float = 128.0  # attention head dimension (elements)
    gemm_split_width: float = 0.0  # FLOP-weighted width of the block GEMMs' dimension tensor parallel splits
    gemm_full_width: float = 0.0  # FLOP-weighted width of their other (unsplit) dimension
    expert_split_width: float = 0.0  # the same two widths over the MoE experts' GEMMs alone (split by etp)
    expert_full_width: float = 0.0
    # LoRA over MoE experts held as stacked tensors (physics/moe_lora.py; zero otherwise)
    stacked_lora_params: float = 0.0  # expert weights re-materialised as W + BA every forward
    stacked_lora_flops: float = 0.0  # the re-materialising products' FLOPs per micro-step, forward
    stacked_wgrad_flops: float = 0.0  # per token: forward FLOPs of the stacks whose full gradient backward computes
    stacked_lora_stacks: float = 0.0  # adapted stacks in the whole model


def _linear_sums(linears, dense_moe: bool) -> tuple[float, float, float, np.ndarray]:
    """Per token, whole model: forward FLOPs of the block linears, of the experts among them, their input +
    output elements, and FLOP-weighted split / unsplit widths ([all, experts] x [split, unsplit])."""
    fwd = expert = io = 0.0
    widths = np.zeros((2, 2))
    for lin in linears:
        active = lin.count_per_layer if (dense_moe and lin.count_per_layer > 1) else lin.active_per_token
        f = 2.0 * lin.in_features * lin.out_features * active * lin.n_layers
        fwd += f
        io += (lin.in_features + lin.out_features) * active * lin.n_layers
        # Megatron layout: row-parallel linears (o, down) split their input, column-parallel ones their output
        row = lin.name in ROW_PARALLEL
        w = f * np.array([lin.in_features, lin.out_features] if row else [lin.out_features, lin.in_features])
        widths[0] += w
        if lin.count_per_layer > 1:
            expert += f
            widths[1] += w
    return fwd, expert, io, widths


@dataclass
class TrainedSplit:
    """How a method splits the model's weights into trained and frozen ones, and what its adapters add
    (per token, whole model); the part of `ModelTerms` that depends on the method."""

    trainable: float
    frozen_linear: float
    frozen_other: float
    frozen_linear_bytes: float
    dequant: float
    bwd_block: float = 1.0  # backward / forward FLOPs of the block matmuls (frozen: input grads only)
    bwd_head: float = 1.0
    bwd_frac: float = 1.0  # share of layers the backward runs through
    adapter_flops: float = 0.0
    adapted: float = 0.0
    adapted_inputs: float = 0.0
    adapter_io: float = 0.0
    adapter_in: float = 0.0
    adapted_modules: float = 0.0
    fwd_block_delta: float = 0.0  # forward FLOPs the method adds to (or removes from) the block linears
    lora_rank: float = 0.0
    peft: dict[str, float] = field(default_factory=dict)  # ModelTerms fields of physics/peft_methods.py


def _frozen_base(model: ModelSpec, job: JobSpec, pbytes: float, block_linear_params: float):
    """Frozen block linears (maybe quantised), the rest frozen at the compute precision: (frozen linear,
    frozen other, bytes per frozen linear weight, dequantisation kind)."""
    quant = job.base_quant(model.quant)
    qb = QUANT_BYTES_PER_WEIGHT.get(quant)
    return (block_linear_params, float(model.params_total) - block_linear_params,
            pbytes if qb is None else qb, DEQUANT_KIND.get(quant, 0.0))


def _peft_split(model: ModelSpec, job: JobSpec, pbytes: float, block_linear_params: float) -> TrainedSplit:
    """A PEFT method outside the LoRA physics (physics/peft_methods.py: counts, FLOPs and memory)."""
    peft = method_terms(model, job)
    frozen_linear, frozen_other, fl_bytes, dequant = _frozen_base(model, job, pbytes, block_linear_params)
    return TrainedSplit(
        trainable=peft.pop("trainable"), adapter_flops=peft.pop("adapter_flops"), adapted=peft.pop("adapted"),
        adapter_io=peft.pop("adapter_io_elements"), adapter_in=peft.pop("adapter_in_elements"),
        adapted_inputs=peft.pop("adapted_inputs_per_layer"), fwd_block_delta=peft.pop("fwd_block_delta"),
        frozen_linear=frozen_linear, frozen_other=frozen_other, frozen_linear_bytes=fl_bytes, dequant=dequant,
        lora_rank=peft.pop("lora_rank", 0.0), peft=peft)


SPLIT_TARGETS = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}
"""A fused target on a model with separate matrices."""


def lora_target_linears(model: ModelSpec, targets_arg: Sequence[str]) -> list:
    """The block linears a LoRA-family adapter sits on, fused / split names matched to the model's;
    an InputError when no target names a module of the model."""
    linears = model.linears
    targets = normalise_targets(targets_arg)
    all_linear = "all-linear" in targets or "all" in targets
    names = {lin.name for lin in linears}
    expanded: list[str] = []
    for t in targets:
        if t not in names and FUSED_TARGETS.get(t) in names:
            expanded.append(FUSED_TARGETS[t])
        elif t not in names and t in SPLIT_TARGETS:
            expanded.extend(x for x in SPLIT_TARGETS[t] if x in names)
        else:
            expanded.append(t)
    targets = tuple(dict.fromkeys(expanded))
    chosen = [lin for lin in linears if all_linear or lin.name in targets]
    if not all_linear:
        unknown = [t for t in targets if t not in names and t not in ("all-linear", "all")]
        if unknown and not chosen:
            raise InputError("lora-targets", f"no module named {', '.join(unknown)} in {model.name}",
                             sorted(names) + ["all-linear"])
    return chosen


def _lora_split(model: ModelSpec, job: JobSpec, method: str, pbytes: float, block_linear_params: float,
                dense_moe: bool) -> TrainedSplit:
    """LoRA, QLoRA, DoRA...: rank-r adapters on the chosen linears, the base frozen (maybe quantised)."""
    from tuneplan.specs.framework import get_framework

    chosen = lora_target_linears(model, job.lora_targets)
    if get_framework(job.framework).fused_linears:  # one adapter per fused matrix (q|k|v, gate|up)
        groups: dict[tuple, list] = {}
        for lin in chosen:
            groups.setdefault((FUSED_TARGETS.get(lin.name, lin.name), lin.in_features, lin.count_per_layer,
                               lin.n_layers), []).append(lin)
        chosen = [replace(g[0], name=k[0], out_features=sum(x.out_features for x in g)) for k, g in groups.items()]
    r = float(job.lora_rank)
    if r > model.hidden_size:
        raise InputError("lora-rank", f"rank {job.lora_rank} is above {model.name}'s hidden size "
                         f"({model.hidden_size})")
    stacked: dict[str, float] = {}
    if job.moe_experts == "stacked" and model.is_moe:
        chosen, stacked = _stacked_expert_split(model, job, chosen, r, dense_moe)
    adapter_params = adapter_flops = adapted = adapter_io = adapter_in = adapted_modules = 0.0
    widths = set()
    for lin in chosen:
        per = r * (lin.in_features + lin.out_features)
        adapter_params += per * lin.count_per_layer * lin.n_layers
        active = lin.count_per_layer if (dense_moe and lin.count_per_layer > 1) else lin.active_per_token
        adapter_flops += 2.0 * per * active * lin.n_layers
        adapted += lin.params
        adapter_io += (lin.in_features + lin.out_features) * active * lin.n_layers
        adapter_in += lin.in_features * active * lin.n_layers
        adapted_modules += lin.count_per_layer * lin.n_layers
        widths.add((lin.in_features, lin.count_per_layer))
        if method == "dora":
            adapter_params += lin.out_features * lin.count_per_layer * lin.n_layers
    frozen_linear, frozen_other, fl_bytes, dequant = _frozen_base(model, job, pbytes, block_linear_params)
    return TrainedSplit(
        trainable=adapter_params + stacked.pop("trainable", 0.0), frozen_linear=frozen_linear, frozen_other=frozen_other,
        frozen_linear_bytes=fl_bytes, dequant=dequant, adapter_flops=adapter_flops, adapted=adapted,
        adapted_inputs=float(len(widths)), adapter_io=adapter_io, adapter_in=adapter_in,
        adapted_modules=adapted_modules, lora_rank=float(job.lora_rank), peft=stacked)


def _stacked_expert_split(model: ModelSpec, job: JobSpec, chosen: list, r: float, dense_moe: bool):
    """`--moe-experts stacked`: (the chosen linears LoRA's per-module path still adapts, the stacked
    adapters' terms, physics/moe_lora.py); where peft does not reach the stacks, the routed experts and
    router are not adapted at all (an InputError when nothing is left)."""
    experts = [lin for lin in chosen if is_routed_expert(lin)]
    rest = [lin for lin in chosen if not is_routed_expert(lin)]
    if peft_reaches_stacks(model, job.peft_version):
        return rest, stacked_adapters(experts, r, dense_moe)
    rest = [lin for lin in rest if lin.name != "router"]
    if not rest:
        raise InputError("lora-targets", f"with --moe-experts stacked peft does not reach {model.name}'s routed "
                         f"experts or router (model type {model.model_type}): target attention or shared experts",
                         sorted({lin.name for lin in model.linears if not is_routed_expert(lin)} - {"router"}))
    return rest, {}


def _freeze_split(model: ModelSpec, job: JobSpec, pbytes: float, block_linear_params: float) -> TrainedSplit:
    """The last k layers trained in full; backward runs through them only (weight and input grads)."""
    L = max(1, model.n_layers)
    frac = min(job.trainable_layers, L) / L
    trainable = model.params_block * frac
    frozen_linear = block_linear_params * (1 - frac)
    return TrainedSplit(trainable=trainable, frozen_linear=frozen_linear,
                        frozen_other=float(model.params_total) - trainable - frozen_linear,
                        frozen_linear_bytes=pbytes, dequant=0.0, bwd_block=2.0, bwd_head=1.0, bwd_frac=frac)


def trained_split(model: ModelSpec, job: JobSpec, method: str, pbytes: float, block_linear_params: float,
                  dense_moe: bool) -> TrainedSplit:
    """The method's `TrainedSplit` (full fine-tuning when the method is none of the others)."""
    if method in PEFT_PHYSICS:
        return _peft_split(model, job, pbytes, block_linear_params)
    if method in LORA_FAMILY:
        return _lora_split(model, job, method, pbytes, block_linear_params, dense_moe)
    if method == "freeze":
        return _freeze_split(model, job, pbytes, block_linear_params)
    return TrainedSplit(trainable=float(model.params_total), frozen_linear=0.0, frozen_other=0.0,
                        frozen_linear_bytes=pbytes, dequant=0.0, bwd_block=2.0, bwd_head=2.0)


def model_terms(model: ModelSpec, job: JobSpec, constants=None) -> ModelTerms:
    method = lora_equivalent(job.method)  # rslora, pissa, olora, eva: lora; loftq: qlora
    pbytes = PRECISION_BYTES[job.precision]
    dense_moe = job.moe_mode == "dense" and model.is_moe
    linears = model.linears
    L = max(1, model.n_layers)

    fwd_block, expert_fwd, linear_io, widths = _linear_sums(linears, dense_moe)
    head_flops = 2.0 * model.vocab_size * model.hidden_size  # tied or not, the head is a V x h GEMM
    mix = mixer_terms(model)
    vis = vision_terms(model, job.images_per_example, job.train_vision_tower, job.image_size)

    block_linear_params = float(sum(lin.params for lin in linears))
    expert_params = float(sum(lin.params for lin in linears if lin.count_per_layer > 1))
    total = float(model.params_total)

    sp = trained_split(model, job, method, pbytes, block_linear_params, dense_moe)
    fwd_block += sp.fwd_block_delta  # 0 outside physics/peft_methods.py
    trainable, frozen_other = vision_trainable_split(model, job, sp.trainable, sp.frozen_other)

    return ModelTerms(
        fwd_block_flops=fwd_block, head_flops=head_flops, adapter_flops=sp.adapter_flops,
        bwd_block_factor=sp.bwd_block, bwd_head_factor=sp.bwd_head, bwd_attn_factor=2.0,
        bwd_layer_fraction=sp.bwd_frac, recompute_fraction=1.0 if job.grad_ckpt else 0.0, params_total=total,
        params_active=float(total if dense_moe else model.params_active), params_trainable=float(trainable),
        params_frozen_linear=float(sp.frozen_linear), params_frozen_other=float(max(0.0, frozen_other)),
        params_adapted=float(sp.adapted), params_expert=expert_params,
        frozen_linear_bytes=float(sp.frozen_linear_bytes), frozen_other_bytes=pbytes,
        dequant_bytes=float(sp.dequant), optimizer_code=OPTIMIZER_CODES[job.optimizer],
        galore_rank=float(job.galore_rank),
        galore_min_dims=float(sum(min(lin.in_features, lin.out_features) * lin.count_per_layer * lin.n_layers
                                  for lin in linears)),
        galore_max_dims=float(sum(max(lin.in_features, lin.out_features) * lin.count_per_layer * lin.n_layers
                                  for lin in linears)),
        params_block_linear=block_linear_params, method_code=METHOD_CODES[method], n_layers=L,
        attn_layers=model.attention_layers, hidden=model.hidden_size,
        intermediate=float(model.intermediate_size), moe_intermediate=float(model.moe_intermediate_size),
        n_experts=model.n_experts, top_k=float(model.n_experts if dense_moe else model.experts_per_token),
        moe_layers=model.n_moe_layers, n_heads=model.n_heads, vocab=model.vocab_size, gated=model.gated_mlp,
        lora_rank=sp.lora_rank, adapted_inputs_per_layer=sp.adapted_inputs, adapter_io_elements=sp.adapter_io,
        adapter_in_elements=sp.adapter_in, adapted_modules=sp.adapted_modules, weight_bytes_compute=pbytes,
        expert_fwd_flops=expert_fwd, linear_io_elements=linear_io, head_dim=float(model.head_dim),
        gemm_split_width=widths[0, 0] / fwd_block if fwd_block else float(model.hidden_size),
        gemm_full_width=widths[0, 1] / fwd_block if fwd_block else float(model.hidden_size),
        expert_split_width=widths[1, 0] / expert_fwd if expert_fwd else 0.0,
        expert_full_width=widths[1, 1] / expert_fwd if expert_fwd else 0.0,
        **mix, **vis, **sp.peft)


REFERENCE_MATMUL_EFFICIENCY = 0.80
"""Achievable / datasheet matmul TFLOP/s of the GPUs the efficiency curve's ceiling is stated for
(PhysicsConstants.mfu_max). A GPU with a measured `matmul_efficiency` in the catalog (A100 SXM 0.869,
MI300X 0.511...) runs at that / 0.80 of the curve; one not measured at the reference."""


ECC_GDDR_GPUS = ("T4", "A2-", "A10-", "A10G", "A16", "A40", "L4-", "L40")
"""Data-centre GDDR GPUs that run with inline ECC on by default (catalog name prefixes): 1/16 of the DRAM
holds the check bits (NVIDIA T4 / A10 / A40 / L40 user guides: "ECC ... reduces the available memory by
6.25%"; nvidia-smi: T4 16 GiB -> 15,360 MiB). HBM GPUs keep ECC out of band: no loss."""
ECC_RESERVED_FRACTION = 1.0 / 16.0  # the 6.25% above


def usable_memory_gib(gpu: GPUSpec) -> float:
    """Memory a job can use on the GPU (GiB): the catalog's, less inline ECC's share (ECC_GDDR_GPUS)."""
    name = getattr(gpu, "name", "").upper()
    ecc = any(name.startswith(p) for p in ECC_GDDR_GPUS)
    return gpu.memory_gib * (1.0 - ECC_RESERVED_FRACTION) if ecc else gpu.memory_gib


def gpu_arrays(gpu: GPUSpec, precision: str, constants=None) -> dict[str, float]:
    from tuneplan.physics.constants import DEFAULT_CONSTANTS

    c = constants or DEFAULT_CONSTANTS
    intra = gpu.intra_node_gbs if gpu.intra_node_gbs > 0 else 16.0
    inter = gpu.inter_node_gbps if gpu.inter_node_gbps > 0 else c.default_inter_node_gbps
    return {
        "peak_flops": gpu.tflops(precision) * 1e12, "mem_bw": gpu.memory_bandwidth_gbs * 1e9,
        "memory_bytes": usable_memory_gib(gpu) * 1024.0**3, "intra_bw": intra * 1e9,
        "inter_bw": inter / 8.0 * 1e9, "nvlink_domain": float(gpu.nvlink_domain_gpus),
        "tdp_w": gpu.tdp_w if gpu.tdp_w > 0 else 300.0,
        "matmul_rel": (gpu.matmul_efficiency or REFERENCE_MATMUL_EFFICIENCY) / REFERENCE_MATMUL_EFFICIENCY,
        # PEFT adapters' fp32 matmuls (physics/peft_methods.py): torch leaves TF32 off for matmuls by default
        "peak_flops_fp32": float(gpu.peak_tflops.get("fp32") or gpu.tflops("fp32")) * 1e12,
    }


def sharding_code(job: JobSpec) -> int:
    """SHARDING_CODES of the job's sharding; a framework with a distributed optimizer (Megatron / NeMo)
    shards master weights and moments over data parallel (ZeRO-1) where the job says ddp; `--offload
    all` offloads like ZeRO-3 offload."""
    from tuneplan.specs.framework import get_framework

    code = SHARDING_CODES[job.sharding_kind()]
    if job.offload == "all":
        return SHARDING_CODES["zero3-offload"]
    if code == 0 and job.dp > 1 and get_framework(job.framework).distributed_optimizer:
        return SHARDING_CODES["zero1"]
    return code


def job_numbers(job: JobSpec, seq_len: int) -> dict[str, float]:
    out = {"micro_batch": float(job.micro_batch), "grad_accum": float(job.grad_accum), "seq_len": float(seq_len)}
    out.update({k: float(getattr(job, k)) for k in ("gpus", "nodes", "tp", "pp", "cp", "ep", "dp")})
    out["sharding"] = float(sharding_code(job))
    flags = {"grad_ckpt": job.grad_ckpt, "flash_attn": job.flash_attn, "fp32_master": job.fp32_master(),
             "variable_shapes": job.variable_shapes(), "adapter_fp32": job.adapter_dtype == "fp32"}
    return out | {k: float(bool(v)) for k, v in flags.items()} | {"length_gap": job.length_gap()}


def terms_key(job: JobSpec) -> tuple:
    """The job fields `model_terms` reads: two jobs with the same key have the same terms on a model
    (batch shape, parallelism and the work do not enter them)."""
    return (job.method, job.lora_rank, job.lora_targets, job.trainable_layers, job.precision, job.quant,
            job.optimizer, job.grad_ckpt, job.moe_mode, job.moe_experts, job.images_per_example, job.image_size,
            job.train_vision_tower, job.peft_options, job.trainable_params,
            frozenset(job.given & {"lora_rank", "lora_targets"}), job.ckpt_mode, job.framework)


def build_arrays(rows: Sequence[tuple[ModelSpec, GPUSpec, JobSpec, int]], constants=None) -> dict[str, np.ndarray]:
    """Flat dict of numpy arrays for many (model, gpu, job, seq_len) configurations, one row each."""
    cols: dict[str, list[float]] = {}
    names: dict[str, list[str]] = {}
    cache: dict[tuple, ModelTerms] = {}
    for model, gpu, job, seq in rows:
        key = (id(model), *terms_key(job))
        mt = cache.get(key)
        if mt is None:
            mt = model_terms(model, job, constants)
            cache[key] = mt
        # image tokens join each sample's sequence (vision-language models)
        d = {**mt.__dict__, **gpu_arrays(gpu, job.precision, constants), **job_numbers(job, seq + int(mt.image_tokens)),
             **stack_numbers(model, gpu, job, seq + int(mt.image_tokens))}
        d["seq_len"] += d["virtual_tokens"]  # prompt/p-tuning: the model runs over the prepended positions too
        for k, v in d.items():
            cols.setdefault(k, []).append(float(v))
        names.setdefault("_model_names", []).append(model.name)
        names.setdefault("_gpu_names", []).append(gpu.name)
        names.setdefault("_methods", []).append(job.method)
    out: dict[str, np.ndarray] = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    for k, v in names.items():
        out[k] = np.asarray(v, dtype=object)
    return out

