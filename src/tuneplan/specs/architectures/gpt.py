"""GPT-style decoders with biases and LayerNorms: gpt2, gpt_bigcode, gpt_neox, bloom, opt, phi, mpt,
Qwen-1, ChatGLM / GLM-4, Falcon (RW), StarCoder2, Cohere (Command-R / Aya)."""

from __future__ import annotations

from collections.abc import Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.attention import apply_local_attention
from tuneplan.specs.architectures.base import (
    HEADS,
    HIDDEN,
    INTER,
    KV,
    LAYERS,
    VOCAB,
    Decoder,
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
from tuneplan.specs.model import ModelSpec


def _hlv(cfg: Mapping, vocab_keys: tuple[str, ...] = VOCAB) -> tuple[int, int, int]:
    return (get_int(cfg, HIDDEN, "hidden_size"), get_int(cfg, LAYERS, "num_hidden_layers"),
            get_int(cfg, vocab_keys, "vocab_size"))


@register("mpt")
def read_mpt(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    h, L, vocab = _hlv(cfg)
    attn = cfg.get("attn_config") or {}
    ffn = cfg.get("ffn_config") or {}
    nh = get_int(cfg, HEADS, "num_attention_heads")
    if h % nh:
        raise InputError("num_attention_heads", f"{nh} heads do not divide hidden_size {h}")
    nkv = nh
    if str(attn.get("attn_type", "multihead_attention")) in ("grouped_query_attention", "multiquery_attention"):
        nkv = 1 if attn.get("attn_type") == "multiquery_attention" else get_int(
            attn, ("kv_n_heads",), "num_key_value_heads", nh)
        if nh % nkv:
            raise InputError("num_key_value_heads", f"{nkv} key/value heads must divide {nh} heads")
    no_bias = get_bool(cfg, "no_bias", True)
    ratio = cfg.get("expansion_ratio", 4)
    if not is_num(ratio) or ratio <= 0:
        raise InputError("intermediate_size", f"'expansion_ratio' must be > 0, got {ratio!r}")
    inter = get_int(ffn, ("ffn_hidden_size",), "intermediate_size", int(ratio * h))
    d = Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=h // nh, vocab=vocab, inter=inter,
                max_pos=max_pos(cfg), tie=True, gated=str(ffn.get("ffn_type", "mptmlp")) == "mptglu",
                fused_qkv=True, qkv_bias=not no_bias, o_bias=not no_bias, mlp_bias=not no_bias,
                norm_bias=not no_bias)
    if not bool(attn.get("alibi", True)) and get_bool(cfg, "learned_pos_emb", True):
        d.pos_rows = get_int(cfg, ("max_seq_len",), "max_position_embeddings")
    if attn.get("qk_ln"):
        d.other_params += L * (h + nkv * d.hd) * (1 if no_bias else 2)
    return decoder_spec(d, cfg, name, source)


@register("chatglm")
def read_chatglm(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """ChatGLM2/3 and GLM-4-9B (ChatGLM key names): fused QKV with a bias, multi-query groups."""
    h, L, vocab = _hlv(cfg, ("padded_vocab_size", "vocab_size"))
    nh = get_int(cfg, HEADS, "num_attention_heads")
    hd = int_key(cfg, "kv_channels", 0) or (h // nh)
    if not has(cfg, "kv_channels") and h % nh:
        raise InputError("num_attention_heads", f"{nh} heads do not divide hidden_size {h}")
    nkv = nh
    if get_bool(cfg, "multi_query_attention", False):
        nkv = int_key(cfg, "multi_query_group_num", 1)
    if nh % nkv:
        raise InputError("multi_query_group_num", f"{nkv} groups must divide {nh} heads")
    bias = get_bool(cfg, "add_bias_linear", False)
    d = Decoder(model_type="chatglm", h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=vocab,
                inter=get_int(cfg, ("ffn_hidden_size", "intermediate_size"), "ffn_hidden_size"),
                max_pos=max_pos(cfg), tie=get_bool(cfg, "tie_word_embeddings", False),
                gated=True, fused_qkv=True, qkv_bias=get_bool(cfg, "add_qkv_bias", False) or bias,
                o_bias=bias, mlp_bias=bias, norm_bias=not get_bool(cfg, "rmsnorm", True),
                final_norm=get_bool(cfg, "post_layer_norm", True),
                extra={"fused": {"gate_up": ["gate", "up"]}})
    return decoder_spec(d, cfg, name, source)


@register("qwen")
def read_qwen1(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    bias = not get_bool(cfg, "no_bias", True)
    d = decoder_of(cfg, mt, shape={"head_dim_keys": ("kv_channels", "head_dim"), "kv_keys": ()}, fused_qkv=True,
                   qkv_bias=True, o_bias=bias, mlp_bias=bias)
    inter = int_key(cfg, "intermediate_size")
    if inter % 2:
        raise InputError("intermediate_size", f"Qwen-1 intermediate_size is 2 x the SwiGLU width; got odd {inter}")
    d.inter = inter // 2
    return decoder_spec(d, cfg, name, source)


def _gpt_decoder(cfg: Mapping, mt: str) -> Decoder:
    bigcode = mt == "gpt_bigcode"
    shape = {"head_dim_keys": (), "kv_keys": KV if mt in ("gpt_bigcode", "phi") else (),
             "multi_query_keys": ("multi_query",) if bigcode else (), "multi_query_default": bigcode}
    d = decoder_of(cfg, mt, tie=True, shape=shape, gated=False, qkv_bias=True, o_bias=True, mlp_bias=True,
                   norm_bias=True)
    d.inter = get_int(cfg, INTER, "intermediate_size", 4 * d.h)
    return d


@register("gpt2", "gpt_bigcode", "gpt_neox", "bloom", "phi")
def read_gpt(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    d = _gpt_decoder(cfg, mt)
    if mt in ("gpt2", "gpt_bigcode"):
        d.fused_qkv = True
        d.pos_rows = get_int(cfg, ("n_positions", "max_position_embeddings"), "max_position_embeddings")
    elif mt == "gpt_neox":
        d.fused_qkv = True
        d.qkv_bias = d.o_bias = get_bool(cfg, "attention_bias", True)
        d.tie = get_bool(cfg, "tie_word_embeddings", False)
        d.extra["parallel_residual"] = get_bool(cfg, "use_parallel_residual", True)
    elif mt == "bloom":
        d.fused_qkv = True
        d.other_params += 2 * d.h  # word_embeddings_layernorm
    elif mt == "phi":
        d.norms_per_layer = 1  # parallel attention + MLP share one LayerNorm
        d.lm_head_bias = True
        d.tie = get_bool(cfg, "tie_word_embeddings", False)
        if cfg.get("qk_layernorm"):
            d.qk_norm, d.qk_norm_bias = "head", True
    return decoder_spec(d, cfg, name, source)


@register("opt")
def read_opt(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    d = _gpt_decoder(cfg, mt)
    bias = get_bool(cfg, "enable_bias", True)
    d.qkv_bias = d.o_bias = d.mlp_bias = bias
    d.norm_bias = get_bool(cfg, "layer_norm_elementwise_affine", True)
    wepd = int_key(cfg, "word_embed_proj_dim", d.h)
    d.emb_dim = wepd
    if wepd != d.h:
        d.other_params += 2 * wepd * d.h  # project_in / project_out (no bias)
    d.final_norm = get_bool(cfg, "do_layer_norm_before", True) and not cfg.get("_remove_final_layer_norm")
    d.pos_rows = int_key(cfg, "max_position_embeddings") + 2  # offset 2
    return decoder_spec(d, cfg, name, source)


@register("falcon")
def read_falcon(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    bias = get_bool(cfg, "bias", False)
    d = decoder_of(cfg, "falcon", tie=True, shape={"head_dim_keys": ()}, gated=False, fused_qkv=True, qkv_bias=bias,
                   o_bias=bias, mlp_bias=bias, norm_bias=True)
    d.inter = get_int(cfg, ("ffn_hidden_size", "intermediate_size"), "intermediate_size", 4 * d.h)
    new_arch = get_bool(cfg, "new_decoder_architecture", d.nkv not in (1, d.nh))
    parallel = get_bool(cfg, "parallel_attn", True)
    d.norms_per_layer = int_key(cfg, "num_ln_in_parallel_attn", 2) if new_arch else 1 if parallel else 2
    if not new_arch and d.nkv not in (1, d.nh):
        raise InputError("num_key_value_heads", "grouped KV heads need new_decoder_architecture true")
    d.extra = {"parallel_attn": parallel, "new_decoder_architecture": new_arch}
    return decoder_spec(d, cfg, name, source)


@register("starcoder2")
def read_starcoder2(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """StarCoder2: GQA with biases everywhere (`use_bias`), LayerNorms with bias, a plain GELU MLP
    (c_fc / c_proj), tied embeddings, sliding-window attention in every layer."""
    bias = get_bool(cfg, "use_bias", True)
    d = decoder_of(cfg, mt, tie=True, shape={"head_dim_keys": ()}, gated=False, qkv_bias=bias, o_bias=bias,
                   mlp_bias=bias, norm_bias=True)
    d.inter = get_int(cfg, INTER, "intermediate_size", 4 * d.h)
    apply_local_attention(d, cfg)
    return decoder_spec(d, cfg, name, source)


@register("cohere", "cohere2")
def read_cohere(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Command-R / Aya: parallel attention and gated MLP behind one LayerNorm (no bias), tied head."""
    attn_bias = get_bool(cfg, "attention_bias", False)
    d = decoder_of(cfg, mt, get_int(cfg, INTER, "intermediate_size"), tie=True, qkv_bias=attn_bias, o_bias=attn_bias,
                   norms_per_layer=1, extra={"parallel_attn": True})
    if cfg.get("use_qk_norm"):
        d.other_params += d.n_layers * (d.nh + d.nkv) * d.hd  # per-head LayerNorm weights over (heads, head_dim)
    apply_local_attention(d, cfg)
    return decoder_spec(d, cfg, name, source)
