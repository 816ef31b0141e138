"""Architecture terms beyond dense softmax attention: local attention spans, MLA widths, Mamba scans and
states, vision towers (model-side scalars become `terms.ModelTerms` fields; array functions broadcast).
"""

from __future__ import annotations

import numpy as np

from tuneplan.errors import InputError
from tuneplan.specs.model import ModelSpec, SSMShape, VisionTower

Arrays = dict[str, np.ndarray]

MAMBA1_SCAN_FLOPS_PER_STATE = 9.0
"""FLOPs per token, channel and state of Mamba-1's selective scan (discretise A and B, update the
state, read it out with C): 9 B L D N in Gu & Dao 2023 (Mamba, section 3.3 / appendix D)."""

VISION_ACT_ELEMENTS_PER_HIDDEN = 10.0
"""Saved-for-backward elements per patch per ViT layer, in units of the tower width: two LayerNorm
inputs/outputs (4), q, k, v and the attention output (4), the MLP input and output (2); the MLP's
inner tensors are added from its width (the same bookkeeping as the LM layers' in `memory`)."""


def attention_span(seq_len: np.ndarray, window: np.ndarray | float, causal: np.ndarray | float) -> np.ndarray:
    """Mean keys per query a layer computes scores for: `causal` x S for a full layer (FlashAttention 0.5,
    eager 1.0); limited to `window` tokens with a kernel that skips blocks (causal < 1), the exact causal
    mean w (1 - (w - 1) / (2 S)) for S > w; eager attention computes the whole square (S)."""
    S = np.asarray(seq_len, dtype=float)
    w = np.maximum(np.asarray(window, dtype=float), 1.0)
    full = causal * S
    limited = np.where(w < S, w * (1.0 - (w - 1.0) / (2.0 * S)), full)
    return np.where(np.asarray(causal) < 1.0, np.minimum(full, limited), S)


def attention_flops_per_key(model: ModelSpec) -> float:
    """QK^T and AV per query-key pair in one layer: 2 n_heads (d_qk + d_v) (MLA: 192 + 128 per head
    for DeepSeek-V3; plain attention: 4 n_heads head_dim)."""
    dqk = model.qk_head_dim or model.head_dim
    dv = model.v_head_dim or model.head_dim
    return 2.0 * model.n_heads * (dqk + dv)


def ssm_scan_flops(ssm: SSMShape) -> float:
    """Forward FLOPs per token of one Mamba layer's sequence mixing: the depthwise conv1d (2 x channels x
    kernel) plus the scan. Mamba-1: 9 d_inner d_state. Mamba-2 (SSD, chunks of Q tokens, H heads of P
    channels, N states): C B^T (2 Q N), its product with x (2 Q P), the chunk states and their read-out
    (4 N P): H (2 Q (N + P) + 4 N P); chunked linear attention (Gated DeltaNet, lightning) alike with N the
    key and P the value width (DeltaNet's WY correction not counted)."""
    conv = 2.0 * ssm.conv_dim * ssm.conv_kernel
    if ssm.kind != "mamba1":  # SSD and chunked linear attention: the same chunk algebra
        H, P, N, Q = ssm.n_heads, ssm.head_dim, ssm.d_state, ssm.chunk
        return conv + H * (2.0 * Q * (N + P) + 4.0 * N * P)
    return conv + MAMBA1_SCAN_FLOPS_PER_STATE * ssm.d_inner * ssm.d_state


def ssm_activation_elements(ssm: SSMShape, hidden: int) -> float:
    """Saved elements per token of one Mamba layer: the norm's input and output (2h), in_proj's output,
    the conv output, the scan output and the gated-norm output (Mamba-2: z, x, B, C, dt = 2 d_inner +
    2 G N + H; Mamba-1: x, z, then x_proj's dt/B/C), plus Mamba-2's chunk states (H P N per Q tokens)."""
    if ssm.kind in ("deltanet", "lightning", "mamba2"):
        proj = ssm.proj_width if ssm.kind != "mamba2" else 2.0 * ssm.d_inner + 2.0 * ssm.n_groups * ssm.d_state + ssm.n_heads
        states = ssm.n_heads * ssm.head_dim * ssm.d_state / max(1, ssm.chunk)
        return 2.0 * hidden + proj + ssm.conv_dim + 2.0 * ssm.d_inner + states
    proj = 2.0 * ssm.d_inner + ssm.dt_rank + 2.0 * ssm.d_state
    return 2.0 * hidden + proj + ssm.conv_dim + 3.0 * ssm.d_inner


def mixer_terms(model: ModelSpec) -> dict[str, float]:
    """The sequence mixers' (attention, MLA, Mamba) fields of `terms.ModelTerms`: per token, whole model."""
    per_key = attention_flops_per_key(model)
    n_attn = model.attention_layers
    n_local = min(model.n_local_attention_layers, n_attn)
    ssm = model.ssm
    latent = 2.0 * (model.q_latent_dim + model.kv_latent_dim) if model.is_mla else 0.0
    if model.is_mla:  # k is (nope + rope) wide, v is v_head_dim wide: their mean per kv slot
        q_dim = float(model.n_heads * model.qk_head_dim)
        kv_dim = model.n_kv_heads * (model.qk_head_dim + model.v_head_dim) / 2.0
    else:
        q_dim = float(model.n_heads * model.head_dim)
        kv_dim = float(model.n_kv_heads * model.head_dim)
    return {
        "attn_flops_per_seq": per_key * (n_attn - n_local),  # QK^T and AV over the full-attention layers
        "attn_local_flops_per_key": per_key * n_local,
        "attn_window": float(model.attention_window or 0),
        "attn_latent_elements": latent,
        "ssm_flops": ssm_scan_flops(ssm) * ssm.n_layers if ssm else 0.0,
        "ssm_act_elements": ssm_activation_elements(ssm, model.hidden_size) * ssm.n_layers if ssm else 0.0,
        "dense_mlp_layers": float(model.dense_mlp_layers),
        "q_dim": q_dim,
        "kv_dim": kv_dim,
    }


def sequence_mixing_flops(a: Arrays, seq_len: np.ndarray, causal: np.ndarray | float) -> np.ndarray:
    """Forward FLOPs per token of the sequence mixers: full attention layers over `causal` x S keys,
    local layers over their span (`attention_span`), Mamba scans (independent of S)."""
    local = a.get("attn_local_flops_per_key")
    out = a["attn_flops_per_seq"] * seq_len * causal
    if local is not None:
        out = out + local * attention_span(seq_len, a["attn_window"], causal) + a["ssm_flops"]
    return out


def layer_shares(a: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(attention layers / layers, dense-MLP layers / non-MoE layers, Mamba elements per token per
    layer): 1, 1, 0 for a plain transformer; hybrid stacks (Nemotron-H, Jamba, Granite-4.0-H) have
    layers without attention and, in Nemotron-H, layers without an MLP."""
    L = np.maximum(a["n_layers"], 1.0)
    attn_share = a["attn_layers"] / L
    if "dense_mlp_layers" not in a:
        return attn_share, np.ones_like(attn_share), np.zeros_like(attn_share)
    non_moe = np.maximum(a["n_layers"] - a["moe_layers"], 1.0)
    mlp_share = np.where(a["dense_mlp_layers"] >= 0, np.minimum(a["dense_mlp_layers"] / non_moe, 1.0), 1.0)
    return attn_share, mlp_share, a["ssm_act_elements"] / L


def kv_cache_bytes_per_token(model: ModelSpec, context: int, bytes_per_element: float = 2.0) -> float:
    """KV cache per token at `context` tokens, all layers (decode and RL rollouts): full layers 2 x kv heads
    x head_dim (MLA: the compressed latent), local layers window / context of that, Mamba layers a fixed
    state (d_inner x d_state + conv) per sequence spread over the context."""
    per_layer = float(model.kv_latent_dim) if model.is_mla else 2.0 * model.n_kv_heads * model.head_dim
    n_local = min(model.n_local_attention_layers, model.attention_layers)
    n_full = model.attention_layers - n_local
    ctx = max(1, context)
    share = min(1.0, model.attention_window / ctx) if model.attention_window else 1.0
    elements = per_layer * (n_full + n_local * share)
    if model.ssm is not None:
        s = model.ssm
        elements += s.n_layers * (s.d_inner * s.d_state + s.conv_dim * (s.conv_kernel - 1)) / ctx
    return elements * bytes_per_element


def vision_flops_per_image(v: VisionTower) -> float:
    """Forward FLOPs of one image through the tower: 2 per weight per patch for the blocks, attention
    over the image's patches (full layers) or over a window (Qwen2.5-VL's windowed layers) at
    4 x width per query-key pair, and the projector on the merged tokens."""
    patches = float(v.patches_per_image)
    per_tile = patches / max(1, v.tiles)
    blocks = 2.0 * sum(lin.in_features * lin.out_features * lin.n_layers for lin in v.linears) * patches
    n_full = v.depth if v.n_full_layers < 0 else v.n_full_layers
    span_windowed = float(min(v.window, per_tile)) if v.window else per_tile
    attn = 4.0 * v.hidden * patches * (n_full * per_tile + (v.depth - n_full) * span_windowed)
    merged = patches / (v.merge * v.merge)
    proj = 2.0 * merged * sum(lin.in_features * lin.out_features for lin in v.projector)
    return blocks + attn + proj


def vision_activation_elements_per_image(v: VisionTower) -> float:
    """Saved elements of one image through a trained tower: per patch per layer
    `VISION_ACT_ELEMENTS_PER_HIDDEN` x width + the MLP's inner tensors (gated 3, plain 2 widths)."""
    inner = (3.0 if v.gated else 2.0) * v.intermediate
    return float(v.patches_per_image) * v.depth * (VISION_ACT_ELEMENTS_PER_HIDDEN * v.hidden + inner)


def sized_tower(model: ModelSpec, image_px: int) -> VisionTower | None:
    """The model's vision tower, at `image_px` pixels where its resolution is dynamic (0: as configured)."""
    v = model.vision
    if v is not None and image_px and v.dynamic:
        from tuneplan.specs.architectures.vision import with_image_size

        v = with_image_size(model, image_px).vision or v
    return v


def vision_terms(model: ModelSpec, images: int, trained: bool, image_px: int = 0) -> dict[str, float]:
    """The vision tower's fields of `terms.ModelTerms` (none without a tower: their defaults, 0)."""
    v = sized_tower(model, image_px)
    if images and v is None:
        raise InputError("images-per-example", f"{model.name} has no vision tower (a text-only config); "
                         "pick a vision-language model (e.g. Qwen/Qwen2.5-VL-7B-Instruct, "
                         "google/gemma-3-4b-it.multimodal, llava-hf/llava-1.5-7b-hf)")
    if v is None:
        return {}
    full = vision_activation_elements_per_image(v)
    ckpt = float(v.patches_per_image) * v.depth * v.hidden + full / max(1, v.depth)
    el_bytes = 2.0  # 16-bit activations
    acts, ckpt_acts = (full * images * el_bytes, ckpt * images * el_bytes) if trained else (0.0, 0.0)
    return {"images": float(images), "image_tokens": float(images * v.tokens_per_image),
            "vision_flops_per_sample": vision_flops_per_image(v) * images, "vision_trainable": 1.0 if trained else 0.0,
            "vision_act_bytes_per_sample": acts, "vision_ckpt_bytes_per_sample": ckpt_acts,
            "params_vision": float(model.params_vision)}


def vision_trainable_split(model: ModelSpec, job, trainable: float, frozen_other: float) -> tuple[float, float]:
    """(trainable, frozen other) parameters with the vision tower frozen unless `job.train_vision_tower`
    (then all its weights train, whatever the language model's method)."""
    tower = float(model.params_vision)
    if job.method == "full" and not job.train_vision_tower:
        return trainable - tower, frozen_other + tower
    if job.method != "full" and job.train_vision_tower:
        return trainable + tower, frozen_other - tower
    return trainable, frozen_other


def vision_tower_flops_per_micro(a: Arrays) -> np.ndarray:
    """Tower FLOPs per GPU per micro-step (split over tp x pp like the LM): forward, and backward 2x forward
    only when trained (a frozen tower at the input needs no gradient)."""
    fwd = a["micro_batch"] * a["vision_flops_per_sample"] / (a["tp"] * a["pp"])
    return fwd * (1.0 + 2.0 * a["vision_trainable"] + a["grad_ckpt"] * a["vision_trainable"])


def vision_activation_bytes(a: Arrays) -> np.ndarray:
    """Saved tower activations per GPU (a trained tower; a frozen one runs without saving any)."""
    per = np.where(a["grad_ckpt"] > 0, a["vision_ckpt_bytes_per_sample"], a["vision_act_bytes_per_sample"])
    return a["micro_batch"] * per / a["tp"]


def architecture_assumptions(model: ModelSpec, images: int = 0, trained: bool = False,
                             image_px: int = 0) -> list[str]:
    """Lines for the estimate's assumptions: how the model's architecture was costed."""
    out: list[str] = []
    if model.n_local_attention_layers:
        kind = "sliding-window" if model.local_attention == "sliding" else "chunked"
        out.append(f"{model.n_local_attention_layers} of {model.attention_layers} attention layers are {kind} "
                   f"({model.attention_window} tokens): with FlashAttention they compute only that span; "
                   "eager attention computes the full square and masks it.")
    if model.is_mla:
        out.append(f"Multi-head latent attention: q/k {model.qk_head_dim} and v {model.v_head_dim} wide per head; "
                   f"KV cache {model.kv_latent_dim} elements per token per layer (compressed); training keeps "
                   "the decompressed k and v.")
    if model.ssm is not None:
        s = model.ssm
        label = {"mamba1": "Mamba-1", "mamba2": "Mamba-2", "deltanet": "Gated DeltaNet (linear attention)",
                 "lightning": "lightning (linear) attention"}.get(s.kind, s.kind)
        out.append(f"{s.n_layers} {label} layers: scan and conv1d FLOPs added to the sequence mixing "
                   f"({s.d_inner} channels x {s.d_state} states" + (f", chunks of {s.chunk}" if
                                                                    s.kind != "mamba1" else "") + ").")
    if model.is_moe and model.n_shared_experts:
        out.append(f"MoE: {model.experts_per_token} of {model.n_experts} experts per token + "
                   f"{model.n_shared_experts} shared, in {model.n_moe_layers} of {model.n_layers} layers.")
    v = sized_tower(model, image_px)
    if v is not None:
        res = (f"images assumed {v.image_size}x{v.image_size} px (dynamic resolution; --image-size to change)"
               if v.dynamic else f"images at the tower's {v.image_size}x{v.image_size} px")
        tiles = f", {v.tiles} tiles" if v.tiles > 1 else ""
        out.append(f"Vision tower ({v.kind}, {v.depth} layers x {v.hidden}): {res}{tiles} -> {v.patches_per_image} "
                   f"patches, {v.tokens_per_image} LM tokens per image; {images} image(s) per example"
                   + (f" add {images * v.tokens_per_image} tokens to each sample" if images else "")
                   + ("; the tower is trained (full backward through it)." if trained else
                      "; the tower is frozen (forward only, no saved activations; --train-vision-tower to train it)."))
    return out
