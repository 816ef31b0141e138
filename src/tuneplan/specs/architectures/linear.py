"""Hybrid linear / softmax attention stacks: Qwen3-Next (Gated DeltaNet + gated attention) and
MiniMax-M1 (lightning attention + softmax attention), both with MoE MLPs in every layer."""

from __future__ import annotations

from collections.abc import Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.base import LinearAttn, decoder_spec, int_key, register
from tuneplan.specs.architectures.llama import llama_decoder
from tuneplan.specs.model import ModelSpec

DELTANET_CHUNK = 64
"""Tokens per chunk of the chunked Gated DeltaNet kernel (flash-linear-attention's chunk_gated_delta_rule)."""

LIGHTNING_BLOCK = 256
"""Tokens per block of MiniMax's lightning attention (intra-block softmax-free attention, inter-block state)."""


@register("qwen3_next")
def read_qwen3_next(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Qwen3-Next: 3 of every 4 layers Gated DeltaNet (q/k of linear_key_head_dim for
    linear_num_key_heads, v of linear_value_head_dim for linear_num_value_heads, a causal conv1d over
    q, k and v), every 4th gated softmax attention (q_proj also writes an output gate; q/k norms),
    an MoE with a sigmoid-gated shared expert in every layer."""
    d = llama_decoder(cfg, mt)
    L, h = d.n_layers, d.h
    every = int_key(cfg, "full_attention_interval", 4)
    d.mixers = ["attention" if (i + 1) % every == 0 else "linear" for i in range(L)]
    nk = int_key(cfg, "linear_num_key_heads")
    nv = int_key(cfg, "linear_num_value_heads")
    kd = int_key(cfg, "linear_key_head_dim")
    vd = int_key(cfg, "linear_value_head_dim")
    if nv % nk:
        raise InputError("linear_num_value_heads", f"{nv} value heads must be a multiple of {nk} key heads")
    key, value = nk * kd, nv * vd
    kernel = int_key(cfg, "linear_conv_kernel_dim", 4)
    conv = 2 * key + value
    d.linear = LinearAttn(
        kind="deltanet",
        projections=[("in_proj_qkvz", h, 2 * key + 2 * value), ("in_proj_ba", h, 2 * nv), ("out_proj", value, h)],
        other_per_layer=conv * kernel + 2 * nv + vd,  # conv1d (no bias), dt_bias + A_log, gated RMSNorm
        n_heads=nv, k_dim=kd, v_dim=vd, conv_kernel=kernel, conv_channels=conv, chunk=DELTANET_CHUNK)
    d.q_gate, d.qk_norm = True, "head"
    return decoder_spec(d, cfg, name, source)


def _minimax_layers(cfg: Mapping, L: int) -> list[str]:
    types = cfg.get("attn_type_list")
    if not isinstance(types, list) or len(types) != L or set(types) - {0, 1}:
        raise InputError("attn_type_list", f"must list 0 (lightning) or 1 (softmax) for each of the {L} layers")
    return ["attention" if t == 1 else "linear" for t in types]


@register("minimax_m1", "minimax", "minimax_text_01")
def read_minimax(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """MiniMax-M1 / Text-01: lightning attention (qkv of all heads, a sigmoid output gate, an RMSNorm
    over heads x head_dim) in the layers `attn_type_list` marks 0, GQA softmax attention in those it
    marks 1; a gated-expert MoE in every layer."""
    d = llama_decoder(cfg, mt)
    h, inner = d.h, d.nh * d.hd
    d.mixers = _minimax_layers(cfg, d.n_layers)
    d.linear = LinearAttn(
        kind="lightning", projections=[("qkv", h, 3 * inner), ("output_gate", h, inner), ("out_proj", inner, h)],
        other_per_layer=inner, n_heads=d.nh, k_dim=d.hd, v_dim=d.hd, chunk=LIGHTNING_BLOCK)
    return decoder_spec(d, cfg, name, source)
