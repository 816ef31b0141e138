"""Step time of a fine-tuning run, term by term, vectorised over the flat arrays of
`physics.terms.build_arrays` (or the planner's): seconds per optimizer step on one GPU (all in lockstep).
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics import ops, parallel, precision
from tuneplan.physics.activations import activation_offload_seconds
from tuneplan.physics.architecture import layer_shares, sequence_mixing_flops, vision_tower_flops_per_micro
from tuneplan.physics.codes import MethodCode, ShardingCode, lora_family
from tuneplan.physics.comm_domains import record, record_where, scaled
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.fsdp import flat_parameter_gradients, gradient_reductions
from tuneplan.physics.memory import expert_split_ratio
from tuneplan.physics.moe_lora import stacked_lora_seconds
from tuneplan.physics.peft_methods import peft_step_times
from tuneplan.physics.stack import get, host_bandwidth

Arrays = dict[str, np.ndarray]


def gptq_eager_bytes(bits: float) -> float:
    """Memory traffic per GPTQ weight per forward beyond the GEMM's own read (bytes), as auto-gptq's
    QuantLinear trains (0.5.1 nn_modules/qlinear/qlinear_cuda_old.py and qlinear_cuda.py forward: at 128
    rows or more, the kernel_switch_threshold, it unpacks the weight in eager PyTorch ops; the exllama
    kernels have no backward, and ms-swift 1.5 forces this path in training): bitwise_right_shift of the
    expanded int32 words (read bits/8, write 4), .to(int8, int16 at 8 bits: w bytes) (4 + w),
    bitwise_and (w + w), minus the zeros (w + w), times the fp16 scales (w + 2), then torch.matmul:
    bits/8 + 10 + 6w, 16.5 at 4 bits and 23 at 8. The dequantised weight is what matmul saves for the
    input gradient, so the backward does not rebuild it."""
    w = 2.0 if bits > 4 else 1.0
    return bits / 8.0 + 10.0 + 6.0 * w

DOMAIN_ROWS = 4096
"""Rows up to which `step_time` records communication by domain unless told: an estimate's few rows; the
planner's grids of thousands skip the bookkeeping."""

PEFT_ADAPTER_PASSES = 4.0
"""Element-wise passes (2-byte elements, forward + backward) over the adapted inputs and outputs of PEFT
methods outside the LoRA family (physics/peft_methods.py): a multiply each way and its gradient."""


def ring_time(nbytes: np.ndarray, p: np.ndarray, bw: np.ndarray, factor: float,
              c: PhysicsConstants) -> np.ndarray:
    """Ring collective over p ranks: factor x (p-1)/p x bytes over the bus bandwidth, plus latency.
    factor 2 = all-reduce, 1 = all-gather or reduce-scatter."""
    p = np.maximum(p, 1.0)
    hops = p - 1.0  # zero on one rank: no time
    return factor * hops * (nbytes / (p * bw * c.comm_efficiency) + c.comm_latency_s)


def ring_bytes(nbytes: np.ndarray, p: np.ndarray, factor: float) -> np.ndarray:
    """Bytes each rank sends in `ring_time`'s collective: factor x (p-1)/p x bytes."""
    p = np.maximum(p, 1.0)
    return factor * (p - 1.0) / p * nbytes


def activation_elements_per_token_layer(a: Arrays) -> np.ndarray:
    """Element-wise work per token per layer (elements): norms and residuals (4h), attention's q/k/v/output
    (2q + 2kv), the MLP's intermediates (3I gated, 2I plain; MoE: top-k experts'), weighed for hybrid
    stacks by the layers that have them, plus the Mamba mixers' tensors (`architecture.layer_shares`)."""
    attn_share, mlp_share, ssm_per_layer = layer_shares(a)
    inter = np.where(a["moe_layers"] > 0, np.maximum(a["top_k"], 1.0) * a["moe_intermediate"],
                     a["intermediate"] * mlp_share)
    return (4.0 * a["hidden"] + attn_share * (2.0 * a["q_dim"] + 2.0 * a["kv_dim"])
            + np.where(a["gated"] > 0, 3.0, 2.0) * inter + ssm_per_layer)


def _compute_seconds(a: Arrays, c: PhysicsConstants, tokens: np.ndarray) -> Arrays:
    """Forward, backward and recompute seconds of one micro-step: dense GEMMs at the precision's rate,
    experts' at the rows each receives, LM head and adapters in bf16, attention at FlashAttention's
    efficiency for its span and head dimension (physics/ops.py)."""
    tp, pp = a["tp"], a["pp"]
    split = tp * pp
    S = a["seq_len"]
    lowp = get(a, "lowp")
    eff = ops.efficiency(a, c)
    rel = a["matmul_rel"]
    lowp_eff = np.where(lowp > 0, precision.LOW_PRECISION_GEMM_EFFICIENCY, 1.0)
    block_rate = get(a, "lin_peak_flops") * eff * rel * lowp_eff
    # an expert's rows: the tokens of its ep x etp group's GPUs (sequence parallel splits them over tp)
    m_exp = ops.expert_gemm_rows(tokens * get(a, "etp") / tp, a["top_k"], a["n_experts"], a["ep"])
    # at the experts' own width (fine-grained experts are narrow: Qwen3-30B-A3B's 768, split again by etp)
    width = ops.gemm_width(a, "expert", get(a, "etp"))
    expert_rate = get(a, "lin_peak_flops") * ops.gemm_efficiency(m_exp, width, c) * rel * lowp_eff
    bf16_rate = get(a, "bf16_peak_flops") * eff * rel
    flash = a["flash_attn"] > 0
    # attention over full and local layers (+ Mamba scans, architecture.sequence_mixing_flops); eager
    # attention computes the full square
    attn_tok = sequence_mixing_flops(a, S, np.where(flash, get(a, "attn_keys") / S, 1.0))
    attn_rate = np.where(flash & (get(a, "attn_kernel") != 2),
                         get(a, "bf16_peak_flops") * ops.attention_efficiency(
                             get(a, "attn_span"), a.get("head_dim", 128.0), get(a, "attn_kernel"), get(a, "gpu_gen")),
                         bf16_rate)
    attn_rate = np.where(attn_rate > 0, attn_rate, bf16_rate)  # no attention layers (Mamba): any rate
    expert = a.get("expert_fwd_flops", np.zeros_like(a["fwd_block_flops"]))
    dense = a["fwd_block_flops"] - expert
    frac = a["bwd_layer_fraction"]
    # the LM head sits whole on the last pipeline stage (with the loss, _memory_traffic_seconds), which
    # sets the pipeline's pace: its FLOPs are split over tp only (x pp here, as the rest is over tp x pp)
    head = a["head_flops"] * pp
    per_tok_fwd = (dense / block_rate + expert / expert_rate + (head + a["adapter_flops"]) / bf16_rate
                   + attn_tok / attn_rate)
    per_tok_bwd = (frac * (a["bwd_block_factor"] * (dense / block_rate + expert / expert_rate)
                           + a["bwd_attn_factor"] * attn_tok / attn_rate + 2.0 * a["adapter_flops"] / bf16_rate)
                   + a["bwd_head_factor"] * head / bf16_rate)
    mode = get(a, "ckpt_code")
    share = get(a, "ckpt_share") * a["recompute_fraction"] * (mode >= 2)
    per_tok_rec = frac * (share * (dense / block_rate + expert / expert_rate + a["adapter_flops"] / bf16_rate
                                   + attn_tok / attn_rate) + (mode == 1) * attn_tok / attn_rate)
    scale = tokens / split
    return {"t_fwd": per_tok_fwd * scale, "t_bwd": per_tok_bwd * scale, "t_rec": per_tok_rec * scale,
            "t_attn_fwd_layer": attn_tok / attn_rate * tokens / tp / np.maximum(a["attn_layers"], 1.0),
            "t_gemm": (dense / block_rate + expert / expert_rate) * scale * (1.0 + frac * a["bwd_block_factor"]),
            "eff": eff, "rec_share": share, "attn_rate": attn_rate, "expert_rate": expert_rate,
            "t_head": (1.0 + a["bwd_head_factor"]) * a["head_flops"] * tokens / tp / bf16_rate}


def _memory_traffic_seconds(a: Arrays, c: PhysicsConstants, tokens: np.ndarray, bw: np.ndarray,
                            rec_share: np.ndarray) -> Arrays:
    """Memory-bound work of one micro-step (s): dequantisation, DoRA's norm, adapters' passes and launches,
    per-layer overhead, the loss, element-wise kernels and low-precision casts (physics/ops.py)."""
    split = a["tp"] * a["pp"]
    L = a["n_layers"]
    kind = np.asarray(a["dequant_bytes"]).astype(np.intp)
    # GPTQ's eager path dequantises in the forward (and its recompute) only: autograd keeps the weight it built
    passes = np.where(kind >= 4, 1.0, 2.0) + rec_share
    dq_table = np.asarray((0.0, c.dequant_bytes_nf4, c.dequant_bytes_gptq, precision.FP8_DEQUANT_BYTES,
                           gptq_eager_bytes(4), gptq_eager_bytes(8)), dtype=float)
    t_dequant = passes * dq_table[kind] * a["params_frozen_linear"] / split / bw
    is_dora = (a["method_code"] == MethodCode.DORA).astype(float)
    t_dequant = t_dequant + is_dora * passes * c.dora_bytes_per_weight * a["params_adapted"] / split / bw
    # LoRA-family: element-wise work per token on the adapted modules' inputs and outputs, and the
    # small kernels each adapted module launches whatever the tokens (DoRA runs more of them)
    recompute = 1.0 + 0.5 * rec_share
    fused_lora = get(a, "fused_lora") > 0
    # peft's LoRA path as counted (PhysicsConstants.adapter_passes); the other PEFT methods' element-wise
    # scalings (IA3's one multiply, ...) at PEFT_ADAPTER_PASSES
    lora = lora_family(a["method_code"])
    adapter_passes = np.where(fused_lora & (is_dora == 0), ops.FUSED_ADAPTER_PASSES,
                              np.where(lora, c.adapter_passes, PEFT_ADAPTER_PASSES))
    t_adapter = adapter_passes * recompute * tokens * a["adapter_io_elements"] * a["weight_bytes_compute"] / (
        split * bw)
    t_adapter = t_adapter + fp32_adapter_seconds(a, tokens, bw, recompute, (fused_lora & (is_dora == 0)) | ~lora)
    kernels = np.where(is_dora > 0, c.dora_kernels_per_module,
                       np.where(fused_lora, ops.FUSED_LORA_KERNELS, c.lora_kernels_per_module))
    # every tensor-parallel rank launches the same kernels; pipeline stages split the modules
    t_adapter_launch = recompute * a["adapted_modules"] * kernels * c.kernel_launch_s / a["pp"]
    t_overhead = c.overhead_s_per_layer * L / a["pp"] * recompute + t_adapter_launch
    # the loss over the vocabulary (last stage) and the activations streamed by norms, activation
    # functions and residual adds, as the framework's kernels stream them
    t_loss = tokens * a["vocab"] * ops.lm_loss_bytes(get(a, "ce_code"), c.loss_bytes_per_logit) / a["tp"] / bw
    act_el = activation_elements_per_token_layer(a)
    el_passes = np.where(get(a, "fused_elementwise") > 0, ops.FUSED_ELEMENTWISE_PASSES, c.elementwise_passes)
    t_elem = el_passes * tokens * act_el * a["weight_bytes_compute"] * L * a["bwd_layer_fraction"] / split / bw
    lowp = get(a, "lowp")
    io = a.get("linear_io_elements", np.zeros_like(tokens))
    t_cast = precision.cast_seconds(io / split, tokens, lowp, bw) * recompute
    t_elem = t_elem + eager_norm_rope_seconds(a, tokens, bw, rec_share)
    # MoE token permutation into expert order and back (ops.moe_permute_bytes), on the routed copies of the
    # GPU's tokens (sequence parallel: 1/tp of them)
    t_elem = t_elem + recompute * a["moe_layers"] / a["pp"] * ops.moe_permute_bytes(
        routed_bytes(a, tokens), a["ep"], get(a, "etp")) / bw
    return {"t_dequant": t_dequant, "t_overhead": t_overhead, "t_elementwise": t_loss + t_elem + t_adapter + t_cast,
            "t_loss": t_loss}


def routed_bytes(a: Arrays, tokens: np.ndarray) -> np.ndarray:
    """Bytes of the top-k routed copies of a GPU's tokens per MoE layer (sequence parallel: 1/tp of them)."""
    return tokens / np.where(get(a, "seq_par") > 0, a["tp"], 1.0) * a["hidden"] * np.maximum(a["top_k"], 1.0) \
        * a["weight_bytes_compute"]


def fp32_adapter_seconds(a: Arrays, tokens: np.ndarray, bw: np.ndarray, recompute: np.ndarray,
                         fused: np.ndarray) -> np.ndarray:
    """fp32 LoRA weights' extra casts and fp32 streams per micro-step (s), peft's unfused path
    (ops.fp32_adapter_bytes); 16-bit models only (an fp32 model has nothing to cast)."""
    lowp_model = a["weight_bytes_compute"] < 4
    on = np.where(lowp_model & ~fused, a.get("adapter_fp32", np.zeros_like(tokens)), 0.0)
    per = ops.fp32_adapter_bytes(a["adapter_in_elements"], a["adapter_io_elements"], on)
    return recompute * tokens * per / (a["tp"] * a["pp"]) / bw


def eager_norm_rope_seconds(a: Arrays, tokens: np.ndarray, bw: np.ndarray, rec_share: np.ndarray) -> np.ndarray:
    """Extra memory traffic of norms and RoPE run as eager fp32 op chains (frameworks.yaml `eager_norm_rope`)
    per micro-step (s), over the layers the backward runs through (the recomputed share again)."""
    attn_share, _mlp, _ssm = layer_shares(a)
    per = ops.eager_norm_rope_bytes(a["hidden"], a["q_dim"], a["kv_dim"], attn_share)
    layers = a["n_layers"] * a["bwd_layer_fraction"] * (1.0 + ops.EAGER_FORWARD_SHARE * rec_share)
    return get(a, "eager_norm_rope") * tokens * per * layers / (a["tp"] * a["pp"]) / bw


def _model_parallel_seconds(a: Arrays, c: PhysicsConstants, tokens: np.ndarray, ct: Arrays,
                            dom: Arrays | None) -> Arrays:
    """Tensor, context, expert and pipeline-parallel communication of one micro-step (s), recorded by
    domain in `dom` (None: not recorded)."""
    tp, pp, cp, ep = a["tp"], a["pp"], a["cp"], a["ep"]
    L = a["n_layers"]
    gpn = parallel.domain_gpus(a["gpus"], a["nodes"], get(a, "nvlink_domain"))  # the NVLink domain (parallel.py)
    rec_full = ct["rec_share"]
    # tensor parallel: 2 all-reduces (sequence parallel: all-gather + reduce-scatter, the same bytes) of the
    # layer activations forward, 2 backward (+2 recompute); overlapped with the GEMMs where the framework does
    act_bytes = tokens * a["hidden"] * a["weight_bytes_compute"]
    tp_calls = (4.0 + 2.0 * rec_full) * L / pp
    tp_ring = ring_time(act_bytes, tp, a["intra_bw"], 2.0, c)
    t_tp = parallel.tp_exposed(tp_calls * tp_ring, ct["t_gemm"], get(a, "tp_overlap"), c)
    # context parallel: ring attention passes K/V blocks (forward; K/V and their gradients backward),
    # overlapped with the attention of the block in hand; Ulysses: all-to-alls around attention
    cp_bw = parallel.link_bandwidth(tp * cp, gpn, a["intra_bw"], a["inter_bw"])
    kv_local = 2.0 * tokens * a["kv_dim"] / tp * a["weight_bytes_compute"]
    t_attn = ct["t_attn_fwd_layer"]
    ring = (parallel.ring_attention_exposed(kv_local, cp, t_attn, cp_bw, c) * (1.0 + rec_full)
            + parallel.ring_attention_exposed(2.0 * kv_local, cp, a["bwd_attn_factor"] * t_attn, cp_bw, c))
    uly_bytes, uly_once = parallel.ulysses_seconds(tokens, a["q_dim"] / tp, a["kv_dim"] / tp,
                                                   a["weight_bytes_compute"], cp, cp_bw, c)
    uly = (3.0 + rec_full) * uly_once
    ulysses = get(a, "cp_ulysses") > 0
    t_cp = np.where(cp > 1, a["attn_layers"] / pp * np.where(ulysses, uly, ring), 0.0)
    # expert parallel (Megatron-Core's all-to-all token dispatcher): each GPU sends its own tokens'
    # top-k copies to the experts' ranks (sequence parallel: the GPU holds 1/tp of the tokens), then the
    # expert-tensor-parallel group all-gathers what arrived; combine is the reverse (all-to-all after a
    # reduce-scatter). Dispatch and combine, forward and backward, per MoE layer, and the forward's again
    # where full recompute re-runs the layer (the dispatcher sits inside the checkpointed layer)
    etp = get(a, "etp")
    routed = routed_bytes(a, tokens)
    a2a = parallel.expert_all_to_all(routed, ep, etp, gpn, a["intra_bw"], a["inter_bw"], c)
    etp_gather = ring_time(routed * etp, etp, a["intra_bw"], 1.0, c)
    ep_calls = np.where(ep * etp > 1, (4.0 + 2.0 * rec_full) * a["moe_layers"] / pp, 0.0)
    t_ep = ep_calls * (a2a + etp_gather)
    # pipeline: activations to the next stage, forward and backward, once per virtual stage
    # (sequence parallel: each rank sends its 1/tp of the sequence, megatron-core p2p_communication's
    # tensor shape), at the intra-node link or the network share (parallel.pipeline_p2p_bandwidth)
    pp_bw = parallel.pipeline_p2p_bandwidth(tp, cp, a["dp"], gpn, a["intra_bw"], a["inter_bw"])
    p2p_bytes = act_bytes / np.where(get(a, "seq_par") > 0, tp, 1.0)
    pp_sends = np.where(pp > 1, 2.0 * get(a, "vpp"), 0.0)
    t_pp_p2p = pp_sends * p2p_bytes / (pp_bw * c.comm_efficiency)
    if dom is not None:  # by domain, before overlap (physics/comm_domains.py)
        record_where(dom, "tensor", False, ring_bytes(act_bytes, tp, 2.0), tp_ring, tp_calls)
        # the ring's K/V blocks (forward, again when recomputed; K/V and their gradients backward); a group
        # wider than the domain runs at the network's pace, so all of it is booked across
        ring_sent = np.maximum(cp - 1.0, 0.0) * kv_local * (3.0 + rec_full)
        cp_raw = np.where(ulysses, uly, ring_sent / (cp_bw * c.comm_efficiency)
                          + np.maximum(cp - 1.0, 0.0) * (2.0 + rec_full) * c.comm_latency_s)
        record_where(dom, "context", tp * cp > gpn, np.where(ulysses, (3.0 + rec_full) * uly_bytes, ring_sent),
                     np.where(cp > 1, cp_raw, 0.0), a["attn_layers"] / pp)
        record(dom, "expert", *parallel.expert_all_to_all_parts(routed, ep, etp, gpn, a["intra_bw"],
                                                                a["inter_bw"], c), ep_calls)
        record_where(dom, "expert_tensor", False, ring_bytes(routed * etp, etp, 1.0), etp_gather, ep_calls)
        record_where(dom, "pipeline", tp * cp * a["dp"] >= gpn, p2p_bytes,
                     p2p_bytes / (pp_bw * c.comm_efficiency), pp_sends)
    return {"t_tp": t_tp, "t_cp": t_cp, "t_ep": t_ep, "t_pp_p2p": t_pp_p2p}


def _dp_collective(a: Arrays, nbytes: np.ndarray, factor: float, c: PhysicsConstants, dom: Arrays | None,
                   times) -> np.ndarray:
    """`times` data-parallel collectives of `nbytes` per GPU (factor 2 all-reduce, 1 all-gather /
    reduce-scatter), hierarchical across domains (parallel.hierarchical_allreduce_parts), recorded in
    `dom`: over data x context ranks, the experts' share over the expert-data-parallel group, ep x etp / tp
    times smaller and further apart (Megatron-Core's expert_data_parallel_group, memory.expert_split_ratio)."""
    gpn = parallel.domain_gpus(a["gpus"], a["nodes"], get(a, "nvlink_domain"))
    # Megatron-Core orders ranks tp-cp-ep-dp-pp (parallel_state RankGenerator): a data x context group's
    # ranks are tp apart, an expert-data-parallel group's ep x etp apart
    stride, group = a["tp"], a["dp"] * a["cp"]
    share = np.where(a["params_total"] > 0, a["params_expert"] / a["params_total"], 0.0) * (a["ep"] > 1)
    r = expert_split_ratio(a)
    parts = [(nbytes * (1.0 - share), group, stride, True)]
    if np.any(share > 0):
        parts.append((nbytes * share / r, group / r, a["ep"] * get(a, "etp"), share > 0))
    total = 0.0
    for b, g, st, on in parts:
        b_in, b_out, s_in, s_out = parallel.hierarchical_allreduce_parts(
            b, np.maximum(g, 1.0), np.maximum(gpn / st, 1.0), a["intra_bw"], a["inter_bw"], c)
        w = np.where(on, times * factor / 2.0, 0.0)
        record(dom, "data", b_in, b_out, s_in, s_out, w)
        total = total + (s_in + s_out) * w
    return total


def _dp_seconds(a: Arrays, c: PhysicsConstants, dom: Arrays | None) -> np.ndarray:
    """Data-parallel communication of one step by sharding (s), before overlap, recorded by domain in `dom`."""
    split = a["tp"] * a["pp"]
    dp, ga, shard = a["dp"], a["grad_accum"], a["sharding"]
    # Megatron-Core's DDP (distributed optimizer over persistent grad buffers) reduces its buffer in its own
    # dtype: fp32 under grad_reduce_in_fp32, else the parameters' (distributed/distributed_data_parallel.py);
    # torch DDP under autocast, fp32 (ddp_grad_bytes)
    mcore = (get(a, "dist_opt") > 0) & (get(a, "grad_buffers") > 0)
    grad_bytes = np.where(get(a, "fp32_grads") > 0, 4.0, np.where(mcore, a["weight_bytes_compute"], c.ddp_grad_bytes))
    train_bytes_ddp = a["params_trainable"] / split * grad_bytes
    # adapters in FSDP1 block units reduce the whole flat parameter's gradient
    reduced = a["params_trainable"] + np.where(flat_parameter_gradients(a), a["params_frozen_linear"], 0.0)
    train_bytes_sh = reduced / split * c.sharded_grad_bytes
    all_bytes = a["params_total"] / split * a["weight_bytes_compute"]
    t_comm = np.zeros_like(a["micro_batch"] + shard)
    reduces = gradient_reductions(a)  # FSDP under no_sync: once, at the last micro-batch
    kinds = {k for k in ShardingCode if np.any(shard == k)}

    def coll(nbytes, factor, times, on):
        return _dp_collective(a, nbytes, factor, c, dom, np.where(on, times, 0.0))

    if kinds & {ShardingCode.NONE, ShardingCode.ZERO1}:  # DDP / ZeRO-1 / distributed optimizer: one all-reduce (RS + AG) of the gradients
        t_comm = t_comm + coll(train_bytes_ddp, 2.0, 1.0, shard <= ShardingCode.ZERO1)
    if ShardingCode.ZERO2 in kinds:  # ZeRO-2: reduce-scatter every micro-step, all-gather the updated weights
        on = shard == ShardingCode.ZERO2
        t_comm = t_comm + coll(train_bytes_sh, 1.0, reduces, on) + coll(
            a["params_trainable"] / split * a["weight_bytes_compute"], 1.0, 1.0, on)
    if kinds & {ShardingCode.ZERO3, ShardingCode.OFFLOAD}:  # ZeRO-3 / FSDP: all-gather forward and backward, reduce-scatter, per micro-step
        on = (shard == ShardingCode.ZERO3) | (shard == ShardingCode.OFFLOAD)
        t_comm = t_comm + coll(all_bytes, 1.0, ga * 2.0, on) + coll(train_bytes_sh, 1.0, reduces, on)
        t_comm = t_comm + np.where(shard == ShardingCode.OFFLOAD, ga * 2.0 * all_bytes / dp / host_bandwidth(a, c),
                                   0.0)
    if ShardingCode.HYBRID in kinds:  # hybrid: sharded within a node, gradients all-reduced across nodes
        on = shard == ShardingCode.HYBRID
        g = np.minimum(dp, a["gpus"] / a["nodes"])
        inner = (ga * 2.0 * ring_time(all_bytes, g, a["intra_bw"], 1.0, c)
                 + reduces * ring_time(train_bytes_sh, g, a["intra_bw"], 1.0, c))
        outer = ring_time(train_bytes_sh / g, a["nodes"], np.minimum(a["intra_bw"], a["inter_bw"]), 2.0, c)
        record(dom, "data", ga * 2.0 * ring_bytes(all_bytes, g, 1.0) + reduces * ring_bytes(train_bytes_sh, g, 1.0),
               ring_bytes(train_bytes_sh / g, a["nodes"], 2.0), inner, outer, on)
        t_comm = t_comm + np.where(on, inner + outer, 0.0)
    return t_comm


def step_time(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS, domains: bool | None = None) -> Arrays:
    """Breakdown of one optimizer step (s), part by part (contract.STEP_PARTS) and the total; with `domains`
    (default: up to DOMAIN_ROWS rows) the communication by domain too (physics/comm_domains.py)."""
    mb, S, ga = a["micro_batch"], a["seq_len"], a["grad_accum"]
    tp, pp, cp, dp = a["tp"], a["pp"], a["cp"], a["dp"]
    split = tp * pp
    tokens = mb * S / cp  # tokens per GPU per micro-step (context parallel splits the sequence)
    bw = a["mem_bw"] * c.bandwidth_efficiency
    ct = _compute_seconds(a, c, tokens)
    t_fwd, t_bwd, t_rec = ct["t_fwd"], ct["t_bwd"], ct["t_rec"]
    mt = _memory_traffic_seconds(a, c, tokens, bw, ct["rec_share"])
    micro_dom: Arrays | None = {} if (np.size(mb) <= DOMAIN_ROWS if domains is None else domains) else None
    par = _model_parallel_seconds(a, c, tokens, ct, micro_dom)
    host = host_bandwidth(a, c)
    t_offload = activation_offload_seconds(a, c, tokens, host, t_fwd + t_bwd)
    # PEFT methods' own work (physics/peft_methods.py): fp32 matmuls with built weights, weight products
    p_fwd, p_bwd, p_rec, p_launch = peft_step_times(a, c, tokens, split, pp)
    t_fwd, t_bwd, t_rec = t_fwd + p_fwd, t_bwd + p_bwd, t_rec + p_rec
    mt["t_overhead"] = mt["t_overhead"] + p_launch
    # LoRA over stacked MoE experts (physics/moe_lora.py): W + BA built every forward, its full gradient
    s_fwd, s_bwd, s_rec, s_launch = stacked_lora_seconds(a, c, tokens, bw, ct["expert_rate"], ct["rec_share"])
    t_fwd, t_bwd, t_rec = t_fwd + s_fwd, t_bwd + s_bwd, t_rec + s_rec
    mt["t_overhead"] = mt["t_overhead"] + s_launch

    # a vision tower's images, in bf16 at the blocks' GEMM efficiency (architecture.vision_tower_flops_per_micro)
    t_vision = vision_tower_flops_per_micro(a) / (get(a, "bf16_peak_flops") * ct["eff"] * a["matmul_rel"]) \
        if "vision_flops_per_sample" in a else 0.0
    t_micro = (t_fwd + t_bwd + t_rec + mt["t_dequant"] + mt["t_elementwise"] + mt["t_overhead"] + par["t_tp"]
               + par["t_cp"] + par["t_ep"] + par["t_pp_p2p"] + t_offload + t_vision)
    # the schedule's fill and drain run through the stages before the last: without the LM head and loss
    # (1F1B: m x the last stage's micro-step + (pp - 1) x the others')
    t_bubble = parallel.pipeline_bubble_fraction(pp, get(a, "vpp")) * (t_micro - ct["t_head"] - mt["t_loss"])
    t_pipeline = ga * t_micro + t_bubble

    # optimizer: bytes per trainable parameter, divided by the ranks that own a shard; on the host when
    # offloaded (ZeRO-offload: gradients down, updated 16-bit weights up)
    opt_code = a["optimizer_code"]
    opt_bytes = np.asarray((c.optimizer_bytes_adamw, c.optimizer_bytes_8bit, c.optimizer_bytes_8bit,
                            c.optimizer_bytes_sgd, c.optimizer_bytes_sgd_momentum,
                            c.optimizer_bytes_adafactor,
                            # GaLore-AdamW: costed as AdamW's traffic (its projections are 4 r m n FLOPs per
                            # matrix per step; the SVD every update_proj_gap steps is not costed)
                            c.optimizer_bytes_adamw,
                            # 4-bit AdamW: the 8-bit step's traffic (weights and gradients dominate it)
                            c.optimizer_bytes_8bit), dtype=float)[np.asarray(opt_code).astype(np.intp)]
    shard = a["sharding"]
    opt_div = np.where(shard >= ShardingCode.ZERO1, dp * cp, 1.0) * split
    offload = (shard == ShardingCode.OFFLOAD) | (get(a, "offload_code") > 0)
    host_opt = a["params_trainable"] / opt_div * (opt_bytes + 2.0 * a["weight_bytes_compute"]) / host
    t_opt = np.where(offload, host_opt, a["params_trainable"] / opt_div * opt_bytes / bw)
    t_opt = t_opt + precision.weight_cast_seconds((a["params_trainable"] + a["params_frozen_linear"]) / split,
                                        get(a, "lowp"), bw)

    step_dom: Arrays | None = None if micro_dom is None else scaled(micro_dom, ga)
    t_comm = _dp_seconds(a, c, step_dom)
    # overlap: DDP buckets hide behind the last micro-step's backward; sharded collectives behind
    # every micro-step's forward and backward
    hide = np.where(shard >= ShardingCode.ZERO3, ga * (t_fwd + t_bwd + t_rec), t_bwd + t_rec) * c.overlap_fraction
    t_comm_exposed = np.maximum(t_comm - hide, 0.0)

    total = t_pipeline + t_opt + t_comm_exposed
    return {
        "forward_s": ga * t_fwd, "backward_s": ga * t_bwd, "recompute_s": ga * t_rec,
        "dequant_s": ga * mt["t_dequant"], "elementwise_s": ga * (mt["t_elementwise"] + t_offload),
        "overhead_s": ga * mt["t_overhead"],
        "tensor_parallel_s": ga * (par["t_tp"] + par["t_cp"] + par["t_ep"] + par["t_pp_p2p"]),
        "pipeline_bubble_s": t_bubble, "optimizer_s": t_opt, "communication_s": t_comm_exposed,
        "vision_tower_s": ga * t_vision * np.ones_like(total), "communication_total_s": t_comm,
        "step_s": total, "efficiency": ct["eff"], "compute_s": ga * (t_fwd + t_bwd + t_rec),
        **(step_dom or {})}


def model_flops_per_step(a: Arrays) -> np.ndarray:
    """Model FLOPs of one optimizer step, all GPUs (for MFU): forward + backward with attention, no recompute."""
    S = a["seq_len"]
    attn_tok = sequence_mixing_flops(a, S, np.where(a["flash_attn"] > 0, get(a, "attn_keys") / S, 1.0))
    per_tok = (a["fwd_block_flops"] + a["head_flops"] + attn_tok + a["adapter_flops"]) + (
        a["bwd_layer_fraction"] * (a["bwd_block_factor"] * a["fwd_block_flops"] + 2.0 * attn_tok
                                   + 2.0 * a["adapter_flops"]) + a["bwd_head_factor"] * a["head_flops"])
    return per_tok * a["micro_batch"] * S * a["grad_accum"] * a["dp"]


def tokens_per_step(a: Arrays) -> np.ndarray:
    """The run's own tokens per optimizer step (prompt tuning's virtual positions not counted)."""
    return a["micro_batch"] * (a["seq_len"] - a.get("virtual_tokens", 0.0)) * a["grad_accum"] * a["dp"]
