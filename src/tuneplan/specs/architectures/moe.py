"""Mixture-of-experts decoders with their own layouts: gpt-oss, Llama 4, Hunyuan-A13B.

(DeepSeek / Kimi / GLM-4.5 / ERNIE / Qwen MoE / Mixtral / OLMoE are llama-family readings, see
`llama.moe_layout`.)
"""

from __future__ import annotations

from collections.abc import Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.attention import apply_local_attention
from tuneplan.specs.architectures.base import (
    LAYERS,
    Moe,
    decoder_of,
    decoder_spec,
    get_bool,
    get_int,
    int_key,
    register,
    uniform_list,
)
from tuneplan.specs.architectures.llama import llama_decoder
from tuneplan.specs.model import ModelSpec


@register("gpt_oss")
def read_gpt_oss(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """OpenAI gpt-oss: GQA with biases and a learned sink per head, alternating sliding-window (128)
    and full attention layers, every layer MoE (gated experts with biases, a router with a bias)."""
    bias = get_bool(cfg, "attention_bias", True)
    d = decoder_of(cfg, mt, qkv_bias=bias, o_bias=bias, attn_sinks=True)
    n_exp = get_int(cfg, ("num_local_experts", "num_experts"), "num_local_experts")
    top_k = get_int(cfg, ("num_experts_per_tok", "experts_per_token"), "num_experts_per_tok")
    if top_k > n_exp:
        raise InputError("num_experts_per_tok", f"{top_k} experts per token but only {n_exp} experts")
    d.moe = Moe(n_experts=n_exp, top_k=top_k, width=int_key(cfg, "intermediate_size"), router_bias=True,
                expert_bias=True)
    d.mlp_kinds = ["moe"] * d.n_layers
    apply_local_attention(d, cfg)
    return decoder_spec(d, cfg, name, source)


@register("llama4", "llama4_text")
def read_llama4(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Llama 4 (text): MoE every `interleave_moe_layer_step` layers (16 or 128 experts of width
    intermediate_size, top-1, plus one shared expert of the same width), dense layers of
    intermediate_size_mlp elsewhere; chunked attention (8192) in 3 of 4 layers, NoPE global in the 4th;
    the q/k norm is a weightless L2 norm."""
    d = decoder_of(cfg, "llama4")
    L = d.n_layers
    step = int_key(cfg, "interleave_moe_layer_step", 1)
    moe_layers = cfg.get("moe_layers")
    if isinstance(moe_layers, list):
        d.mlp_kinds = ["moe" if i in set(moe_layers) else "dense" for i in range(L)]
    else:
        d.mlp_kinds = ["moe" if (i + 1) % step == 0 else "dense" for i in range(L)]
    width = int_key(cfg, "intermediate_size")
    d.moe = Moe(n_experts=int_key(cfg, "num_local_experts"), top_k=int_key(cfg, "num_experts_per_tok", 1),
                width=width, n_shared=1, shared_width=width)
    d.inter = int_key(cfg, "intermediate_size_mlp") if "dense" in d.mlp_kinds else 0
    d.qkv_bias = d.o_bias = get_bool(cfg, "attention_bias", False)
    apply_local_attention(d, cfg)
    return decoder_spec(d, cfg, name, source)


@register("hunyuan_v1_moe", "hunyuan")
def read_hunyuan(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    """Tencent Hunyuan-A13B: per-layer lists (expert width, top-k, shared experts; all layers alike),
    a shared MLP of intermediate_size x num_shared_expert beside the routed experts, q/k norms."""
    L = get_int(cfg, LAYERS, "num_hidden_layers")
    flat = dict(cfg)
    for key in ("moe_intermediate_size", "moe_topk", "num_shared_expert"):
        v = uniform_list(cfg, key, L)
        if v is not None:
            flat[key] = v
    flat["num_experts_per_tok"] = flat.get("moe_topk", 1)
    flat.pop("n_shared_experts", None)
    d = llama_decoder(flat, "hunyuan_v1_moe")
    if d.moe is not None and get_bool(cfg, "use_mixed_mlp_moe", True):
        n_shared = int_key(flat, "num_shared_expert", 1, minimum=0)
        d.moe.n_shared = n_shared
        d.moe.shared_width = n_shared * int_key(cfg, "intermediate_size")
    if get_bool(cfg, "use_qk_norm", False):
        d.qk_norm = "head"
    d.tie = get_bool(cfg, "tie_word_embeddings", True)
    return decoder_spec(d, cfg, name, source)
