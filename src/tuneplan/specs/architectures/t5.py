"""Encoder-decoder T5 / mT5 (Flan-T5, T0, mT0): relative position buckets, optional gated MLP."""

from __future__ import annotations

from collections.abc import Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.base import (
    VOCAB,
    Counts,
    counts_spec,
    get_bool,
    get_int,
    int_key,
    lin,
    mlp_linears,
    register,
)
from tuneplan.specs.model import ModelSpec


@register("t5", "mt5")
def read_t5(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    h = get_int(cfg, ("d_model", "hidden_size"), "hidden_size")
    n_enc = get_int(cfg, ("num_layers", "num_hidden_layers"), "num_hidden_layers")
    n_dec = int_key(cfg, "num_decoder_layers", n_enc)
    nh = get_int(cfg, ("num_heads", "num_attention_heads"), "num_attention_heads")
    dkv = int_key(cfg, "d_kv", 0)
    if not dkv:
        if h % nh:
            raise InputError("num_attention_heads", f"{nh} heads do not divide d_model {h}")
        dkv = h // nh
    dff = get_int(cfg, ("d_ff", "intermediate_size"), "d_ff")
    vocab = get_int(cfg, VOCAB, "vocab_size")
    gated = str(cfg.get("feed_forward_proj", "relu")).lower().startswith("gated")
    buckets = int_key(cfg, "relative_attention_num_buckets", 32)
    inner = nh * dkv
    attn_layers = n_enc + 2 * n_dec  # encoder self, decoder self + cross
    mlp_layers = n_enc + n_dec
    lins = [lin("q", h, inner, attn_layers), lin("k", h, inner, attn_layers),
            lin("v", h, inner, attn_layers), lin("o", inner, h, attn_layers)]
    lins += mlp_linears(h, dff, mlp_layers, gated)
    norms = (2 * n_enc + 3 * n_dec + 2) * h  # RMS LayerNorms (weight only) + final norm of each stack
    rel = 2 * buckets * nh  # relative attention bias in the first layer of each stack
    tie = get_bool(cfg, "tie_word_embeddings", mt == "t5")
    counts = Counts([x for x in lins if x is not None], norms + rel, vocab * h, 0 if tie else vocab * h, -1, 0)
    return counts_spec(counts, cfg, name, source, mt, n_layers=n_enc + n_dec, hidden_size=h, n_heads=nh,
                       n_kv_heads=nh, head_dim=dkv, intermediate_size=dff, vocab_size=vocab,
                       max_position_embeddings=None, gated_mlp=gated, is_encoder_decoder=True,
                       extra={"n_encoder_layers": n_enc, "n_decoder_layers": n_dec})
