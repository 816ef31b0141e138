"""State-space and hybrid stacks: Mamba (1 and 2), BlackMamba, Nemotron-H, Granite-4.0-H, Jamba, Falcon-H1.

The layer lists: Nemotron-H and BlackMamba give every mixer and every MLP its own layer (a
`hybrid_override_pattern` / `mamba_moe_layers` entry each), Granite-4.0-H and Jamba pair one mixer
(Mamba or attention) with one MLP per layer, Falcon-H1 runs attention and Mamba-2 side by side in
every layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.base import (
    HIDDEN,
    INTER,
    LAYERS,
    VOCAB,
    Decoder,
    Mamba1,
    Mamba2,
    Moe,
    attention_shape,
    decoder_of,
    decoder_spec,
    get_bool,
    get_int,
    has,
    int_key,
    is_num,
    max_pos,
    register,
)
from tuneplan.specs.architectures.llama import llama_decoder
from tuneplan.specs.model import ModelSpec

MAMBA2_DEFAULT_CHUNK = 256
"""Tokens per SSD chunk when the config does not say (transformers' Mamba2Config / BambaConfig default)."""


def _dt_rank(cfg: Mapping, key: str, h: int) -> int:
    rank = cfg.get(key, "auto")
    return math.ceil(h / 16) if rank in (None, "auto") else get_int(cfg, (key,), key)


@register("mamba", "falcon_mamba")
def read_mamba(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Mamba-1 (state-spaces/mamba-*-hf, Falcon-Mamba): one Mamba mixer per layer, no MLP, no attention."""
    h = get_int(cfg, HIDDEN, "hidden_size")
    L = get_int(cfg, LAYERS, "num_hidden_layers")
    expand = int_key(cfg, "expand", 2)
    m1 = Mamba1(d_inner=int_key(cfg, "intermediate_size", expand * h),
                d_state=get_int(cfg, ("state_size", "d_state"), "state_size", 16),
                d_conv=get_int(cfg, ("conv_kernel", "d_conv"), "conv_kernel", 4), dt_rank=_dt_rank(cfg, "time_step_rank", h),
                conv_bias=get_bool(cfg, "use_conv_bias", True), proj_bias=get_bool(cfg, "use_bias", False),
                inner_norms=mt == "falcon_mamba")
    d = Decoder(model_type=mt, h=h, n_layers=L, nh=0, nkv=0, hd=0, vocab=get_int(cfg, VOCAB, "vocab_size"),
                inter=0, max_pos=None, tie=get_bool(cfg, "tie_word_embeddings", True), gated=False,
                norms_per_layer=1, mixers=["mamba"] * L, mamba1=m1, mlp_kinds=["none"] * L)
    return decoder_spec(d, cfg, name, source)


def _blackmamba_layers(cfg: Mapping) -> tuple[list[str], int]:
    layers = cfg.get("mamba_moe_layers")
    if not isinstance(layers, list) or not layers:
        raise InputError("mamba_moe_layers", "must be a non-empty list of 'r' / '<n_experts>' entries")
    kinds, experts = [], set()
    for entry in layers:
        s = str(entry).strip().lower()
        if s == "r":
            kinds.append("mamba")
        elif s.isdigit() and int(s) > 0:
            kinds.append("moe")
            experts.add(int(s))
        else:
            raise InputError("mamba_moe_layers", f"unknown entry '{entry}' (use 'r' or a number of experts)")
    if len(experts) > 1:
        raise InputError("mamba_moe_layers", "MoE blocks with different expert counts are not supported")
    return kinds, (experts.pop() if experts else 0)


@register("blackmamba")
def read_blackmamba(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Zyphra BlackMamba: alternating Mamba ('r') and switch-MoE ('<n experts>') layers, no attention."""
    h = get_int(cfg, HIDDEN, "hidden_size")
    kinds, n_exp = _blackmamba_layers(cfg)
    L = get_int(cfg, ("num_layers", "num_hidden_layers"), "num_hidden_layers", len(kinds))
    if len(kinds) != L:
        raise InputError("mamba_moe_layers", f"has {len(kinds)} entries but num_layers is {L}")
    top_k = get_int(cfg, ("topk", "moe_top_k", "num_experts_per_tok"), "num_experts_per_tok", 1)
    if n_exp and top_k > n_exp:
        raise InputError("num_experts_per_tok", f"{top_k} experts per token but only {n_exp} experts")
    bias = get_bool(cfg, ("add_bias_linear", "bias"), False)
    d_inner = int_key(cfg, "expansion_factor", 2) * h
    m1 = Mamba1(d_inner=d_inner, d_state=int_key(cfg, "state_size", 16), d_conv=int_key(cfg, "conv_dimension", 4),
                dt_rank=math.ceil(h / 16), proj_bias=bias)
    moe = Moe(n_experts=n_exp, top_k=top_k, width=int_key(cfg, "ffn_hidden_size"),
              gated=get_bool(cfg, "swiglu", True)) if n_exp else None
    d = Decoder(model_type=mt, h=h, n_layers=L, nh=0, nkv=0, hd=0, vocab=get_int(cfg, VOCAB, "vocab_size"),
                inter=0, max_pos=max_pos(cfg), tie=get_bool(cfg, "tie_word_embeddings", True),
                gated=moe.gated if moe else False, mlp_bias=bias, norms_per_layer=1,
                mixers=[k if k == "mamba" else "none" for k in kinds], mamba1=m1,
                mlp_kinds=["moe" if k == "moe" else "none" for k in kinds], moe=moe)
    return decoder_spec(d, cfg, name, source)


NEMOTRON_H_CHARS = {"M": ("mamba", "none"), "*": ("attention", "none"), "-": ("none", "dense"), "E": ("none", "moe")}
"""Nemotron-H `hybrid_override_pattern`: M = Mamba-2 layer, * = attention layer, - = MLP layer,
E = MoE layer (Nemotron-3); each is one residual layer with one RMSNorm."""


NEMOTRON_H_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""`layers_block_type` names (Nemotron-3 Ultra's config) -> pattern characters."""


def _nemotron_pattern(cfg: Mapping) -> object:
    blocks = cfg.get("layers_block_type")
    if cfg.get("hybrid_override_pattern") is None and isinstance(blocks, list):
        try:
            return "".join(NEMOTRON_H_BLOCKS[str(b).lower()] for b in blocks)
        except KeyError as exc:
            raise InputError("layers_block_type", f"unknown block '{exc.args[0]}'", list(NEMOTRON_H_BLOCKS)) from None
    return cfg.get("hybrid_override_pattern")


@register("nemotron_h")
def read_nemotron_h(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """NVIDIA Nemotron-H / Nemotron Nano v2 / Nemotron-3: one Mamba-2, attention, MLP or MoE per layer
    (squared-ReLU MLPs, non-gated experts with a shared expert, a latent expert width in Super/Ultra)."""
    pattern = _nemotron_pattern(cfg)
    if not isinstance(pattern, str) or not pattern or set(pattern) - set(NEMOTRON_H_CHARS):
        raise InputError("hybrid_override_pattern", f"must be a string of {', '.join(NEMOTRON_H_CHARS)}, got "
                         f"{pattern!r}")
    h = get_int(cfg, HIDDEN, "hidden_size")
    L = get_int(cfg, LAYERS, "num_hidden_layers", len(pattern))
    if len(pattern) != L:
        raise InputError("hybrid_override_pattern", f"has {len(pattern)} layers but num_hidden_layers is {L}")
    nh, nkv, hd = attention_shape(cfg, h, head_dim_keys=("head_dim", "attention_head_dim"))
    n_m = int_key(cfg, "mamba_num_heads")
    mb = Mamba2(d_inner=n_m * int_key(cfg, "mamba_head_dim"), n_heads=n_m, n_groups=int_key(cfg, "n_groups", 8),
                d_state=int_key(cfg, "ssm_state_size", 128), d_conv=int_key(cfg, "conv_kernel", 4),
                conv_bias=get_bool(cfg, "use_conv_bias", True), proj_bias=get_bool(cfg, "use_bias", False),
                chunk=int_key(cfg, "chunk_size", 128))
    moe = None
    if "E" in pattern:
        shared = int_key(cfg, "moe_shared_expert_intermediate_size", 0, minimum=0)
        moe = Moe(n_experts=int_key(cfg, "n_routed_experts"), top_k=int_key(cfg, "num_experts_per_tok"),
                  width=int_key(cfg, "moe_intermediate_size"), gated=False, shared_width=shared,
                  n_shared=int_key(cfg, "n_shared_experts", 1 if shared else 0, minimum=0),
                  latent=int_key(cfg, "moe_latent_size", 0, minimum=0))
    bias = get_bool(cfg, "attention_bias", False)
    d = Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=get_int(cfg, VOCAB, "vocab_size"),
                inter=get_int(cfg, INTER, "intermediate_size") if "-" in pattern else 0, max_pos=max_pos(cfg),
                tie=get_bool(cfg, "tie_word_embeddings", False), gated=False, qkv_bias=bias, o_bias=bias,
                mlp_bias=get_bool(cfg, "mlp_bias", False), norms_per_layer=1,
                mixers=[NEMOTRON_H_CHARS[c][0] for c in pattern], mamba2=mb,
                mlp_kinds=[NEMOTRON_H_CHARS[c][1] for c in pattern], moe=moe)
    return decoder_spec(d, cfg, name, source)


def _mamba2(cfg: Mapping, d_inner: int, n_heads: int, gated_norm: bool = True) -> Mamba2:
    """A Mamba-2 mixer of `mamba_`-prefixed keys (Granite-4.0-H, Falcon-H1), at transformers' defaults."""
    return Mamba2(d_inner=d_inner, n_heads=n_heads, n_groups=int_key(cfg, "mamba_n_groups", 1),
                  d_state=int_key(cfg, "mamba_d_state", 256), d_conv=int_key(cfg, "mamba_d_conv", 4),
                  conv_bias=get_bool(cfg, "mamba_conv_bias", True), proj_bias=get_bool(cfg, "mamba_proj_bias", False),
                  chunk=int_key(cfg, "mamba_chunk_size", MAMBA2_DEFAULT_CHUNK), gated_norm=gated_norm)


def _granite_layout(cfg: Mapping, L: int, extra: dict) -> list[str]:
    lt = cfg.get("layer_types")
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != L:
            raise InputError("layer_types", f"must list one entry per layer ({L})")
        kinds = []
        for t in lt:
            t = str(t).lower()
            if t in ("attention", "full_attention", "sliding_attention", "attn"):
                kinds.append("attention")
            elif t in ("mamba", "mamba2", "ssm"):
                kinds.append("mamba")
            else:
                raise InputError("layer_types", f"unknown layer type '{t}'", ["attention", "mamba"])
        return kinds
    idx = cfg.get("attn_layer_indices")
    if isinstance(idx, list):
        return ["attention" if i in set(idx) else "mamba" for i in range(L)]
    # The config has no layer_types: Granite-4.0-H interleaves Mamba-2 and attention 9:1.
    extra["layer_types_inferred"] = "9 Mamba-2 : 1 attention (Granite-4.0-H layout; no layer_types key)"
    return ["attention" if i % 10 == 5 else "mamba" for i in range(L)]


@register("granitemoehybrid")
def read_granite_hybrid(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Granite-4.0-H: Mamba-2 or attention mixer + MoE (with a shared dense MLP) in every layer."""
    d = llama_decoder(cfg, mt)
    d.mixers = _granite_layout(cfg, d.n_layers, d.extra)
    h_m = int_key(cfg, "mamba_n_heads", 128)
    d_head = cfg.get("mamba_d_head", "auto")
    d_inner = h_m * int(d_head) if is_num(d_head) else int_key(cfg, "mamba_expand", 2) * d.h
    d.mamba2 = _mamba2(cfg, d_inner, h_m)
    if d.moe is None and has(cfg, "shared_intermediate_size"):
        d.inter = int_key(cfg, "shared_intermediate_size")
    d.window = d.local_layers = 0
    return decoder_spec(d, cfg, name, source)


@register("jamba")
def read_jamba(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """AI21 Jamba: Mamba-1 mixers with one attention layer every `attn_layer_period` (at the offset),
    MoE MLPs every `expert_layer_period` layers (at the offset), dense gated MLPs elsewhere."""
    d = decoder_of(cfg, mt, get_int(cfg, INTER, "intermediate_size"))
    ap = int_key(cfg, "attn_layer_period", 8)
    ao = int_key(cfg, "attn_layer_offset", 4, minimum=0)
    ep = int_key(cfg, "expert_layer_period", 2)
    eo = int_key(cfg, "expert_layer_offset", 1, minimum=0)
    n_exp = int_key(cfg, "num_experts", 16)
    if n_exp > 1:
        d.moe = Moe(n_experts=n_exp, top_k=int_key(cfg, "num_experts_per_tok", 2), width=d.inter)
    d.mamba1 = Mamba1(d_inner=int_key(cfg, "mamba_expand", 2) * d.h, d_state=int_key(cfg, "mamba_d_state", 16),
                      d_conv=int_key(cfg, "mamba_d_conv", 4), dt_rank=_dt_rank(cfg, "mamba_dt_rank", d.h),
                      conv_bias=get_bool(cfg, "mamba_conv_bias", True),
                      proj_bias=get_bool(cfg, "mamba_proj_bias", False), inner_norms=True)
    d.mixers = ["attention" if i % ap == ao else "mamba" for i in range(d.n_layers)]
    d.mlp_kinds = ["moe" if (d.moe and i % ep == eo) else "dense" for i in range(d.n_layers)]
    return decoder_spec(d, cfg, name, source)


@register("falcon_h1")
def read_falcon_h1(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """TII Falcon-H1: attention and a Mamba-2 mixer in parallel in every layer, then a gated MLP."""
    bias = get_bool(cfg, "attention_bias", False)
    d = decoder_of(cfg, mt, get_int(cfg, INTER, "intermediate_size"), qkv_bias=bias, o_bias=bias,
                   mlp_bias=get_bool(cfg, "mlp_bias", False))
    d.mixers = ["attention+mamba"] * d.n_layers
    n_m = int_key(cfg, "mamba_n_heads", 128)
    d_inner = int_key(cfg, "mamba_d_ssm", n_m * int_key(cfg, "mamba_d_head", 64))
    d.mamba2 = _mamba2(cfg, d_inner, n_m, gated_norm=get_bool(cfg, "mamba_rms_norm", False))
    return decoder_spec(d, cfg, name, source)
