"""Saved activations (bytes per GPU) under checkpointing (none, selective, full, offload; every k layers),
activation offload, low-precision saved inputs and sequence parallel, and the host copies' exposed time.
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.architecture import layer_shares
from tuneplan.physics.codes import MethodCode, lora_family
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.ops import dora_saved_bytes_per_layer
from tuneplan.physics.precision import SAVED_LINEAR_INPUT_BYTES
from tuneplan.physics.stack import get

Arrays = dict[str, np.ndarray]

OFFLOAD_RESIDENT_LAYERS = 2.0
"""Layers whose saved tensors stay on the GPU under activation offload (count): the one computing and
the one being copied / prefetched (torchtune's OffloadActivations, Megatron's cpu_offloading_num_layers)."""


def mlp_widths(a) -> tuple[np.ndarray, np.ndarray]:
    """(dense, MoE) MLP inner width a token passes: the intermediate, or the top-k experts' widths."""
    return a["intermediate"], np.maximum(a["top_k"], 1.0) * a["moe_intermediate"]


def _by_layer_kind(on, a, el_bytes) -> dict[str, np.ndarray]:
    """The MLP's inner tensor (`mlp_widths` x el_bytes) per dense and MoE layer where `on`, else 0."""
    dense, moe = mlp_widths(a)
    return {"dense": np.where(on, dense * el_bytes, 0.0), "moe": np.where(on, moe * el_bytes, 0.0)}


def linear_input_saving(a, el_bytes):
    """Bytes per token per layer a low-precision recipe saves by keeping its linears' inputs at 8 bits
    (the inputs of q/k/v (h), o (q), gate/up (h), down (I; MoE: top-k experts' widths))."""
    lowp = get(a, "lowp")
    saved = np.where(lowp == 1, SAVED_LINEAR_INPUT_BYTES[1], np.where(lowp == 2, SAVED_LINEAR_INPUT_BYTES[2], el_bytes))
    inter_dense, inter_moe = mlp_widths(a)
    width = 2.0 * a["hidden"] + a["q_dim"]
    return {"dense": (width + inter_dense) * (el_bytes - saved), "moe": (width + inter_moe) * (el_bytes - saved)}


def fused_swiglu_saving(a, el_bytes):
    """Bytes per token per layer a fused SwiGLU saves (dense, MoE): the SiLU output it recomputes in
    the backward instead of keeping (I elements; MoE: top-k experts' widths). Gated MLPs only."""
    return _by_layer_kind((get(a, "fused_elementwise") > 0) & (a["gated"] > 0), a, el_bytes)


def replicated_bytes(a, el_bytes):
    """Bytes per token per layer that tensor parallelism does not split unless sequence parallel is on:
    the norms' inputs and outputs of attention and MLP (4h elements; Korthikanti et al. 2022, Sec. 4.2.2)."""
    on = (get(a, "seq_par") > 0) | (a["tp"] <= 1)
    return np.where(on, 0.0, 4.0 * a["hidden"] * el_bytes)


def checkpointed_activations(a, tokens, per_layer, layer_input, eager_scores, layers):
    """Saved activations of `layers` layers (bytes) by checkpointing mode: none, every layer's full set;
    selective, without eager attention's scores (Megatron's selective recompute); full, checkpointed
    layers (1/ckpt_every) keep their input, the others their full set, plus one layer being recomputed;
    offload, the checkpointed inputs go to the host, two stay. Activation offload keeps
    OFFLOAD_RESIDENT_LAYERS layers' tensors; `offloaded_layers` removes those layers'."""
    mode = get(a, "ckpt_code")
    share = np.clip(get(a, "ckpt_share"), 0.0, 1.0)
    layers = layers - offloaded_layers(a, layers)
    full = tokens * layers * per_layer
    selective = tokens * layers * (per_layer - eager_scores)
    ckpt = tokens * (layers * share * layer_input + layers * (1.0 - share) * per_layer) + tokens * per_layer
    offload = tokens * (np.minimum(layers * share, OFFLOAD_RESIDENT_LAYERS) * layer_input
                        + layers * (1.0 - share) * per_layer) + tokens * per_layer
    acts = np.select([mode == 1, mode == 2, mode == 3], [selective, ckpt, offload], default=full)
    resident = tokens * np.minimum(layers, OFFLOAD_RESIDENT_LAYERS) * per_layer
    return np.where(get(a, "act_offload") > 0, np.minimum(acts, resident), acts)


def offloaded_layers(a, layers):
    """Layers per pipeline stage whose saved activations go to host memory by count (megatron-core 0.19.2
    model_parallel_config.py cpu_offloading_num_layers, through Transformer Engine's cpu offload context;
    transformer_config.py requires it below num_layers, without pipeline parallelism or recompute): at
    most all but the one computing."""
    return np.clip(get(a, "act_offload_layers"), 0.0, np.maximum(layers - 1.0, 0.0))


def offloaded_bytes(a, tokens, per_layer, layer_input, layers):
    """Bytes copied to host memory and back per micro-step (each way): activation offload copies every
    layer's saved tensors (a number of layers: theirs), checkpoint offload the checkpointed layers' inputs."""
    mode = get(a, "ckpt_code")
    share = np.clip(get(a, "ckpt_share"), 0.0, 1.0)
    ck = np.where(mode == 3, tokens * layers * share * layer_input, 0.0) + tokens * offloaded_layers(a, layers) * per_layer
    return np.where(get(a, "act_offload") > 0, tokens * layers * per_layer, ck)


def activation_bytes_per_token_layer(a: Arrays, c: PhysicsConstants = DEFAULT_CONSTANTS) -> Arrays:
    """Saved-for-backward bytes per token per layer (dense layers and MoE layers), at 2 bytes per
    element for 16-bit training (4 for fp32)."""
    h, q, kv = a["hidden"], a["q_dim"], a["kv_dim"]
    gated = a["gated"] > 0
    inter = a["intermediate"]
    # hybrid stacks: attention and dense MLPs only in the layers that have them, plus the Mamba mixers
    attn_share, mlp_share, ssm_per_layer = layer_shares(a)
    mlp_dense = (np.where(gated, 4.0 * inter, 2.0 * inter) + 2.0 * h) * mlp_share  # norm in/out + MLP internals
    attn = 2.0 * h + 2.0 * q + 3.0 * kv  # norm in/out, q (pre/post rope), k (pre/post), v, attn out
    attn = attn + a.get("attn_latent_elements", 0.0)  # MLA: the compressed q and kv (and their norms)
    eager_scores = np.where(a["flash_attn"] > 0, 0.0, a["n_heads"] * a["seq_len"] / a["cp"])
    flash_stats = np.where(a["flash_attn"] > 0, 2.0 * a["n_heads"] / np.maximum(h, 1.0), 0.0)
    mixers = (attn + eager_scores + flash_stats) * attn_share + ssm_per_layer
    moe_inner = np.where(gated, 4.0 * a["moe_intermediate"], 2.0 * a["moe_intermediate"])
    mlp_moe = 2.0 * h + np.maximum(a["top_k"], 1.0) * (h + moe_inner) + 2.0 * a["n_experts"]
    lora_extra = (a["lora_rank"] * 2.0 * a["adapted_inputs_per_layer"]
                  + c.lora_dropout_copies * a["adapted_inputs_per_layer"] * h)
    el_bytes = np.where(a["weight_bytes_compute"] >= 4, 4.0, 2.0)
    # NF4 (bitsandbytes Linear4bit): each quantized linear's input cast to the 4-bit layer's compute dtype
    # (float32 unless set) and kept for its backward, on top of the 16-bit copy
    nf4 = a["dequant_bytes"] == 1
    quant_inputs, quant_inputs_moe = (np.where(nf4, c.nf4_input_bytes * (2.0 * h + q + w), 0.0) for w in mlp_widths(a))
    # fp32 adapters over 16-bit weights (peft >= 0.12 default, JobSpec.adapter_dtype): every adapted module
    # casts its input to fp32 for lora_A, which keeps that copy for backward: 4 bytes per input element,
    # per module (q, k and v each keep their own); NF4 layers' own fp32 input copy is quant_inputs
    cast = (a["adapter_fp32"] > 0) & (a["weight_bytes_compute"] < 4) & (a["dequant_bytes"] != 1)
    adapter_cast = np.where(cast, 4.0 * a["adapter_in_elements"] / np.maximum(a["n_layers"], 1.0), 0.0)
    adapter_cast = adapter_cast + dora_saved_bytes_per_layer(  # DoRA keeps its frozen and low-rank outputs
        a["adapter_io_elements"], a["adapter_in_elements"], a["n_layers"], np.where(cast, 4.0, el_bytes),
        a["method_code"] == MethodCode.DORA)
    dense = ((mixers + mlp_dense + lora_extra) * el_bytes + quant_inputs
             + adapter_cast) * c.activation_scale
    moe = ((mixers + mlp_moe + lora_extra) * el_bytes + quant_inputs_moe
           + adapter_cast) * c.activation_scale
    return {"dense": dense, "moe": moe, "layer_input": h * el_bytes}


def activation_offload_seconds(a, c, tokens, host_bw, overlap_s):
    """Exposed time of the host copies of offloaded activations per micro-step (s): out during the
    forward and back during the backward over the host link, overlapped with compute (copies on their
    own CUDA stream): max(copy - compute, 0)."""
    mode = get(a, "ckpt_code")
    if not (np.any(mode == 3) or np.any(get(a, "act_offload") > 0) or np.any(get(a, "act_offload_layers") > 0)):
        return np.zeros_like(np.asarray(tokens, dtype=float))
    per = activation_bytes_per_token_layer(a, c)
    layers = a["n_layers"] / a["pp"] * a["bwd_layer_fraction"]
    nbytes = offloaded_bytes(a, tokens, per["dense"] / a["tp"], per["layer_input"], layers)
    return np.maximum(2.0 * nbytes / host_bw - overlap_s, 0.0)


def backward_peak_bytes(grads, acts, logits, a):
    """Gradients, saved activations and loss buffers at the step's peak (bytes per GPU): with
    zero_grad(set_to_none=True) and one micro-step a step, gradients are written as activations are freed,
    max(activations + loss, gradients); accumulated, in a persistent buffer (frameworks.yaml grad_buffers)
    or reduce-scattered on a communication stream (sharded runs; record_stream): the sum."""
    on_demand = (a["grad_accum"] <= 1) & (get(a, "grad_buffers") == 0) & (a["sharding"] == 0)
    return np.where(on_demand, np.maximum(acts + logits, grads), grads + acts + logits)


def frozen_product_saving(a, el_bytes):
    """Bytes per token per layer not saved when the MLP's down projection is frozen (dense, MoE): its input,
    act(gate) x up, is kept only for the down weight's gradient, or by a compute-dtype adapter on down
    (adapted when an adapted input is as wide as the intermediate; fp32 adapters keep their own copy).
    Quantised bases (bitsandbytes, GPTQ kernels) save their inputs."""
    own_copy = (a.get("adapter_fp32", 0.0) > 0) & (a["weight_bytes_compute"] < 4)
    down_adapted = a["adapter_in_elements"] / np.maximum(a["n_layers"], 1.0) >= np.maximum(
        a["intermediate"], a["moe_intermediate"])
    on = lora_family(a["method_code"]) & (a["dequant_bytes"] == 0) & (own_copy | ~down_adapted) & (
        a["gated"] > 0)
    return _by_layer_kind(on, a, el_bytes)
