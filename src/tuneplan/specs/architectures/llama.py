"""The llama family: pre-norm decoders with RoPE, gated MLPs, GQA, optional MoE and MLA.

One reader (`read_llama_family`) with small per-family option functions: Gemma (tied, extra norms,
local/global attention), Qwen (biases, q/k norms), Phi-3 and Baichuan (fused projections), DeepSeek
/ Kimi / MiniCPM3 (MLA), Nemotron (squared-ReLU, LayerNorm1p), and the MoE layouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.attention import apply_local_attention, mla_of
from tuneplan.specs.architectures.base import (
    INTER,
    Decoder,
    Moe,
    decoder_of,
    decoder_spec,
    get_bool,
    get_int,
    has,
    int_key,
    register,
)
from tuneplan.specs.model import ModelSpec

LLAMA_LIKE = ("llama", "mistral", "mixtral", "yi", "internlm", "deepseek", "olmo", "olmo2", "olmoe",
              "granite", "granitemoe", "granitemoeshared", "gemma", "gemma2", "gemma3", "gemma3_text",
              "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "baichuan", "deepseek_v2", "deepseek_v3",
              "kimi_k2", "minicpm3", "nemotron", "smollm3", "mistral3", "falcon3", "internlm2", "glm4_moe",
              "ernie4_5", "ernie4_5_moe", "hunyuan_v1_dense", "glm4")
"""Model types read by `read_llama_family`."""


def moe_layout(cfg: Mapping, mt: str, L: int) -> tuple[list[str], Moe | None, int]:
    """Per-layer MLP kinds, the MoE description and the dense MLP width of the dense layers."""
    n_exp = get_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
                    "num_experts", 0, minimum=0)
    if not n_exp:
        return ["dense"] * L, None, 0
    top_k = get_int(cfg, ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k", "moe_k"),
                    "num_experts_per_tok", 2 if mt == "mixtral" else 1)
    if top_k > n_exp:
        raise InputError("num_experts_per_tok", f"{top_k} experts per token but only {n_exp} experts")
    kinds = ["moe"] * L
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe") or "first_k_dense_replace" in cfg:
        first_dense = int_key(cfg, "first_k_dense_replace", 0, minimum=0)
        freq = int_key(cfg, "moe_layer_freq", 1)
        kinds = ["moe" if (i >= first_dense and i % freq == 0) else "dense" for i in range(L)]
    elif "decoder_sparse_step" in cfg or "mlp_only_layers" in cfg:
        step = int_key(cfg, "decoder_sparse_step", 1)
        only = set(cfg.get("mlp_only_layers") or [])
        kinds = ["moe" if ((i + 1) % step == 0 and i not in only) else "dense" for i in range(L)]
    elif "moe_layer_start_index" in cfg:  # ERNIE 4.5
        start = int_key(cfg, "moe_layer_start_index", 0, minimum=0)
        end = int_key(cfg, "moe_layer_end_index", L - 1, minimum=0)
        step = int_key(cfg, "moe_layer_interval", 1)
        kinds = ["moe" if (start <= i <= end and (i - start) % step == 0) else "dense" for i in range(L)]
    if mt in ("granitemoe", "granitemoeshared", "granitemoehybrid"):
        width = int_key(cfg, "intermediate_size")  # per-expert width
    else:
        width = get_int(cfg, ("moe_intermediate_size", "intermediate_size"), "moe_intermediate_size")
    n_shared, shared_width, scalar = _shared_experts(cfg, mt, width)
    moe = Moe(n_experts=n_exp, top_k=top_k, width=width, n_shared=n_shared, shared_width=shared_width,
              shared_gate_scalar=scalar)
    dense_width = int_key(cfg, "intermediate_size") if "dense" in kinds else 0
    return kinds, moe, dense_width


def _shared_experts(cfg: Mapping, mt: str, width: int) -> tuple[int, int, bool]:
    """(shared experts, their total MLP width, sigmoid-gated) of a MoE layer."""
    if mt in ("qwen2_moe", "qwen3_next") or "shared_expert_intermediate_size" in cfg:
        w = int_key(cfg, "shared_expert_intermediate_size", 0, minimum=0)
        return (1 if w else 0), w, bool(w)
    if has(cfg, "n_shared_experts", "moe_num_shared_experts"):
        n = get_int(cfg, ("n_shared_experts", "moe_num_shared_experts"), "n_shared_experts", 0, minimum=0)
        return n, n * width, False
    if has(cfg, "shared_intermediate_size"):
        w = int_key(cfg, "shared_intermediate_size", 0, minimum=0)
        return (1 if w else 0), w, False
    return 0, 0, False


# ----------------------------------------------------------------------------------------------------
# per-family options


def _gemma(d: Decoder, cfg: Mapping) -> None:
    d.tie = get_bool(cfg, "tie_word_embeddings", True)
    if d.model_type != "gemma":
        d.norms_per_layer = 4
    if d.model_type.startswith("gemma3"):
        d.qk_norm = "head"


def _fused_qkv(d: Decoder, cfg: Mapping) -> None:
    d.fused_qkv = True
    if d.model_type == "phi3":
        d.extra["fused"] = {"gate_up": ["gate", "up"]}


def _internlm2(d: Decoder, cfg: Mapping) -> None:
    d.fused_qkv = True  # wqkv
    d.qkv_bias = d.o_bias = d.mlp_bias = get_bool(cfg, "bias", False)


def _mla(d: Decoder, cfg: Mapping) -> None:
    if has(cfg, "kv_lora_rank"):
        d.mla = mla_of(cfg)
        d.hd = d.mla["qk_nope_head_dim"] + d.mla["qk_rope_head_dim"]
        d.extra["mla"] = dict(d.mla)


def _glm4_moe(d: Decoder, cfg: Mapping) -> None:
    d.o_bias = False  # attention_bias puts biases on q, k, v only
    if get_bool(cfg, "use_qk_norm", False):
        d.qk_norm = "head"


def _ernie(d: Decoder, cfg: Mapping) -> None:
    d.qkv_bias = d.o_bias = d.mlp_bias = get_bool(cfg, "use_bias", False)
    d.tie = get_bool(cfg, "tie_word_embeddings", True)


def _nemotron(d: Decoder, cfg: Mapping) -> None:
    # NeMo/Megatron GPT (Nemotron-3/4) or transformers' Nemotron: LayerNorm1p with bias,
    # squared-ReLU non-gated MLP, untied output layer
    act = str(cfg.get("activation_func", cfg.get("hidden_act", "relu2"))).lower()
    d.gated = "glu" in act or bool(cfg.get("gated_linear_unit", False))
    d.norm_bias = True
    bias_lin = get_bool(cfg, "add_bias_linear", False)
    d.qkv_bias = d.o_bias = bias_lin or d.qkv_bias
    d.mlp_bias = bias_lin or d.mlp_bias
    if "share_embeddings_and_output_weights" in cfg and "tie_word_embeddings" not in cfg:
        d.tie = bool(cfg["share_embeddings_and_output_weights"])
    if has(cfg, "rotary_percent", "partial_rotary_factor"):
        d.extra["rotary_fraction"] = cfg.get("rotary_percent", cfg.get("partial_rotary_factor"))


_FIXED: dict[str, dict] = {
    **dict.fromkeys(("qwen2", "qwen2_moe"), {"qkv_bias": True, "o_bias": False}),
    **dict.fromkeys(("qwen3", "qwen3_moe"), {"qk_norm": "head"}),
    **dict.fromkeys(("olmo2", "olmoe"), {"qk_norm": "full"}),
    # GLM-4-0414 (transformers' Glm4): sandwich norms (input, post_self_attn, post_attention, post_mlp)
    # and biases on q, k, v only; partial RoPE changes no shape
    "glm4": {"norms_per_layer": 4, "o_bias": False},
}
"""Families whose layout differs from llama's by fixed settings of the Decoder."""

_OPTIONS: dict[str, Callable[[Decoder, Mapping], None]] = {
    "gemma": _gemma, "gemma2": _gemma, "gemma3": _gemma, "gemma3_text": _gemma, "phi3": _fused_qkv,
    "baichuan": _fused_qkv, "internlm2": _internlm2, "deepseek_v2": _mla, "deepseek_v3": _mla, "kimi_k2": _mla,
    "minicpm3": _mla, "nemotron": _nemotron, "glm4_moe": _glm4_moe, "ernie4_5": _ernie, "ernie4_5_moe": _ernie,
}
"""Families whose layout the config decides: the function that reads it into the Decoder."""


def llama_decoder(cfg: Mapping, mt: str) -> Decoder:
    """The llama-family Decoder of a config (shapes, MoE layout, family options, local attention)."""
    head_keys = ("head_dim", "kv_channels") if mt == "nemotron" else ("head_dim",)
    d = decoder_of(cfg, mt, shape={"head_dim_keys": head_keys})
    d.mlp_kinds, d.moe, d.inter = moe_layout(cfg, mt, d.n_layers)
    if d.moe is None:
        d.inter = get_int(cfg, INTER, "intermediate_size")
    d.qkv_bias = d.o_bias = get_bool(cfg, "attention_bias", False)
    d.mlp_bias = get_bool(cfg, "mlp_bias", False)
    for key, value in _FIXED.get(mt, {}).items():
        setattr(d, key, value)
    if mt in _OPTIONS:
        _OPTIONS[mt](d, cfg)
    apply_local_attention(d, cfg)
    return d


@register(*LLAMA_LIKE)
def read_llama_family(cfg: Mapping, mt: str, name: str, source: str) -> ModelSpec:
    return decoder_spec(llama_decoder(cfg, mt), cfg, name, source)
