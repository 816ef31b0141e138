"""Compute a `ModelSpec` from a Hugging Face style config.json (no parameter count is typed in).

Every architecture is reduced to the same bookkeeping: the block matmuls (`LinearShape`s, with their
biases), the small per-layer tensors (norms, SSM state tensors, relative-position tables), the input
embedding (+ learned positions) and the LM head. `params_total` is their sum, `params_active` removes
the experts a token does not visit (top-k routing).

Config conventions follow transformers' config classes (defaults included), plus the original key
names of checkpoints that ship custom code (Qwen-1, ChatGLM, Baichuan, RW/Falcon, MPT, BlackMamba) or
NeMo/Megatron names (Nemotron). Keys that start with an underscore are catalog metadata; the only ones
read are `_published_params` (kept as a string) and `_inferred_not_stated` (values the catalog
curator inferred for keys the source did not state: used only when the key itself is absent).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tuneplan.errors import InputError
from tuneplan.specs.limits import check_config_sizes
from tuneplan.specs.model import LinearShape, ModelSpec

_MISSING = object()

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "baichuan", "blackmamba", "bloom", "chatglm", "deepseek", "deepseek_v2", "deepseek_v3", "falcon",
    "gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_bigcode", "gpt_neox", "granite",
    "granitemoe", "granitemoehybrid", "granitemoeshared", "internlm", "llama", "mamba", "mistral",
    "mixtral", "mpt", "mt5", "nemotron", "olmo", "olmo2", "opt", "phi", "phi3", "qwen", "qwen2",
    "qwen2_moe", "qwen3", "qwen3_moe", "t5", "yi",
)

# model types read with the llama-family builder and their per-type options (see _llama_family)
_LLAMA_LIKE = {"llama", "mistral", "mixtral", "yi", "internlm", "deepseek", "olmo", "olmo2", "granite",
               "granitemoe", "granitemoeshared", "granitemoehybrid", "gemma", "gemma2", "gemma3",
               "gemma3_text", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3", "baichuan",
               "deepseek_v2", "deepseek_v3", "nemotron"}

_ARCH_TO_TYPE = {
    "llamaforcausallm": "llama", "mistralforcausallm": "mistral", "mixtralforcausallm": "mixtral",
    "rwforcausallm": "falcon", "falconforcausallm": "falcon", "gptbigcodeforcausallm": "gpt_bigcode",
    "qwenlmheadmodel": "qwen", "chatglmmodel": "chatglm", "chatglmforconditionalgeneration": "chatglm",
    "baichuanforcausallm": "baichuan", "mptforcausallm": "mpt", "gpt2lmheadmodel": "gpt2",
    "gptneoxforcausallm": "gpt_neox", "bloomforcausallm": "bloom", "optforcausallm": "opt",
    "t5forconditionalgeneration": "t5", "mt5forconditionalgeneration": "mt5",
    "mambaforcausallm": "mamba", "phiforcausallm": "phi", "phi3forcausallm": "phi3",
    "gemmaforcausallm": "gemma", "gemma2forcausallm": "gemma2", "gemma3forcausallm": "gemma3_text",
    "gemma3forconditionalgeneration": "gemma3", "qwen2forcausallm": "qwen2",
    "qwen2moeforcausallm": "qwen2_moe", "qwen3forcausallm": "qwen3", "qwen3moeforcausallm": "qwen3_moe",
    "deepseekv2forcausallm": "deepseek_v2", "deepseekv3forcausallm": "deepseek_v3",
    "olmo2forcausallm": "olmo2", "graniteforcausallm": "granite", "granitemoeforcausallm": "granitemoe",
    "granitemoehybridforcausallm": "granitemoehybrid", "nemotronforcausallm": "nemotron",
}

# ----------------------------------------------------------------------------------------------------
# checkpoint names -> weight storage

_QUANT_SUFFIXES: tuple[tuple[str, str], ...] = (
    # (case-insensitive suffix regex, quant); longest first, applied repeatedly
    (r"-gptq-int4$", "gptq-int4"),
    (r"-gptq-int8$", "int8"),
    (r"-awq-int4$", "awq-int4"),
    (r"-bnb-4bit$", "nf4"),
    (r"-bnb-8bit$", "int8"),
    (r"-gptq$", "gptq-int4"),
    (r"-awq$", "awq-int4"),
    (r"-int4$", "gptq-int4"),
    (r"-int8$", "int8"),
    (r"-4bit$", "nf4"),
    (r"-8bit$", "int8"),
)


def split_quant_suffix(name: str) -> tuple[str, str]:
    """`("Qwen/Qwen-7B-Chat", "gptq-int4")` for `"Qwen/Qwen-7B-Chat-Int4"`; quant "none" if no suffix.

    Suffixes (case-insensitive): -Int4 / -GPTQ / -GPTQ-Int4 -> gptq-int4, -Int8 / -GPTQ-Int8 / -8bit ->
    int8, -AWQ -> awq-int4, -bnb-4bit / -4bit -> nf4. The first (outermost) suffix decides the quant.
    """
    quant = "none"
    base = name.strip()
    changed = True
    while changed:
        changed = False
        for pattern, q in _QUANT_SUFFIXES:
            m = re.search(pattern, base, flags=re.IGNORECASE)
            if m and m.start() > 0:
                base = base[: m.start()]
                if quant == "none":
                    quant = q
                changed = True
                break
    return base, quant


def quant_from_config(config: Mapping) -> str:
    """Weight storage stated by a `quantization_config` block ("none" when absent or not mapped)."""
    qc = config.get("quantization_config")
    if not isinstance(qc, Mapping):
        return "none"
    method = str(qc.get("quant_method", "")).lower()
    bits = qc.get("bits", qc.get("w_bit"))
    if method == "bitsandbytes" or "load_in_4bit" in qc or "load_in_8bit" in qc:
        if qc.get("load_in_4bit"):
            return "nf4"
        return "int8" if qc.get("load_in_8bit") else "none"
    if method in ("gptq", "awq"):
        if bits == 8:
            return "int8"
        return f"{method}-int4" if bits in (4, None) else "none"
    return "none"


def quant_from_name(name: str) -> str:
    """Base weight storage implied by a checkpoint name (see `split_quant_suffix`)."""
    return split_quant_suffix(name)[1]


# ----------------------------------------------------------------------------------------------------
# reading values


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _get_int(cfg: Mapping, keys: Iterable[str], field_: str, default: object = _MISSING, *,
             minimum: int = 1) -> int:
    """First present (non-null) key among `keys` as an int >= minimum; InputError naming `field_`."""
    keys = tuple(keys)
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if not _is_num(v) or (isinstance(v, float) and (not math.isfinite(v) or v != int(v))):
                raise InputError(field_, f"'{k}' must be an integer, got {v!r}")
            v = int(v)
            if v < minimum:
                raise InputError(field_, f"'{k}' must be >= {minimum}, got {v}")
            return v
    if default is _MISSING:
        looked = ", ".join(keys)
        raise InputError(field_, f"missing from the config (keys looked for: {looked})")
    return default  # type: ignore[return-value]


def _get_bool(cfg: Mapping, keys: Iterable[str], default: bool) -> bool:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return bool(cfg[k])
    return default


def _has(cfg: Mapping, *keys: str) -> bool:
    return any(k in cfg and cfg[k] is not None for k in keys)


_HIDDEN = ("hidden_size", "n_embd", "d_model", "n_embed", "dim", "model_dim")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_KV = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "num_query_groups", "kv_n_heads")
_INTER = ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", "d_ff")
_VOCAB = ("vocab_size", "padded_vocab_size", "n_vocab")
_MAXPOS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
           "n_ctx", "model_max_length")


def _max_pos(cfg: Mapping) -> int | None:
    for k in _MAXPOS:
        v = cfg.get(k)
        if _is_num(v) and v > 0:
            return int(v)
    return None


def _attention_shape(cfg: Mapping, h: int, *, head_dim_keys: tuple[str, ...] = ("head_dim",),
                     kv_keys: tuple[str, ...] = _KV, multi_query_keys: tuple[str, ...] = ("multi_query",),
                     multi_query_default: bool = False) -> tuple[int, int, int]:
    """(n_heads, n_kv_heads, head_dim) with the divisibility checks."""
    nh = _get_int(cfg, _HEADS, "num_attention_heads")
    hd = _get_int(cfg, head_dim_keys, "head_dim", 0) if head_dim_keys else 0
    if not hd:
        if h % nh:
            raise InputError("num_attention_heads", f"{nh} heads do not divide hidden_size {h}")
        hd = h // nh
    if _get_bool(cfg, multi_query_keys, multi_query_default) and not _has(cfg, *kv_keys):
        nkv = 1
    else:
        nkv = _get_int(cfg, kv_keys, "num_key_value_heads", nh)
    if nkv > nh or nh % nkv:
        raise InputError("num_key_value_heads", f"{nkv} key/value heads must divide num_attention_heads {nh}")
    return nh, nkv, hd


# ----------------------------------------------------------------------------------------------------
# the common decoder builder


@dataclass
class _Moe:
    n_experts: int
    top_k: int
    width: int
    gated: bool = True
    n_shared: int = 0  # number of shared experts (reported)
    shared_width: int = 0  # total width of the always-on shared MLP (0: none)
    shared_gate_scalar: bool = False  # qwen2_moe: sigmoid gate h -> 1 on the shared expert
    router_bias: int = 0  # extra per-layer router params (none so far: deepseek_v3's bias is a buffer)


@dataclass
class _Mamba2:
    d_inner: int
    n_heads: int
    n_groups: int
    d_state: int
    d_conv: int
    conv_bias: bool = True
    proj_bias: bool = False


@dataclass
class _Decoder:
    """A decoder-only stack: attention (or Mamba-2) mixer + dense / MoE MLP in each layer."""

    model_type: str
    h: int
    n_layers: int
    nh: int
    nkv: int
    hd: int
    vocab: int
    inter: int  # dense MLP width
    max_pos: int | None
    tie: bool
    gated: bool = True
    fused_qkv: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norms_per_layer: int = 2
    norm_bias: bool = False
    final_norm: bool = True
    qk_norm: str | None = None  # "head": q/k norms of head_dim; "full": of nh*hd / nkv*hd
    qk_norm_bias: bool = False
    pos_rows: int = 0  # learned absolute position embeddings
    emb_dim: int = 0  # embedding / lm-head width when it differs from h (OPT-350m projections)
    lm_head_bias: bool = False
    mla: dict | None = None
    mixers: list[str] | None = None  # per layer "attention" / "mamba" (default all attention)
    mamba2: _Mamba2 | None = None
    mlp_kinds: list[str] | None = None  # per layer "dense" / "moe" (default all dense)
    moe: _Moe | None = None
    other_params: int = 0  # extra non-matmul params (embedding LayerNorm, OPT projections, ...)
    extra: dict = field(default_factory=dict)


def _lin(name: str, i: int, o: int, n_layers: int, bias: bool = False, count: int = 1,
         active: float = 1.0) -> LinearShape | None:
    if n_layers <= 0 or i <= 0 or o <= 0 or count <= 0:
        return None
    return LinearShape(name=name, in_features=i, out_features=o, count_per_layer=count,
                       active_per_token=active, n_layers=n_layers, bias=bias)


@dataclass
class _Counts:
    linears: list[LinearShape]
    other: int
    embedding: int
    lm_head: int
    n_attention_layers: int
    n_moe_layers: int


def _build_decoder(d: _Decoder) -> _Counts:
    h, L = d.h, d.n_layers
    mixers = d.mixers or ["attention"] * L
    kinds = d.mlp_kinds or ["dense"] * L
    la = sum(1 for m in mixers if m == "attention")
    lm = sum(1 for m in mixers if m == "mamba")
    le = sum(1 for k in kinds if k == "moe")
    ld = sum(1 for k in kinds if k == "dense")
    lins: list[LinearShape | None] = []
    other = 0

    # -- attention
    if la:
        if d.mla:
            m = d.mla
            qk_hd = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
            if m.get("q_lora_rank"):
                lins.append(_lin("q_a", h, m["q_lora_rank"], la, d.qkv_bias))
                lins.append(_lin("q_b", m["q_lora_rank"], d.nh * qk_hd, la))
                other += m["q_lora_rank"] * la  # q_a_layernorm
            else:
                lins.append(_lin("q", h, d.nh * qk_hd, la))
            lins.append(_lin("kv_a", h, m["kv_lora_rank"] + m["qk_rope_head_dim"], la, d.qkv_bias))
            lins.append(_lin("kv_b", m["kv_lora_rank"],
                             d.nh * (m["qk_nope_head_dim"] + m["v_head_dim"]), la))
            lins.append(_lin("o", d.nh * m["v_head_dim"], h, la, d.o_bias))
            other += m["kv_lora_rank"] * la  # kv_a_layernorm
        elif d.fused_qkv:
            lins.append(_lin("qkv", h, (d.nh + 2 * d.nkv) * d.hd, la, d.qkv_bias))
            lins.append(_lin("o", d.nh * d.hd, h, la, d.o_bias))
        else:
            lins.append(_lin("q", h, d.nh * d.hd, la, d.qkv_bias))
            lins.append(_lin("k", h, d.nkv * d.hd, la, d.qkv_bias))
            lins.append(_lin("v", h, d.nkv * d.hd, la, d.qkv_bias))
            lins.append(_lin("o", d.nh * d.hd, h, la, d.o_bias))
        per_norm = 2 if d.qk_norm_bias else 1
        if d.qk_norm == "head":
            other += 2 * d.hd * per_norm * la
        elif d.qk_norm == "full":
            other += (d.nh + d.nkv) * d.hd * per_norm * la

    # -- Mamba-2 mixer (hybrid models)
    if lm and d.mamba2:
        mb = d.mamba2
        proj_out = 2 * mb.d_inner + 2 * mb.n_groups * mb.d_state + mb.n_heads
        conv_dim = mb.d_inner + 2 * mb.n_groups * mb.d_state
        lins.append(_lin("in_proj", h, proj_out, lm, mb.proj_bias))
        lins.append(_lin("out_proj", mb.d_inner, h, lm, mb.proj_bias))
        other += lm * (conv_dim * mb.d_conv + (conv_dim if mb.conv_bias else 0)  # depthwise conv1d
                       + 3 * mb.n_heads  # dt_bias, A_log, D
                       + mb.d_inner)  # gated RMSNorm

    # -- dense MLP
    if ld and d.inter:
        if d.gated:
            lins.append(_lin("gate", h, d.inter, ld, d.mlp_bias))
            lins.append(_lin("up", h, d.inter, ld, d.mlp_bias))
            lins.append(_lin("down", d.inter, h, ld, d.mlp_bias))
        else:
            lins.append(_lin("fc1", h, d.inter, ld, d.mlp_bias))
            lins.append(_lin("fc2", d.inter, h, ld, d.mlp_bias))

    # -- MoE MLP
    if le and d.moe:
        mo = d.moe
        lins.append(_lin("router", h, mo.n_experts, le))
        other += mo.router_bias * le
        e, k = mo.n_experts, mo.top_k
        if mo.gated:
            lins.append(_lin("gate", h, mo.width, le, d.mlp_bias, e, k))
            lins.append(_lin("up", h, mo.width, le, d.mlp_bias, e, k))
            lins.append(_lin("down", mo.width, h, le, d.mlp_bias, e, k))
        else:
            lins.append(_lin("fc1", h, mo.width, le, d.mlp_bias, e, k))
            lins.append(_lin("fc2", mo.width, h, le, d.mlp_bias, e, k))
        if mo.shared_width:
            lins.append(_lin("shared_gate", h, mo.shared_width, le))
            lins.append(_lin("shared_up", h, mo.shared_width, le))
            lins.append(_lin("shared_down", mo.shared_width, h, le))
            if mo.shared_gate_scalar:
                lins.append(_lin("shared_expert_gate", h, 1, le))

    # -- norms
    per = 2 if d.norm_bias else 1
    other += d.norms_per_layer * h * per * L + (h * per if d.final_norm else 0)
    other += d.other_params

    emb_dim = d.emb_dim or h
    embedding = d.vocab * emb_dim + d.pos_rows * h
    lm_head = 0 if d.tie else d.vocab * emb_dim + (d.vocab if d.lm_head_bias else 0)
    return _Counts([x for x in lins if x is not None], other, embedding, lm_head, la, le)


# ----------------------------------------------------------------------------------------------------
# architectures


def _moe_layout(cfg: Mapping, mt: str, L: int) -> tuple[list[str], _Moe | None, int]:
    """Per-layer MLP kinds, the MoE description and the dense MLP width of the dense layers."""
    n_exp = _get_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
                     "num_experts", 0, minimum=0)
    if not n_exp:
        return ["dense"] * L, None, 0
    top_k = _get_int(cfg, ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k"),
                     "num_experts_per_tok", 2 if mt == "mixtral" else 1)
    if top_k > n_exp:
        raise InputError("num_experts_per_tok", f"{top_k} experts per token but only {n_exp} experts")
    kinds = ["moe"] * L
    if mt in ("deepseek_v2", "deepseek_v3") or "first_k_dense_replace" in cfg:
        first_dense = _get_int(cfg, ("first_k_dense_replace",), "first_k_dense_replace", 0, minimum=0)
        freq = _get_int(cfg, ("moe_layer_freq",), "moe_layer_freq", 1)
        kinds = ["moe" if (i >= first_dense and i % freq == 0) else "dense" for i in range(L)]
    elif "decoder_sparse_step" in cfg or "mlp_only_layers" in cfg:
        step = _get_int(cfg, ("decoder_sparse_step",), "decoder_sparse_step", 1)
        only = set(cfg.get("mlp_only_layers") or [])
        kinds = ["moe" if ((i + 1) % step == 0 and i not in only) else "dense" for i in range(L)]
    if mt in ("granitemoe", "granitemoeshared", "granitemoehybrid"):
        width = _get_int(cfg, ("intermediate_size",), "intermediate_size")  # per-expert width
    else:
        width = _get_int(cfg, ("moe_intermediate_size", "intermediate_size"), "moe_intermediate_size")
    n_shared = 0
    shared_width = 0
    scalar = False
    if mt == "qwen2_moe" or "shared_expert_intermediate_size" in cfg:
        shared_width = _get_int(cfg, ("shared_expert_intermediate_size",), "shared_expert_intermediate_size",
                                0, minimum=0)
        n_shared = 1 if shared_width else 0
        scalar = bool(shared_width)
    elif _has(cfg, "n_shared_experts") and mt.startswith("deepseek"):
        n_shared = _get_int(cfg, ("n_shared_experts",), "n_shared_experts", 0, minimum=0)
        shared_width = n_shared * width
    elif _has(cfg, "shared_intermediate_size"):
        shared_width = _get_int(cfg, ("shared_intermediate_size",), "shared_intermediate_size", 0, minimum=0)
        n_shared = 1 if shared_width else 0
    moe = _Moe(n_experts=n_exp, top_k=top_k, width=width, n_shared=n_shared, shared_width=shared_width,
               shared_gate_scalar=scalar)
    dense_width = 0
    if "dense" in kinds:
        dense_width = _get_int(cfg, ("intermediate_size",), "intermediate_size")
    return kinds, moe, dense_width


def _hybrid_layout(cfg: Mapping, mt: str, L: int, extra: dict) -> list[str] | None:
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
    if mt == "granitemoehybrid":
        # The config has no layer_types: Granite-4.0-H interleaves Mamba-2 and attention 9:1.
        extra["layer_types_inferred"] = "9 Mamba-2 : 1 attention (Granite-4.0-H layout; no layer_types key)"
        return ["attention" if i % 10 == 5 else "mamba" for i in range(L)]
    return None


def _llama_family(cfg: Mapping, mt: str) -> _Decoder:
    h = _get_int(cfg, _HIDDEN, "hidden_size")
    L = _get_int(cfg, _LAYERS, "num_hidden_layers")
    vocab = _get_int(cfg, _VOCAB, "vocab_size")
    extra: dict = {}
    if mt == "nemotron":
        head_keys: tuple[str, ...] = ("head_dim", "kv_channels")
    elif mt in ("qwen", "chatglm"):
        head_keys = ("kv_channels", "head_dim")
    else:
        head_keys = ("head_dim",)
    nh, nkv, hd = _attention_shape(cfg, h, head_dim_keys=head_keys)
    kinds, moe, dense_width = _moe_layout(cfg, mt, L)
    if moe is None:
        dense_width = _get_int(cfg, _INTER, "intermediate_size")
    d = _Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=vocab, inter=dense_width,
                 max_pos=_max_pos(cfg), tie=False, mlp_kinds=kinds, moe=moe, extra=extra)
    tie_default = False
    attn_bias = _get_bool(cfg, ("attention_bias",), False)
    d.qkv_bias = d.o_bias = attn_bias
    d.mlp_bias = _get_bool(cfg, ("mlp_bias",), False)
    if mt in ("qwen2", "qwen2_moe"):
        d.qkv_bias, d.o_bias = True, False
    elif mt in ("gemma", "gemma2", "gemma3", "gemma3_text"):
        tie_default = True
        if mt != "gemma":
            d.norms_per_layer = 4
        if mt.startswith("gemma3"):
            d.qk_norm = "head"
    elif mt in ("qwen3", "qwen3_moe"):
        d.qk_norm = "head"
    elif mt == "olmo2":
        d.qk_norm = "full"
    elif mt == "phi3":
        d.fused_qkv = True
        extra["fused"] = {"gate_up": ["gate", "up"]}
    elif mt == "baichuan":
        d.fused_qkv = True
    elif mt == "granitemoehybrid":
        d.mixers = _hybrid_layout(cfg, mt, L, extra)
        h_m = _get_int(cfg, ("mamba_n_heads",), "mamba_n_heads", 128)
        expand = _get_int(cfg, ("mamba_expand",), "mamba_expand", 2)
        d_head = cfg.get("mamba_d_head", "auto")
        d_inner = h_m * int(d_head) if _is_num(d_head) else expand * h
        d.mamba2 = _Mamba2(d_inner=d_inner, n_heads=h_m,
                           n_groups=_get_int(cfg, ("mamba_n_groups",), "mamba_n_groups", 1),
                           d_state=_get_int(cfg, ("mamba_d_state",), "mamba_d_state", 256),
                           d_conv=_get_int(cfg, ("mamba_d_conv",), "mamba_d_conv", 4),
                           conv_bias=_get_bool(cfg, ("mamba_conv_bias",), True),
                           proj_bias=_get_bool(cfg, ("mamba_proj_bias",), False))
        if moe is None and _has(cfg, "shared_intermediate_size"):
            d.inter = _get_int(cfg, ("shared_intermediate_size",), "shared_intermediate_size")
    elif mt in ("deepseek_v2", "deepseek_v3"):
        if _has(cfg, "kv_lora_rank"):
            d.mla = {
                "q_lora_rank": _get_int(cfg, ("q_lora_rank",), "q_lora_rank", 0),
                "kv_lora_rank": _get_int(cfg, ("kv_lora_rank",), "kv_lora_rank"),
                "qk_nope_head_dim": _get_int(cfg, ("qk_nope_head_dim",), "qk_nope_head_dim"),
                "qk_rope_head_dim": _get_int(cfg, ("qk_rope_head_dim",), "qk_rope_head_dim"),
                "v_head_dim": _get_int(cfg, ("v_head_dim",), "v_head_dim"),
            }
            d.hd = d.mla["qk_nope_head_dim"] + d.mla["qk_rope_head_dim"]
            extra["mla"] = dict(d.mla)
    elif mt == "nemotron":
        # NeMo/Megatron GPT (Nemotron-3/4) or transformers' Nemotron: LayerNorm1p with bias,
        # squared-ReLU non-gated MLP, untied output layer
        act = str(cfg.get("activation_func", cfg.get("hidden_act", "relu2"))).lower()
        d.gated = "glu" in act or bool(cfg.get("gated_linear_unit", False))
        d.norm_bias = True
        bias_lin = _get_bool(cfg, ("add_bias_linear",), False)
        d.qkv_bias = d.o_bias = bias_lin or attn_bias
        d.mlp_bias = bias_lin or d.mlp_bias
        if "share_embeddings_and_output_weights" in cfg:
            tie_default = bool(cfg["share_embeddings_and_output_weights"])
        if _has(cfg, "rotary_percent", "partial_rotary_factor"):
            extra["rotary_fraction"] = cfg.get("rotary_percent", cfg.get("partial_rotary_factor"))
    d.tie = _get_bool(cfg, ("tie_word_embeddings",), tie_default)
    return d


def _falcon(cfg: Mapping) -> _Decoder:
    h = _get_int(cfg, _HIDDEN, "hidden_size")
    L = _get_int(cfg, _LAYERS, "num_hidden_layers")
    nh, nkv, hd = _attention_shape(cfg, h, head_dim_keys=())
    new_arch = _get_bool(cfg, ("new_decoder_architecture",), nkv not in (1, nh))
    parallel = _get_bool(cfg, ("parallel_attn",), True)
    if new_arch:
        norms = _get_int(cfg, ("num_ln_in_parallel_attn",), "num_ln_in_parallel_attn", 2)
    else:
        norms = 1 if parallel else 2
    bias = _get_bool(cfg, ("bias",), False)
    if not new_arch and nkv not in (1, nh):
        raise InputError("num_key_value_heads", "grouped KV heads need new_decoder_architecture true")
    return _Decoder(model_type="falcon", h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd,
                    vocab=_get_int(cfg, _VOCAB, "vocab_size"),
                    inter=_get_int(cfg, ("ffn_hidden_size", "intermediate_size"), "intermediate_size", 4 * h),
                    max_pos=_max_pos(cfg), tie=_get_bool(cfg, ("tie_word_embeddings",), True),
                    gated=False, fused_qkv=True, qkv_bias=bias, o_bias=bias, mlp_bias=bias,
                    norms_per_layer=norms, norm_bias=True,
                    extra={"parallel_attn": parallel, "new_decoder_architecture": new_arch})


def _gpt_like(cfg: Mapping, mt: str) -> _Decoder:
    """gpt2, gpt_bigcode, gpt_neox, bloom, opt, phi, mpt, qwen (v1), chatglm: biases and LayerNorms."""
    h = _get_int(cfg, _HIDDEN, "hidden_size")
    L = _get_int(cfg, _LAYERS, "num_hidden_layers")
    vocab = _get_int(cfg, _VOCAB if mt != "chatglm" else ("padded_vocab_size", "vocab_size"), "vocab_size")
    extra: dict = {}
    if mt == "mpt":
        attn = cfg.get("attn_config") or {}
        ffn = cfg.get("ffn_config") or {}
        nh = _get_int(cfg, _HEADS, "num_attention_heads")
        if h % nh:
            raise InputError("num_attention_heads", f"{nh} heads do not divide hidden_size {h}")
        hd = h // nh
        nkv = nh
        if str(attn.get("attn_type", "multihead_attention")) in ("grouped_query_attention",
                                                                  "multiquery_attention"):
            nkv = 1 if attn.get("attn_type") == "multiquery_attention" else _get_int(
                attn, ("kv_n_heads",), "num_key_value_heads", nh)
            if nh % nkv:
                raise InputError("num_key_value_heads", f"{nkv} key/value heads must divide {nh} heads")
        no_bias = _get_bool(cfg, ("no_bias",), True)
        ratio = cfg.get("expansion_ratio", 4)
        if not _is_num(ratio) or ratio <= 0:
            raise InputError("intermediate_size", f"'expansion_ratio' must be > 0, got {ratio!r}")
        inter = _get_int(ffn, ("ffn_hidden_size",), "intermediate_size", int(ratio * h))
        alibi = bool(attn.get("alibi", True))
        learned = _get_bool(cfg, ("learned_pos_emb",), True)
        d = _Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=vocab, inter=inter,
                     max_pos=_max_pos(cfg), tie=True, gated=str(ffn.get("ffn_type", "mptmlp")) == "mptglu",
                     fused_qkv=True, qkv_bias=not no_bias, o_bias=not no_bias, mlp_bias=not no_bias,
                     norm_bias=not no_bias, extra=extra)
        if not alibi and learned:
            d.pos_rows = _get_int(cfg, ("max_seq_len",), "max_position_embeddings")
        if attn.get("qk_ln"):
            d.other_params += L * (h + nkv * hd) * (1 if no_bias else 2)
        return d
    if mt == "chatglm":
        nh = _get_int(cfg, _HEADS, "num_attention_heads")
        hd = _get_int(cfg, ("kv_channels",), "kv_channels", 0) or (h // nh)
        if not _has(cfg, "kv_channels") and h % nh:
            raise InputError("num_attention_heads", f"{nh} heads do not divide hidden_size {h}")
        nkv = nh
        if _get_bool(cfg, ("multi_query_attention",), False):
            nkv = _get_int(cfg, ("multi_query_group_num",), "multi_query_group_num", 1)
        if nh % nkv:
            raise InputError("multi_query_group_num", f"{nkv} groups must divide {nh} heads")
        bias = _get_bool(cfg, ("add_bias_linear",), False)
        rms = _get_bool(cfg, ("rmsnorm",), True)
        return _Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=vocab,
                        inter=_get_int(cfg, ("ffn_hidden_size", "intermediate_size"), "ffn_hidden_size"),
                        max_pos=_max_pos(cfg), tie=_get_bool(cfg, ("tie_word_embeddings",), False),
                        gated=True, fused_qkv=True, qkv_bias=_get_bool(cfg, ("add_qkv_bias",), False) or bias,
                        o_bias=bias, mlp_bias=bias, norm_bias=not rms,
                        final_norm=_get_bool(cfg, ("post_layer_norm",), True),
                        extra={"fused": {"gate_up": ["gate", "up"]}})
    if mt == "qwen":
        nh, _, hd = _attention_shape(cfg, h, head_dim_keys=("kv_channels", "head_dim"), kv_keys=())
        inter = _get_int(cfg, ("intermediate_size",), "intermediate_size")
        if inter % 2:
            raise InputError("intermediate_size", f"Qwen-1 intermediate_size is 2 x the SwiGLU width; got odd {inter}")
        return _Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nh, hd=hd, vocab=vocab, inter=inter // 2,
                        max_pos=_max_pos(cfg), tie=_get_bool(cfg, ("tie_word_embeddings",), False),
                        gated=True, fused_qkv=True, qkv_bias=True, o_bias=not _get_bool(cfg, ("no_bias",), True),
                        mlp_bias=not _get_bool(cfg, ("no_bias",), True))

    mq_keys = ("multi_query",) if mt == "gpt_bigcode" else ()
    kv_keys: tuple[str, ...] = _KV if mt in ("gpt_bigcode", "phi") else ()
    nh, nkv, hd = _attention_shape(cfg, h, head_dim_keys=(), kv_keys=kv_keys, multi_query_keys=mq_keys,
                                   multi_query_default=mt == "gpt_bigcode")
    inter_default = 4 * h
    d = _Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=vocab,
                 inter=_get_int(cfg, _INTER, "intermediate_size", inter_default), max_pos=_max_pos(cfg),
                 tie=True, gated=False, qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True, extra=extra)
    if mt in ("gpt2", "gpt_bigcode"):
        d.fused_qkv = True
        d.pos_rows = _get_int(cfg, ("n_positions", "max_position_embeddings"), "max_position_embeddings")
        d.tie = _get_bool(cfg, ("tie_word_embeddings",), True)
    elif mt == "gpt_neox":
        d.fused_qkv = True
        d.qkv_bias = d.o_bias = _get_bool(cfg, ("attention_bias",), True)
        d.tie = _get_bool(cfg, ("tie_word_embeddings",), False)
        extra["parallel_residual"] = _get_bool(cfg, ("use_parallel_residual",), True)
    elif mt == "bloom":
        d.fused_qkv = True
        d.other_params += 2 * h  # word_embeddings_layernorm
        d.tie = _get_bool(cfg, ("tie_word_embeddings",), True)
    elif mt == "opt":
        bias = _get_bool(cfg, ("enable_bias",), True)
        d.qkv_bias = d.o_bias = d.mlp_bias = bias
        d.norm_bias = _get_bool(cfg, ("layer_norm_elementwise_affine",), True)
        wepd = _get_int(cfg, ("word_embed_proj_dim",), "word_embed_proj_dim", h)
        d.emb_dim = wepd
        if wepd != h:
            d.other_params += 2 * wepd * h  # project_in / project_out (no bias)
        d.final_norm = _get_bool(cfg, ("do_layer_norm_before",), True) and not cfg.get("_remove_final_layer_norm")
        d.pos_rows = _get_int(cfg, ("max_position_embeddings",), "max_position_embeddings") + 2  # offset 2
        d.tie = _get_bool(cfg, ("tie_word_embeddings",), True)
    elif mt == "phi":
        d.norms_per_layer = 1  # parallel attention + MLP share one LayerNorm
        d.lm_head_bias = True
        d.tie = _get_bool(cfg, ("tie_word_embeddings",), False)
        if cfg.get("qk_layernorm"):
            d.qk_norm, d.qk_norm_bias = "head", True
    return d


def _t5(cfg: Mapping, mt: str) -> _Counts:
    h = _get_int(cfg, ("d_model", "hidden_size"), "hidden_size")
    n_enc = _get_int(cfg, ("num_layers", "num_hidden_layers"), "num_hidden_layers")
    n_dec = _get_int(cfg, ("num_decoder_layers",), "num_decoder_layers", n_enc)
    nh = _get_int(cfg, ("num_heads", "num_attention_heads"), "num_attention_heads")
    dkv = _get_int(cfg, ("d_kv",), "d_kv", 0)
    if not dkv:
        if h % nh:
            raise InputError("num_attention_heads", f"{nh} heads do not divide d_model {h}")
        dkv = h // nh
    dff = _get_int(cfg, ("d_ff", "intermediate_size"), "d_ff")
    vocab = _get_int(cfg, _VOCAB, "vocab_size")
    proj = str(cfg.get("feed_forward_proj", "relu")).lower()
    gated = proj.startswith("gated")
    buckets = _get_int(cfg, ("relative_attention_num_buckets",), "relative_attention_num_buckets", 32)
    inner = nh * dkv
    attn_layers = n_enc + 2 * n_dec  # encoder self, decoder self + cross
    mlp_layers = n_enc + n_dec
    lins = [_lin("q", h, inner, attn_layers), _lin("k", h, inner, attn_layers),
            _lin("v", h, inner, attn_layers), _lin("o", inner, h, attn_layers)]
    if gated:
        lins += [_lin("gate", h, dff, mlp_layers), _lin("up", h, dff, mlp_layers), _lin("down", dff, h, mlp_layers)]
    else:
        lins += [_lin("fc1", h, dff, mlp_layers), _lin("fc2", dff, h, mlp_layers)]
    norms = (2 * n_enc + 3 * n_dec + 2) * h  # RMS LayerNorms (weight only) + final norm of each stack
    rel = 2 * buckets * nh  # relative attention bias in the first layer of each stack
    tie = _get_bool(cfg, ("tie_word_embeddings",), mt == "t5")
    embedding = vocab * h
    lm_head = 0 if tie else vocab * h
    return _Counts([x for x in lins if x is not None], norms + rel, embedding, lm_head, -1, 0)


def _mamba(cfg: Mapping) -> _Counts:
    h = _get_int(cfg, _HIDDEN, "hidden_size")
    L = _get_int(cfg, _LAYERS, "num_hidden_layers")
    vocab = _get_int(cfg, _VOCAB, "vocab_size")
    expand = _get_int(cfg, ("expand",), "expand", 2)
    d_inner = _get_int(cfg, ("intermediate_size",), "intermediate_size", expand * h)
    ds = _get_int(cfg, ("state_size", "d_state"), "state_size", 16)
    k = _get_int(cfg, ("conv_kernel", "d_conv"), "conv_kernel", 4)
    rank = cfg.get("time_step_rank", "auto")
    dt_rank = math.ceil(h / 16) if rank in (None, "auto") else _get_int(cfg, ("time_step_rank",), "time_step_rank")
    use_bias = _get_bool(cfg, ("use_bias",), False)
    conv_bias = _get_bool(cfg, ("use_conv_bias",), True)
    lins = [_lin("in_proj", h, 2 * d_inner, L, use_bias), _lin("x_proj", d_inner, dt_rank + 2 * ds, L),
            _lin("dt_proj", dt_rank, d_inner, L, True), _lin("out_proj", d_inner, h, L, use_bias)]
    other = L * (d_inner * k + (d_inner if conv_bias else 0) + d_inner * ds + d_inner + h) + h
    tie = _get_bool(cfg, ("tie_word_embeddings",), True)
    return _Counts([x for x in lins if x is not None], other, vocab * h, 0 if tie else vocab * h, 0, 0)


def _blackmamba(cfg: Mapping) -> tuple[_Counts, dict]:
    """Zyphra BlackMamba: alternating Mamba ('r') and switch-MoE ('<n experts>') blocks, no attention."""
    h = _get_int(cfg, _HIDDEN, "hidden_size")
    layers = cfg.get("mamba_moe_layers")
    if not isinstance(layers, list) or not layers:
        raise InputError("mamba_moe_layers", "must be a non-empty list of 'r' / '<n_experts>' entries")
    L = _get_int(cfg, ("num_layers", "num_hidden_layers"), "num_hidden_layers", len(layers))
    if len(layers) != L:
        raise InputError("mamba_moe_layers", f"has {len(layers)} entries but num_layers is {L}")
    vocab = _get_int(cfg, _VOCAB, "vocab_size")
    ds = _get_int(cfg, ("state_size",), "state_size", 16)
    k = _get_int(cfg, ("conv_dimension",), "conv_dimension", 4)
    expand = _get_int(cfg, ("expansion_factor",), "expansion_factor", 2)
    d_inner = expand * h
    dt_rank = math.ceil(h / 16)
    ffn = _get_int(cfg, ("ffn_hidden_size",), "ffn_hidden_size")
    bias = _get_bool(cfg, ("add_bias_linear", "bias"), False)
    gated = _get_bool(cfg, ("swiglu",), True)
    n_mamba = 0
    experts: list[int] = []
    for entry in layers:
        s = str(entry).strip().lower()
        if s == "r":
            n_mamba += 1
        elif s.isdigit() and int(s) > 0:
            experts.append(int(s))
        else:
            raise InputError("mamba_moe_layers", f"unknown entry '{entry}' (use 'r' or a number of experts)")
    if len(set(experts)) > 1:
        raise InputError("mamba_moe_layers", "MoE blocks with different expert counts are not supported")
    n_moe = len(experts)
    n_exp = experts[0] if experts else 0
    top_k = _get_int(cfg, ("topk", "moe_top_k", "num_experts_per_tok"), "num_experts_per_tok", 1)
    if n_exp and top_k > n_exp:
        raise InputError("num_experts_per_tok", f"{top_k} experts per token but only {n_exp} experts")
    lins = [_lin("in_proj", h, 2 * d_inner, n_mamba, bias), _lin("x_proj", d_inner, dt_rank + 2 * ds, n_mamba),
            _lin("dt_proj", dt_rank, d_inner, n_mamba, True), _lin("out_proj", d_inner, h, n_mamba, bias),
            _lin("router", h, n_exp, n_moe)]
    if gated:
        lins += [_lin("gate", h, ffn, n_moe, bias, n_exp, top_k), _lin("up", h, ffn, n_moe, bias, n_exp, top_k),
                 _lin("down", ffn, h, n_moe, bias, n_exp, top_k)]
    else:
        lins += [_lin("fc1", h, ffn, n_moe, bias, n_exp, top_k), _lin("fc2", ffn, h, n_moe, bias, n_exp, top_k)]
    other = n_mamba * (d_inner * k + d_inner + d_inner * ds + d_inner) + L * h + h  # conv, A, D; norms
    tie = _get_bool(cfg, ("tie_word_embeddings",), True)
    counts = _Counts([x for x in lins if x is not None], other, vocab * h, 0 if tie else vocab * h, 0, n_moe)
    meta = {"h": h, "L": L, "vocab": vocab, "ffn": ffn, "n_exp": n_exp, "top_k": top_k, "n_moe": n_moe,
            "n_mamba": n_mamba, "d_inner": d_inner, "d_state": ds, "conv_kernel": k, "gated": gated}
    return counts, meta


# ----------------------------------------------------------------------------------------------------
# dispatch


def detect_model_type(config: Mapping) -> str:
    """The model type to read a config with: `model_type`, else by architecture name or key names."""
    mt = config.get("model_type")
    if isinstance(mt, str) and mt.strip():
        return mt.strip().lower()
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        t = _ARCH_TO_TYPE.get(archs[0].lower())
        if t:
            return t
    if "mamba_moe_layers" in config:
        return "blackmamba"
    if _has(config, "ffn_hidden_size") and _has(config, "num_layers") and (
            "activation_func" in config or "num_query_groups" in config):
        return "nemotron"  # NeMo / Megatron GPT key names
    if "multi_query" in config and not archs:
        return "gpt_bigcode"  # GPTBigCodeConfig key (Falcon configs name their architecture)
    if _has(config, "d_model") and _has(config, "d_ff"):
        return "t5"
    if _has(config, "state_size") and not _has(config, *_HEADS):
        return "mamba"
    return ""


def _fill_inferred(config: Mapping) -> dict:
    cfg = dict(config)
    inferred = config.get("_inferred_not_stated")
    if isinstance(inferred, Mapping):
        for k, v in inferred.items():
            if k == "basis" or k.startswith("_") or k.endswith("_alternative"):
                continue
            if cfg.get(k) is None:
                cfg[k] = v
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and not _has(cfg, *_HIDDEN):
        merged = dict(text)
        for k in ("tie_word_embeddings", "_published_params"):
            if k in cfg and k not in merged:
                merged[k] = cfg[k]
        merged.setdefault("model_type", text.get("model_type") or cfg.get("model_type"))
        cfg = merged
    return cfg


def model_from_config(config: dict, name: str, source: str = "") -> ModelSpec:
    """Build a ModelSpec from a config.json dict; every count is computed from the shapes.

    Raises InputError naming the offending field for configs that cannot describe a model.
    """
    if not isinstance(config, Mapping):
        raise InputError("config", f"must be a JSON object, got {type(config).__name__}")
    check_config_sizes(config)
    cfg = _fill_inferred(config)
    mt = detect_model_type(cfg)
    generic = False
    if mt in ("gemma3",) and not _has(cfg, *_HIDDEN):
        raise InputError("hidden_size", "missing from the config (keys looked for: hidden_size, text_config)")
    if mt not in SUPPORTED_MODEL_TYPES:
        needed = (_HIDDEN, _LAYERS, _HEADS, _INTER, _VOCAB)
        if all(_has(cfg, *keys) for keys in needed):
            generic = True
        else:
            what = f"unsupported model_type '{mt}'" if mt else "no model_type and no recognisable architecture"
            raise InputError("model_type", f"{what} (a llama-like config needs hidden_size, "
                             "num_hidden_layers, num_attention_heads, intermediate_size, vocab_size)",
                             SUPPORTED_MODEL_TYPES)

    extra: dict = {}
    n_experts = top_k = moe_width = n_shared = 0
    is_encdec = False
    nh = nkv = hd = 0
    inter = 0
    gated = True
    max_pos = _max_pos(cfg)
    if mt in ("t5", "mt5"):
        counts = _t5(cfg, mt)
        h = _get_int(cfg, ("d_model", "hidden_size"), "hidden_size")
        n_enc = _get_int(cfg, ("num_layers", "num_hidden_layers"), "num_hidden_layers")
        n_dec = _get_int(cfg, ("num_decoder_layers",), "num_decoder_layers", n_enc)
        L = n_enc + n_dec
        nh = nkv = _get_int(cfg, ("num_heads", "num_attention_heads"), "num_attention_heads")
        hd = _get_int(cfg, ("d_kv",), "d_kv", 0) or h // nh
        inter = _get_int(cfg, ("d_ff", "intermediate_size"), "d_ff")
        gated = str(cfg.get("feed_forward_proj", "relu")).lower().startswith("gated")
        vocab = _get_int(cfg, _VOCAB, "vocab_size")
        is_encdec = True
        max_pos = None  # relative position buckets
        extra.update(n_encoder_layers=n_enc, n_decoder_layers=n_dec)
        n_attn = -1
    elif mt == "mamba":
        counts = _mamba(cfg)
        h = _get_int(cfg, _HIDDEN, "hidden_size")
        L = _get_int(cfg, _LAYERS, "num_hidden_layers")
        vocab = _get_int(cfg, _VOCAB, "vocab_size")
        gated = False
        d_inner = _get_int(cfg, ("intermediate_size",), "intermediate_size",
                           _get_int(cfg, ("expand",), "expand", 2) * h)
        extra["mamba"] = {"d_inner": d_inner, "d_state": _get_int(cfg, ("state_size",), "state_size", 16),
                          "conv_kernel": _get_int(cfg, ("conv_kernel",), "conv_kernel", 4), "version": 1}
        max_pos = None
        n_attn = 0
    elif mt == "blackmamba":
        counts, meta = _blackmamba(cfg)
        h, L, vocab = meta["h"], meta["L"], meta["vocab"]
        n_experts, top_k, moe_width = meta["n_exp"], meta["top_k"], meta["ffn"]
        gated = meta["gated"]
        extra["mamba"] = {"d_inner": meta["d_inner"], "d_state": meta["d_state"],
                          "conv_kernel": meta["conv_kernel"], "version": 1, "n_layers": meta["n_mamba"]}
        n_attn = 0
    else:
        if generic or mt in _LLAMA_LIKE:
            dec = _llama_family(cfg, "llama" if generic else mt)
            if generic:
                extra["generic_reading"] = f"model_type '{mt}' read as a llama-like decoder"
        elif mt == "falcon":
            dec = _falcon(cfg)
        else:
            dec = _gpt_like(cfg, mt)
        counts = _build_decoder(dec)
        h, L, vocab, nh, nkv, hd = dec.h, dec.n_layers, dec.vocab, dec.nh, dec.nkv, dec.hd
        inter, gated, max_pos = dec.inter, dec.gated, dec.max_pos
        extra.update(dec.extra)
        if dec.moe is not None:
            n_experts, top_k, moe_width, n_shared = (dec.moe.n_experts, dec.moe.top_k, dec.moe.width,
                                                     dec.moe.n_shared)
            if dec.moe.shared_width:
                extra["shared_expert_intermediate_size"] = dec.moe.shared_width
            if "dense" not in (dec.mlp_kinds or []):
                inter = 0
        if dec.mixers and "mamba" in dec.mixers:
            n_attn = counts.n_attention_layers
            mb = dec.mamba2
            assert mb is not None
            extra["layer_types"] = list(dec.mixers)
            extra["mamba"] = {"d_inner": mb.d_inner, "d_state": mb.d_state, "conv_kernel": mb.d_conv,
                              "n_heads": mb.n_heads, "n_groups": mb.n_groups, "version": 2,
                              "n_layers": L - n_attn}
        else:
            n_attn = -1
        for k in ("sliding_window", "sliding_window_pattern", "rotary_pct", "partial_rotary_factor"):
            if cfg.get(k) is not None:
                extra[k] = cfg[k]

    lin_params = sum(lin.params for lin in counts.linears)
    total = lin_params + counts.other + counts.embedding + counts.lm_head
    inactive = 0
    for lin in counts.linears:
        if lin.count_per_layer > lin.active_per_token:
            per = lin.in_features * lin.out_features + (lin.out_features if lin.bias else 0)
            inactive += int(round(per * (lin.count_per_layer - lin.active_per_token) * lin.n_layers))
    extra["params_other"] = counts.other
    published = config.get("_published_params") if isinstance(config, Mapping) else None
    return ModelSpec(
        name=name,
        model_type=mt if not generic else (mt or "llama"),
        n_layers=L,
        hidden_size=h,
        n_heads=nh,
        n_kv_heads=nkv,
        head_dim=hd,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        tied_embeddings=counts.lm_head == 0,
        gated_mlp=gated,
        linears=tuple(counts.linears),
        params_total=total,
        params_active=total - inactive,
        params_embedding=counts.embedding,
        params_lm_head=counts.lm_head,
        n_attention_layers=n_attn,
        n_experts=n_experts,
        experts_per_token=top_k,
        moe_intermediate_size=moe_width,
        n_shared_experts=n_shared,
        n_moe_layers=counts.n_moe_layers,
        is_encoder_decoder=is_encdec,
        quant=quant_from_name(name) if quant_from_name(name) != "none" else quant_from_config(cfg),
        published_params=str(published) if published is not None else None,
        source=source,
        extra=extra,
    )


def looks_llama_like(config: Mapping) -> bool:
    """True when a config without model_type is read as a plain llama decoder (catalog helper)."""
    mt = detect_model_type(_fill_inferred(config))
    if mt in ("llama", "mistral", "yi"):
        return True
    return mt == "" and all(_has(config, *k) for k in (_HIDDEN, _LAYERS, _HEADS, _INTER, _VOCAB))
