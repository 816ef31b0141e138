"""Peak GPU memory of a fine-tuning step, term by term, vectorised over configurations: weights by
storage, gradients, the fp32 master copy (`JobSpec.fp32_master`), optimizer states (each divided by the
ranks that shard it), activations, logits with their fp32 loss copy, and fixed overheads. The sum is
torch's `allocated`; `reserved` adds the caching allocator's fragmentation, `nvidia-smi` the CUDA context.
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics import activations
from tuneplan.physics.architecture import vision_activation_bytes
from tuneplan.physics.codes import MethodCode, OptimizerCode, ShardingCode, full_weights
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.fsdp import accumulated_unsharded, flat_parameter_gradients
from tuneplan.physics.moe_lora import stacked_lora_held_bytes
from tuneplan.physics.ops import logits_memory_bytes
from tuneplan.physics.parallel import pipeline_inflight_factor
from tuneplan.physics.peft_methods import peft_memory_bytes
from tuneplan.physics.precision import fp8_weight_bytes
from tuneplan.physics.stack import get

Arrays = dict[str, np.ndarray]

ADAMW_4BIT_STATE_BYTES = 2 * (0.5 + 4.0 / 128)
"""4-bit AdamW (torchao 0.18.0 torchao/optim/adam.py AdamW4bit, subclass_4bit.py OptimState4bit): two
moments of 4-bit codes (0.5 byte each) with an fp32 scale per block of 128 (4/128 byte each): 1.0625 bytes
per trainable parameter (tensors under 4,096 elements stay fp32: negligible)."""
OPTIMIZER_STATE_BYTES = np.asarray((8.0, 2.0, 2.0, 0.0, 4.0, 4.0, 8.0, ADAMW_4BIT_STATE_BYTES))
"""Optimizer state bytes per trainable parameter by OptimizerCode: AdamW two fp32 moments; 8-bit AdamW
(plain or paged) two 1-byte moments; SGD none; SGD with momentum one fp32 buffer; Adafactor's factored
second moment (taken as ~1 fp32 per parameter, an upper bound for non-matrix parameters and the first
moment when beta1 is set); GaLore-AdamW as AdamW for the weights it does not project
(`galore_state_elements` for those it does); 4-bit AdamW `ADAMW_4BIT_STATE_BYTES`."""


def optimizer_step_bytes(opt: np.ndarray, a: Arrays) -> np.ndarray:
    """Temporaries of the optimizer step (bytes): torch AdamW's multi-tensor path (`_multi_tensor_adam`)
    computes `torch._foreach_sqrt(exp_avg_sqs)` for a whole group at once, one second moment's bytes; a
    fused step (torch `fused=True`, apex, TE, DeepSpeed FusedAdam), a loop and other optimizers have none."""
    adamw = np.asarray(a["optimizer_code"]) == OptimizerCode.ADAMW
    return np.where(adamw & (get(a, "opt_foreach") > 0), 0.5 * opt, 0.0)


def optimizer_in_backward_bytes(a: Arrays, trainable: np.ndarray, grad_bytes: np.ndarray,
                                split: np.ndarray) -> np.ndarray:
    """Gradient bytes alive at once with the optimizer inside the backward (torchtune 0.6.1
    training/memory.py register_optim_in_bwd_hooks): each parameter is stepped and its gradient freed when
    ready, so one is held at a time: the largest trained tensor's (vocab x hidden, else an MLP matrix)."""
    largest = np.maximum(a["vocab"], np.maximum(a["intermediate"], a["moe_intermediate"])) * a["hidden"] / split
    return np.minimum(largest, trainable) * grad_bytes


EVAL_LOGITS_BYTES_PER_ELEMENT = 10.0
"""Bytes per (token x vocab) an evaluation forward holds at its loss with torch's cross-entropy over
upcast logits (bytes): the model's 16-bit logits (2, kept in its output), their fp32 copy (4, transformers
loss/loss_utils.py ForCausalLMLoss `logits.float()`) and cross_entropy's fp32 log-softmax (4); no
gradients under the Trainer's `torch.no_grad()` (prediction_step)."""


def eval_pass_bytes(a: Arrays, states: np.ndarray, grads: np.ndarray,
                    c: PhysicsConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Peak of an evaluation pass per GPU (bytes; 0 without one, `eval_batch` 0): the persistent `states`,
    the step's `grads` where they live in persistent buffers (HF's zero_grad(set_to_none=True) frees them),
    and a forward without autograd at the evaluation batch: one layer's tensors and the batch's logits at
    the loss (`EVAL_LOGITS_BYTES_PER_ELEMENT`; a chunked or fused loss as in training)."""
    states = states + np.where(get(a, "grad_buffers") > 0, grads, 0.0)
    eb = get(a, "eval_batch")
    tokens = eb * a["seq_len"] / a["cp"]
    per = activations.activation_bytes_per_token_layer(a, c)
    layer = tokens * np.maximum(per["dense"], per["moe"]) * c.activation_scale / a["tp"]
    logits = logits_memory_bytes(tokens, a["vocab"], a["tp"], get(a, "ce_code"), EVAL_LOGITS_BYTES_PER_ELEMENT)
    return np.where(eb > 0, states + layer + logits, 0.0)


def variable_shape_bytes(a: Arrays, per_token_bytes: np.ndarray, c: PhysicsConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Blocks the caching allocator keeps for batches of other lengths (bytes, reserved only):
    `variable_shape_reserve` x the per-token transients where batch shapes vary; none under expandable
    segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: freed pages serve any size)."""
    vary = (a["variable_shapes"] > 0) & (get(a, "expandable_segments") == 0)
    return np.where(vary, c.variable_shape_reserve * per_token_bytes, 0.0)


def galore_state_elements(a: Arrays) -> np.ndarray:
    """GaLore-AdamW's states of the block linears, in elements (Zhao et al. 2024; galore_torch 1.0 as
    transformers' `galore_adamw` runs it): a rank-r projector r x min(m, n) and two moments r x max(m, n)
    per m x n matrix; autograd still allocates the full gradient."""
    return a["galore_rank"] * (a["galore_min_dims"] + 2.0 * a["galore_max_dims"])


def expert_split_ratio(a: Arrays) -> np.ndarray:
    """How many more GPUs split one copy of the experts than the dense weights: ep x etp / tp (Megatron-Core
    0.13 parallel_state.initialize_model_parallel: the experts' data parallel is (cp x dp) / this ratio)."""
    return a["ep"] * get(a, "etp") / a["tp"]


def expert_sharding(div: np.ndarray, ep: np.ndarray, expert_here: np.ndarray) -> np.ndarray:
    """The effective shard count of a GPU's weights, gradients or states when `expert_here` of them are
    expert weights: dense ones over `div` ranks, expert ones over div / ep (`ep`: expert_split_ratio;
    Megatron-Core's `expert_data_parallel_group`, DeepSpeed-MoE alike)."""
    expert_div = np.where(div > 1, np.maximum(div / ep, 1.0), 1.0)
    return 1.0 / ((1.0 - expert_here) / div + expert_here / expert_div)


def master_and_states(a: Arrays, trainable: np.ndarray, full: np.ndarray, whole: np.ndarray,
                      share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fp32 master copy, optimizer states) in bytes per GPU before ZeRO sharding: master and fp32 moments
    where the job keeps one (JobSpec.fp32_master), else 16-bit weights train in place with moments like the
    parameter (torch zeros_like; 8-bit states unchanged); GaLore keeps the block linears' states in rank-r
    projections. `whole`: rows training whole weights; `share`: the part of the matrices on this GPU."""
    pbytes = a["weight_bytes_compute"]
    trained16 = whole & (pbytes == 2)
    keep32 = a["fp32_master"] > 0
    master = np.where(whole & (pbytes < 4) & (keep32 | (pbytes < 2)), 4.0 * trainable, 0.0)
    code = np.asarray(a["optimizer_code"])
    state = OPTIMIZER_STATE_BYTES[code.astype(np.intp)]
    low_bit = (OptimizerCode.ADAMW_8BIT, OptimizerCode.PAGED_ADAMW_8BIT, OptimizerCode.ADAMW_4BIT)
    state16 = np.where(np.isin(code, low_bit), state, state * pbytes / 4.0)
    state = np.where(trained16 & ~keep32, state16, state)
    galore = full & (code == OptimizerCode.GALORE_ADAMW)
    projected = a["params_block_linear"] * share
    opt = np.where(galore, (trainable - projected) * state + galore_state_elements(a) * share * state / 2.0,
                   trainable * state)
    return master, opt


def gradient_bytes(a: Arrays, trainable: np.ndarray, frozen_lin: np.ndarray, grad_bytes: np.ndarray,
                   shards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(through the backward, at the optimizer step) gradient bytes per GPU over `shards` GPUs: adapters in
    FSDP1 block units the whole flat parameter's, in its storage dtype (fsdp.flat_parameter_gradients);
    under no_sync unsharded through the backward, even when offloaded (fsdp.accumulated_unsharded)."""
    whole = np.where(flat_parameter_gradients(a), trainable * a["weight_bytes_compute"]
                     + frozen_lin * a["frozen_linear_bytes"], trainable * grad_bytes)
    sharded = whole / np.maximum(shards, 1.0)
    # the optimizer inside the backward (optimizer_in_backward_bytes) leaves none for a step of its own
    return np.where(accumulated_unsharded(a, shards), whole, sharded), np.where(get(a, "opt_in_bwd") > 0, 0.0, sharded)


def activations_and_logits(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS) -> tuple[np.ndarray, np.ndarray]:
    """Saved activations and loss buffers per GPU (bytes) at the peak stage: per layer as the checkpointing
    mode, offload, low precision and sequence parallel keep them (physics/activations.py); the first
    pipeline stage holds the in-flight micro-batches, the last one the loss."""
    tp, pp, cp = a["tp"], a["pp"], a["cp"]
    per = activations.activation_bytes_per_token_layer(a, c)
    el_bytes = np.where(a["weight_bytes_compute"] >= 4, 4.0, 2.0)
    saving = activations.linear_input_saving(a, el_bytes)
    repl = activations.replicated_bytes(a, el_bytes) * c.activation_scale
    tokens = a["micro_batch"] * a["seq_len"] / cp
    L = a["n_layers"]
    moe_layers = np.minimum(a["moe_layers"], L)
    layers = L / pp * a["bwd_layer_fraction"]
    moe_share = np.where(L > 0, moe_layers / np.maximum(L, 1.0), 0.0)
    fused = activations.fused_swiglu_saving(a, el_bytes)
    frozen = activations.frozen_product_saving(a, el_bytes)  # a frozen down projection keeps no input
    fused = {k: fused[k] + frozen[k] for k in fused}
    per_dense, per_moe = ((per[k] - (saving[k] + fused[k]) * c.activation_scale - repl) / tp + repl
                          for k in ("dense", "moe"))
    per_layer = (1.0 - moe_share) * per_dense + moe_share * per_moe
    eager = np.where(a["flash_attn"] > 0, 0.0, a["n_heads"] * a["seq_len"] / cp) * el_bytes * c.activation_scale / tp
    acts_stage = activations.checkpointed_activations(a, tokens, per_layer, per["layer_input"], eager, layers)
    in_flight = pipeline_inflight_factor(pp, get(a, "vpp"), a["grad_accum"])
    logits = logits_memory_bytes(tokens, a["vocab"], tp, get(a, "ce_code"), c.logits_bytes_per_element)
    # pipeline: the first stage holds in_flight micro-batches' activations, the last one a micro-batch's
    # and the loss buffers; the peak is the larger (one stage alone without a pipeline)
    first = acts_stage * in_flight
    first_wins = (pp > 1) & (first >= acts_stage + logits)
    acts = np.where(first_wins, first, np.where(pp > 1, acts_stage, first))
    logits = np.where(first_wins, 0.0, logits)
    return acts, logits


def memory(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS) -> Arrays:
    """Per-GPU memory breakdown (GiB) and the peaks: allocated, reserved, nvidia-smi."""
    tp, pp, dp = a["tp"], a["pp"], a["dp"]
    split = tp * pp
    shard = a["sharding"]
    gpn = a["gpus"] / a["nodes"]
    # ZeRO / FSDP / distributed-optimizer shards span data x context parallel: context-parallel ranks hold
    # the same weights (DeepSpeed-Ulysses and Megatron-Core's CP shard over both); hybrid shards within a node
    sdeg = np.where(shard == ShardingCode.HYBRID, np.minimum(dp * a["cp"], gpn), dp * a["cp"])
    w_div = np.where((shard == ShardingCode.ZERO3) | (shard == ShardingCode.HYBRID), sdeg, 1.0)
    g_div = np.where(shard >= ShardingCode.ZERO2, sdeg, 1.0)
    o_div = np.where(shard >= ShardingCode.ZERO1, sdeg, 1.0)
    offload = shard == ShardingCode.OFFLOAD
    full = a["method_code"] == MethodCode.FULL
    whole = full_weights(a["method_code"])  # full and freeze train whole weights
    pbytes = a["weight_bytes_compute"]
    # expert weights are spread over ep x etp ranks of a pipeline stage, the rest over tp (`split`):
    # relative to the dense split, experts are divided by ep x etp / tp more (etp = tp: by ep)
    expert_share = np.where(a["params_total"] > 0, a["params_expert"] / a["params_total"], 0.0)
    ep_rel = expert_split_ratio(a)
    ep_factor = 1.0 - expert_share + expert_share / ep_rel
    w_div, g_div, o_div = (expert_sharding(d, ep_rel, expert_share / ep_rel / ep_factor) for d in (w_div, g_div, o_div))

    trainable = a["params_trainable"] * ep_factor / split
    frozen_lin = a["params_frozen_linear"] * ep_factor / split
    frozen_other = a["params_frozen_other"] / split
    # weights: trainable ones at compute precision (LoRA adapters are kept in fp32 by peft)
    train_w_bytes = np.where(whole, pbytes, 4.0)
    weights = (trainable * train_w_bytes + frozen_lin * a["frozen_linear_bytes"]
               + frozen_other * a["frozen_other_bytes"])
    # low-precision training: the cast linear weights (and their transposes) next to the bf16 ones
    # (fp8: by recipe, what is held beside or instead of the 16-bit weight: physics/precision.py)
    lowp_copies = fp8_weight_bytes(get(a, "lowp"), get(a, "fp8_recipe"))
    weights = weights + lowp_copies * (frozen_lin + np.where(whole, trainable, 0.0))
    weights = np.where(offload, 0.0, weights / w_div)
    # gradients in the compute dtype, or in an fp32 buffer (Megatron's main_grad, FSDP2 fp32 reduce)
    grad_bytes = np.where(whole, np.where(get(a, "fp32_grads") > 0, 4.0, pbytes), 4.0)
    grads, step_grads = gradient_bytes(a, trainable, frozen_lin, grad_bytes, np.where(offload, sdeg, g_div))
    in_bwd = get(a, "opt_in_bwd") > 0  # each parameter stepped in the backward: one gradient at a time, no step peak
    host_states = offload | (get(a, "offload_code") > 0)  # ZeRO-offload: master and moments on the host
    master, opt = (np.where(host_states, 0.0, x / o_div)
                   for x in master_and_states(a, trainable, full, whole, ep_factor / split))
    # sharded weights are gathered a layer (unit) at a time, with one unit prefetched; weights offloaded
    # to the host (ZeRO-3 offload_param, FSDP CPUOffload) are brought in the same way on one GPU too
    layer_w = a["params_total"] / np.maximum(a["n_layers"], 1.0) * ep_factor / split * pbytes
    gathered = np.where(((shard >= ShardingCode.ZERO3) & (sdeg > 1)) | offload, 2.0 * layer_w, 0.0)
    # DDP gradient buckets (torch DDP's Reducer, gradient_as_bucket_view off): a second copy of the
    # gradients while they are all-reduced; one process without DDP has none
    ddp_buckets = np.where((shard == ShardingCode.NONE) & (dp > 1), trainable * grad_bytes, 0.0)

    acts, logits = activations_and_logits(a, c)
    # PEFT methods' buffers, extra states and saved operands (physics/peft_methods.py)
    tokens = a["micro_batch"] * a["seq_len"] / a["cp"]
    p_w, p_opt, p_act = peft_memory_bytes(a, tokens, split)
    weights, opt, acts = weights + np.where(offload, 0.0, p_w), opt + np.where(offload, 0.0, p_opt), acts + p_act
    if "vision_act_bytes_per_sample" in a:  # a trained vision tower's saved activations
        acts = acts + vision_activation_bytes(a)
    stacked = stacked_lora_held_bytes(a)  # LoRA over stacked MoE experts: W + BA held (physics/moe_lora.py)
    acts = acts + stacked
    # transient dequantised weight (QLoRA/GPTQ): one large projection at a time, in and out
    dequant_buf = np.where(a["dequant_bytes"] > 0,
                           2.0 * a["hidden"] * np.maximum(a["intermediate"], a["moe_intermediate"]) * 2.0 / tp,
                           0.0)
    workspace = c.workspace_gib * BYTES_PER_GIB + dequant_buf

    # gradients at the peak: those not written into memory the backward has freed
    # (activations.backward_peak_bytes; all of them where they accumulate or live in a buffer)
    grads = activations.backward_peak_bytes(grads, acts, logits, a) - (acts + logits)
    # in the backward's step: the first (largest) gradient is written while every activation is still held
    grads = np.where(in_bwd, optimizer_in_backward_bytes(a, trainable, grad_bytes, split), grads)
    backward = weights + grads + master + opt + gathered + ddp_buckets + acts + logits + workspace
    variable = variable_shape_bytes(a, acts - stacked + logits, c)  # W + BA: one shape
    # the optimizer step, after the backward freed the activations: every gradient, the states and the
    # step's own temporaries; its blocks come from those the backward freed (new segments only beyond them)
    step = weights + step_grads + master + opt + ddp_buckets + workspace
    step = step + np.where(host_states | in_bwd, 0.0, optimizer_step_bytes(opt, a))
    evaluation = eval_pass_bytes(a, weights + master + opt + gathered + ddp_buckets + workspace, step_grads, c)
    g = BYTES_PER_GIB
    out = {
        "weights_gib": weights / g, "gradients_gib": grads / g, "gradient_buckets_gib": ddp_buckets / g,
        "master_weights_gib": master / g, "optimizer_gib": opt / g, "gathered_params_gib": gathered / g,
        "activations_gib": acts / g, "logits_gib": logits / g, "workspace_gib": workspace / g,
        "calibration_gib": np.zeros_like(backward), "cuda_context_gib": np.full_like(backward, c.cuda_context_gib),
        "capacity_gib": a["memory_bytes"] / g, "variable_shape_gib": variable / g, "step_peak_gib": step / g,
        "eval_peak_gib": evaluation / g}
    settle_peaks(out, backward / g, c)
    return out


def settle_peaks(out: Arrays, backward_gib: np.ndarray, c: PhysicsConstants = DEFAULT_CONSTANTS,
                 outside_gib: np.ndarray | float = 0.0) -> None:
    """Allocated (the largest of the backward's, the optimizer step's and an evaluation pass's peaks, the
    later phases' shares above it as `optimizer_step_gib` and `eval_pass_gib`), reserved, nvidia-smi and
    the fit. Only the backward's blocks carry fragmentation (the later phases reuse them); blocks cached
    for other batch shapes count in reserved but not in the fit (torch frees them before failing).
    `outside_gib`: memory outside torch's allocator (an inference engine's pool)."""
    step = out["step_peak_gib"]
    trained = np.maximum(backward_gib, step)
    after = np.maximum(step, out.get("eval_peak_gib", 0.0))  # the phases after the backward freed its tensors
    allocated = np.maximum(backward_gib, after)
    backward_held = backward_gib * (1.0 + c.allocator_overhead)
    held = np.maximum(backward_held, after)
    reserved = np.maximum(backward_held + out["variable_shape_gib"], after)
    out["allocated_gib"] = allocated
    out["optimizer_step_gib"] = trained - backward_gib
    out["eval_pass_gib"] = allocated - trained
    out["reserved_gib"] = reserved
    out["allocator_gib"] = reserved - allocated
    out["nvidia_smi_gib"] = reserved + c.cuda_context_gib + outside_gib
    out["fits"] = held + c.cuda_context_gib + outside_gib <= out["capacity_gib"]


def backward_peak_gib(out: Arrays) -> np.ndarray:
    """The backward's allocated peak of settled figures: allocated less the step's and the evaluation's shares."""
    return out["allocated_gib"] - out.get("optimizer_step_gib", 0.0) - out.get("eval_pass_gib", 0.0)


def max_micro_batch(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS, upper: int = 4096) -> np.ndarray:
    """Largest micro-batch that fits the GPU, by binary search over the memory model; 0 when 1 does not."""
    n = len(next(iter(a.values())))
    lo = np.zeros(n)
    hi = np.full(n, float(upper) + 1)
    for _ in range(int(np.ceil(np.log2(upper + 1))) + 1):
        mid = np.floor((lo + hi) / 2.0)
        mid = np.maximum(mid, 1.0)
        trial = dict(a)
        trial["micro_batch"] = mid
        ok = memory(trial, c)["fits"]
        lo = np.where(ok & (mid > lo), mid, lo)
        hi = np.where(~ok, mid, hi)
        if np.all(hi - lo <= 1):
            break
    return lo.astype(int)
