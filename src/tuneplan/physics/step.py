"""Step time of a fine-tuning run, term by term, vectorised over configurations.

All inputs are the flat arrays of `physics.terms.build_arrays` (or arrays the planner builds
directly); every function broadcasts, so one call evaluates one configuration or a million.
Times are seconds per optimizer step on one GPU (all GPUs run in lockstep).
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.architecture import layer_shares, sequence_mixing_flops, vision_tower_flops_per_micro
from tuneplan.physics.codes import MethodCode, ShardingCode
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.peft_methods import peft_step_times

Arrays = dict[str, np.ndarray]


def efficiency(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Achieved share of dense peak for the block matmuls: saturating in the tokens each GPU
    processes per micro-step and in the matmul width per tensor-parallel rank."""
    tokens = a["micro_batch"] * a["seq_len"] / a["cp"]
    width = a["hidden"] / a["tp"]
    return c.mfu_max * tokens / (tokens + c.tokens_half) * width / (width + c.hidden_half)


def ring_time(nbytes: np.ndarray, p: np.ndarray, bw: np.ndarray, factor: float,
              c: PhysicsConstants) -> np.ndarray:
    """Ring collective over p ranks: factor x (p-1)/p x bytes over the bus bandwidth, plus latency.
    factor 2 = all-reduce, 1 = all-gather or reduce-scatter."""
    p = np.maximum(p, 1.0)
    hops = p - 1.0  # zero on one rank: no time
    return factor * hops * (nbytes / (p * bw * c.comm_efficiency) + c.comm_latency_s)


def activation_elements_per_token_layer(a: Arrays) -> np.ndarray:
    """Element-wise work per token per layer (elements): the hidden state through norms and residuals
    (4h), attention's q/k/v/output (2q + 2kv), and the MLP's intermediate tensors (3I gated, 2I plain;
    MoE: top-k experts' widths); hybrid stacks weigh attention and MLP by the layers that have them and
    add the Mamba mixers' tensors (`architecture.layer_shares`)."""
    attn_share, mlp_share, ssm_per_layer = layer_shares(a)
    inter = np.where(a["moe_layers"] > 0, np.maximum(a["top_k"], 1.0) * a["moe_intermediate"],
                     a["intermediate"] * mlp_share)
    return (4.0 * a["hidden"] + attn_share * (2.0 * a["q_dim"] + 2.0 * a["kv_dim"])
            + np.where(a["gated"] > 0, 3.0, 2.0) * inter + ssm_per_layer)


def dp_bandwidth(a: Arrays) -> np.ndarray:
    """Bus bandwidth of the data-parallel group: intra-node when it fits in a node, else the
    slower of the intra-node link and the per-GPU network share."""
    model_par = a["tp"] * a["pp"] * a["cp"]
    spans_nodes = a["dp"] * model_par > a["gpus"] / a["nodes"]
    return np.where(spans_nodes, np.minimum(a["intra_bw"], a["inter_bw"]), a["intra_bw"])


def step_time(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS) -> Arrays:
    """Breakdown of one optimizer step (s): forward, backward, recompute, dequant, overhead,
    tensor/context/expert-parallel communication, pipeline bubble, optimizer, data-parallel
    communication (exposed after overlap), and the total."""
    mb, S, ga = a["micro_batch"], a["seq_len"], a["grad_accum"]
    tp, pp, cp, dp, ep = a["tp"], a["pp"], a["cp"], a["dp"], a["ep"]
    L = a["n_layers"]
    tokens = mb * S / cp  # tokens per GPU per micro-step (context parallel splits the sequence)
    eff = efficiency(a, c)
    peak = a["peak_flops"]
    split = tp * pp  # tensor and pipeline parallel divide the model's FLOPs
    causal = np.where(a["flash_attn"] > 0, c.causal_fraction_flash, 1.0)
    attn_tok = sequence_mixing_flops(a, S, causal)  # attention (full and local layers) + Mamba scans, per token

    fwd_flops = tokens * (a["fwd_block_flops"] + a["head_flops"] + attn_tok + a["adapter_flops"]) / split
    bwd_flops = tokens * (a["bwd_layer_fraction"] * (a["bwd_block_factor"] * a["fwd_block_flops"]
                                                     + a["bwd_attn_factor"] * attn_tok
                                                     + 2.0 * a["adapter_flops"])
                          + a["bwd_head_factor"] * a["head_flops"]) / split
    rec_flops = a["grad_ckpt"] * a["recompute_fraction"] * a["bwd_layer_fraction"] * tokens * (
        a["fwd_block_flops"] + attn_tok + a["adapter_flops"]) / split
    # the GPU's measured matmul efficiency relative to the curve's reference (terms.REFERENCE_MATMUL_EFFICIENCY)
    rate = peak * eff * a["matmul_rel"]
    t_fwd = fwd_flops / rate
    t_bwd = bwd_flops / rate
    t_rec = rec_flops / rate
    t_vision = vision_tower_flops_per_micro(a) / rate if "vision_flops_per_sample" in a else 0.0

    bw = a["mem_bw"] * c.bandwidth_efficiency
    passes = 2.0 + a["grad_ckpt"]
    dq_bytes = np.array([0.0, c.dequant_bytes_nf4, c.dequant_bytes_gptq])[a["dequant_bytes"].astype(np.intp)]
    t_dequant = passes * dq_bytes * a["params_frozen_linear"] / split / bw
    is_dora = (a["method_code"] == MethodCode.DORA).astype(float)
    t_dequant = t_dequant + is_dora * passes * c.dora_bytes_per_weight * a["params_adapted"] / split / bw
    # LoRA-family: element-wise work per token on the adapted modules' inputs and outputs, and the
    # small kernels each adapted module launches whatever the tokens (DoRA runs more of them)
    recompute = 1.0 + 0.5 * a["grad_ckpt"]
    t_adapter = c.adapter_passes * recompute * tokens * a["adapter_io_elements"] * a["weight_bytes_compute"] / (
        split * bw)
    kernels = np.where(is_dora > 0, c.dora_kernels_per_module, c.lora_kernels_per_module)
    # every tensor-parallel rank launches the same kernels; pipeline stages split the modules
    t_adapter_launch = recompute * a["adapted_modules"] * kernels * c.kernel_launch_s / pp
    t_overhead = c.overhead_s_per_layer * L / pp * recompute + t_adapter_launch
    # memory-bound element-wise work: the loss over the vocabulary (last stage) and the activations
    # streamed by norms, activation functions and residual adds
    t_loss = tokens * a["vocab"] * c.loss_bytes_per_logit / tp / bw
    act_el = activation_elements_per_token_layer(a)
    t_elem = c.elementwise_passes * tokens * act_el * a["weight_bytes_compute"] * L * a["bwd_layer_fraction"] / (
        tp * pp) / bw
    t_elementwise = t_loss + t_elem + t_adapter

    # tensor parallel: 2 all-reduces of the layer activations forward, 2 backward (+2 recompute)
    act_bytes = tokens * a["hidden"] * a["weight_bytes_compute"]
    tp_calls = (4.0 + 2.0 * a["grad_ckpt"]) * L / pp
    t_tp = tp_calls * ring_time(act_bytes, tp, a["intra_bw"], 2.0, c)
    # context parallel: ring exchange of K and V blocks, forward and twice backward, half hidden
    kv_bytes = 2.0 * tokens * a["kv_dim"] * a["weight_bytes_compute"]
    t_cp = 3.0 * a["attn_layers"] / pp * ring_time(kv_bytes * cp, cp, a["intra_bw"], 1.0, c) * (
        1.0 - c.overlap_fraction)
    # expert parallel: all-to-all dispatch and combine, forward and backward, per MoE layer
    ep_bw = np.where(ep > a["gpus"] / a["nodes"], np.minimum(a["intra_bw"], a["inter_bw"]), a["intra_bw"])
    a2a_bytes = tokens * a["hidden"] * np.maximum(a["top_k"], 1.0) * a["weight_bytes_compute"]
    t_ep = 4.0 * a["moe_layers"] / pp * ring_time(a2a_bytes, ep, ep_bw, 1.0, c)
    # pipeline: activations to the next stage, forward and backward
    t_pp_p2p = np.where(pp > 1, 2.0 * act_bytes / (a["intra_bw"] * c.comm_efficiency), 0.0)

    # PEFT methods' own work (physics/peft_methods.py): fp32 matmuls with built weights, weight products
    p_fwd, p_bwd, p_rec, p_launch = peft_step_times(a, c, tokens, split, pp)
    t_fwd, t_bwd, t_rec, t_overhead = t_fwd + p_fwd, t_bwd + p_bwd, t_rec + p_rec, t_overhead + p_launch

    t_micro = (t_fwd + t_bwd + t_rec + t_dequant + t_elementwise + t_overhead + t_tp + t_cp + t_ep + t_pp_p2p
               + t_vision)
    t_pipeline = (ga + pp - 1.0) * t_micro
    t_bubble = (pp - 1.0) * t_micro

    # optimizer: bytes per trainable parameter, divided by the ranks that own a shard
    opt_code = a["optimizer_code"]
    opt_bytes = np.array([c.optimizer_bytes_adamw, c.optimizer_bytes_8bit, c.optimizer_bytes_8bit,
                          c.optimizer_bytes_sgd, c.optimizer_bytes_sgd_momentum,
                          c.optimizer_bytes_adafactor])[opt_code.astype(np.intp)]
    shard = a["sharding"]
    opt_div = np.where(shard >= ShardingCode.ZERO1, dp, 1.0) * split
    offload = shard == ShardingCode.OFFLOAD
    t_opt = np.where(offload, a["params_trainable"] / opt_div * opt_bytes / (c.cpu_offload_gbs * 1e9),
                     a["params_trainable"] / opt_div * opt_bytes / bw)

    # data-parallel communication
    bw_dp = dp_bandwidth(a)
    train_bytes_ddp = a["params_trainable"] / split * c.ddp_grad_bytes
    train_bytes_sh = a["params_trainable"] / split * c.sharded_grad_bytes
    all_bytes = a["params_total"] / split * a["weight_bytes_compute"]
    # each sharding's collectives, computed only where that sharding occurs
    t_comm = np.zeros(np.broadcast(mb, shard).shape)
    kinds = {k for k in ShardingCode if np.any(shard == k)}
    if kinds & {ShardingCode.NONE, ShardingCode.ZERO1}:  # DDP / ZeRO-1: one all-reduce of the gradients per step
        t_comm = np.where(shard <= ShardingCode.ZERO1, ring_time(train_bytes_ddp, dp, bw_dp, 2.0, c), t_comm)
    if ShardingCode.ZERO2 in kinds:  # ZeRO-2: reduce-scatter every micro-step, all-gather the updated weights
        zero2 = ring_time(train_bytes_sh, dp, bw_dp, 1.0, c) * ga + ring_time(
            a["params_trainable"] / split * a["weight_bytes_compute"], dp, bw_dp, 1.0, c)
        t_comm = np.where(shard == ShardingCode.ZERO2, zero2, t_comm)
    if kinds & {ShardingCode.ZERO3, ShardingCode.OFFLOAD}:  # ZeRO-3 / FSDP: all-gather forward and backward, reduce-scatter, per micro-step
        zero3 = ga * (2.0 * ring_time(all_bytes, dp, bw_dp, 1.0, c) + ring_time(train_bytes_sh, dp, bw_dp, 1.0, c))
        offload_xfer = ga * 2.0 * all_bytes / dp / (c.cpu_offload_gbs * 1e9)
        t_comm = np.where(shard == ShardingCode.ZERO3, zero3,
                          np.where(shard == ShardingCode.OFFLOAD, zero3 + offload_xfer, t_comm))
    if ShardingCode.HYBRID in kinds:  # hybrid: sharded within a node, gradients all-reduced across nodes
        gpn = a["gpus"] / a["nodes"]
        hybrid = ga * (2.0 * ring_time(all_bytes, np.minimum(dp, gpn), a["intra_bw"], 1.0, c)
                       + ring_time(train_bytes_sh, np.minimum(dp, gpn), a["intra_bw"], 1.0, c)) + ring_time(
            train_bytes_sh / np.minimum(dp, gpn), a["nodes"], np.minimum(a["intra_bw"], a["inter_bw"]), 2.0, c)
        t_comm = np.where(shard == ShardingCode.HYBRID, hybrid, t_comm)
    # overlap: DDP buckets hide behind the last micro-step's backward; sharded collectives behind
    # every micro-step's forward and backward
    hide = np.where(shard >= ShardingCode.ZERO3, ga * (t_fwd + t_bwd + t_rec), t_bwd + t_rec) * c.overlap_fraction
    t_comm_exposed = np.maximum(t_comm - hide, 0.0)

    total = t_pipeline + t_opt + t_comm_exposed
    return {
        "forward_s": ga * t_fwd,
        "backward_s": ga * t_bwd,
        "recompute_s": ga * t_rec,
        "dequant_s": ga * t_dequant,
        "elementwise_s": ga * t_elementwise,
        "overhead_s": ga * t_overhead,
        "tensor_parallel_s": ga * (t_tp + t_cp + t_ep + t_pp_p2p),
        "pipeline_bubble_s": t_bubble,
        "optimizer_s": t_opt,
        "communication_s": t_comm_exposed,
        "vision_tower_s": ga * t_vision * np.ones_like(total),
        "communication_total_s": t_comm,
        "step_s": total,
        "efficiency": eff,
        "compute_s": ga * (t_fwd + t_bwd + t_rec),
    }


def model_flops_per_step(a: Arrays) -> np.ndarray:
    """The 6N-style model FLOPs of one optimizer step, all GPUs (for MFU): forward + backward,
    without recompute or dequantisation, counting the attention term."""
    S = a["seq_len"]
    causal = np.where(a["flash_attn"] > 0, 0.5, 1.0)
    attn_tok = sequence_mixing_flops(a, S, causal)
    per_tok = (a["fwd_block_flops"] + a["head_flops"] + attn_tok + a["adapter_flops"]) + (
        a["bwd_layer_fraction"] * (a["bwd_block_factor"] * a["fwd_block_flops"] + 2.0 * attn_tok
                                   + 2.0 * a["adapter_flops"]) + a["bwd_head_factor"] * a["head_flops"])
    return per_tok * a["micro_batch"] * S * a["grad_accum"] * a["dp"]


def tokens_per_step(a: Arrays) -> np.ndarray:
    """The run's own tokens per optimizer step (prompt tuning's virtual positions not counted)."""
    return a["micro_batch"] * (a["seq_len"] - a.get("virtual_tokens", 0.0)) * a["grad_accum"] * a["dp"]
