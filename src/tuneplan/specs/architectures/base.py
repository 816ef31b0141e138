"""What every architecture reader shares: reading config values, the decoder description, its counts.

Every architecture is reduced to the same bookkeeping: the block matmuls (`LinearShape`s, with their
biases), the small per-layer tensors (norms, SSM state tensors, relative-position tables), the input
embedding (+ learned positions) and the LM head. `params_total` is their sum, `params_active` removes
the experts a token does not visit (top-k routing).

A reader (see `tuneplan.specs.architectures.READERS`) turns a config dict into one `ModelSpec`; most
describe a `Decoder` and let `decoder_spec` count it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from tuneplan.errors import InputError
from tuneplan.specs.architectures.quant import quant_from_config, quant_from_name
from tuneplan.specs.model import LinearShape, ModelSpec, SSMShape

MISSING = object()

Reader = Callable[[Mapping, str, str, str], ModelSpec]  # (config, model_type, name, source) -> ModelSpec.

READERS: dict[str, Reader] = {}
"""model_type -> the reader that turns its config into a ModelSpec (filled by `register`)."""


def register(*model_types: str) -> Callable[[Reader], Reader]:
    """Decorator: `fn` reads configs of these model types."""

    def wrap(fn: Reader) -> Reader:
        for mt in model_types:
            READERS[mt] = fn
        return fn

    return wrap


# ----------------------------------------------------------------------------------------------------
# reading values


def is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def get_int(cfg: Mapping, keys: Iterable[str], field_: str, default: object = MISSING, *,
            minimum: int = 1) -> int:
    """First present (non-null) key among `keys` as an int >= minimum; InputError naming `field_`."""
    keys = tuple(keys)
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if not is_num(v) or (isinstance(v, float) and (not math.isfinite(v) or v != int(v))):
                raise InputError(field_, f"'{k}' must be an integer, got {v!r}")
            v = int(v)
            if v < minimum:
                raise InputError(field_, f"'{k}' must be >= {minimum}, got {v}")
            return v
    if default is MISSING:
        looked = ", ".join(keys)
        raise InputError(field_, f"missing from the config (keys looked for: {looked})")
    return default  # type: ignore[return-value]


_INFERRED_TEXT = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[A-Za-z_][\w.]*)(?:\s+(?:\(|per\b|-)|\s*$)")


def inferred_value(v: object) -> object:
    """A value of a catalog file's `_inferred_not_stated`: JSON values as they are; text that leads with
    the value and then says why ("151552 (slime's args ...)", "8192 per the ... prose", "silu (Olmo2
    class)") -> the leading value (a number as int or float); any other text unchanged."""
    if not isinstance(v, str):
        return v
    m = _INFERRED_TEXT.match(v)
    if not m:
        return v
    tok = m.group(1)
    if tok[0].isdigit() or tok[0] in "+-":
        x = float(tok)
        return int(x) if x.is_integer() and not any(c in tok for c in ".eE") else x
    return {"true": True, "false": False}.get(tok, tok)


def inferred_values(config: Mapping) -> dict:
    """A catalog file's `_inferred_not_stated` values (through `inferred_value`), without its notes
    (`basis`, `_...`, `..._alternative`): they fill keys the file leaves absent or null."""
    inferred = config.get("_inferred_not_stated")
    if not isinstance(inferred, Mapping):
        return {}
    return {k: inferred_value(v) for k, v in inferred.items()
            if k != "basis" and not k.startswith("_") and not k.endswith("_alternative")}


def int_key(cfg: Mapping, key: str, default: object = MISSING, *, minimum: int = 1) -> int:
    """`get_int` of one key, which also names the field in errors."""
    return get_int(cfg, (key,), key, default, minimum=minimum)


def get_bool(cfg: Mapping, keys: Iterable[str] | str, default: bool) -> bool:
    for k in (keys,) if isinstance(keys, str) else keys:
        if k in cfg and cfg[k] is not None:
            return bool(cfg[k])
    return default


def has(cfg: Mapping, *keys: str) -> bool:
    return any(k in cfg and cfg[k] is not None for k in keys)


def uniform_list(cfg: Mapping, key: str, n: int) -> int | None:
    """A per-layer list key whose entries are all the same integer -> that integer (None if absent)."""
    v = cfg.get(key)
    if v is None:
        return None
    if is_num(v):
        return int(v)
    if not isinstance(v, list) or not v or not all(is_num(x) for x in v):
        raise InputError(key, f"must be an integer or a list of integers, got {v!r}")
    if len(set(v)) > 1:
        raise InputError(key, "layers with different values are not supported")
    if len(v) not in (1, n):
        raise InputError(key, f"lists {len(v)} entries for {n} layers")
    return int(v[0])


HIDDEN = ("hidden_size", "n_embd", "d_model", "n_embed", "dim", "model_dim")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
KV = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "num_query_groups", "kv_n_heads")
INTER = ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", "d_ff")
VOCAB = ("vocab_size", "padded_vocab_size", "n_vocab")
MAXPOS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
          "n_ctx", "model_max_length")


def max_pos(cfg: Mapping) -> int | None:
    for k in MAXPOS:
        v = cfg.get(k)
        if is_num(v) and v > 0:
            return int(v)
    return None


def attention_shape(cfg: Mapping, h: int, *, head_dim_keys: tuple[str, ...] = ("head_dim",),
                    kv_keys: tuple[str, ...] = KV, multi_query_keys: tuple[str, ...] = ("multi_query",),
                    multi_query_default: bool = False) -> tuple[int, int, int]:
    """(n_heads, n_kv_heads, head_dim) with the divisibility checks."""
    nh = get_int(cfg, HEADS, "num_attention_heads")
    hd = get_int(cfg, head_dim_keys, "head_dim", 0) if head_dim_keys else 0
    if not hd:
        if h % nh:
            raise InputError("num_attention_heads", f"{nh} heads do not divide hidden_size {h}")
        hd = h // nh
    if get_bool(cfg, multi_query_keys, multi_query_default) and not has(cfg, *kv_keys):
        nkv = 1
    else:
        nkv = get_int(cfg, kv_keys, "num_key_value_heads", nh)
    if nkv > nh or nh % nkv:
        raise InputError("num_key_value_heads", f"{nkv} key/value heads must divide num_attention_heads {nh}")
    return nh, nkv, hd


# ----------------------------------------------------------------------------------------------------
# the common decoder description


@dataclass
class Moe:
    n_experts: int
    top_k: int
    width: int
    gated: bool = True
    n_shared: int = 0  # number of shared experts (reported)
    shared_width: int = 0  # total width of the always-on shared MLP (0: none)
    shared_gate_scalar: bool = False  # qwen2_moe: sigmoid gate h -> 1 on the shared expert
    router_bias: bool = False  # router Linear with a bias (gpt-oss)
    expert_bias: bool = False  # experts' projections with biases (gpt-oss)
    latent: int = 0  # latent MoE (Nemotron-3 Super/Ultra): experts work in this width, h <-> latent projections


@dataclass
class Mamba2:
    d_inner: int
    n_heads: int
    n_groups: int
    d_state: int
    d_conv: int
    conv_bias: bool = True
    proj_bias: bool = False
    chunk: int = 256
    gated_norm: bool = True  # RMSNormGated over d_inner before out_proj


@dataclass
class Mamba1:
    d_inner: int
    d_state: int
    d_conv: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False  # Jamba: RMSNorms on dt, B and C


@dataclass
class LinearAttn:
    """A linear-attention mixer (Gated DeltaNet, lightning attention): its projections per layer, the
    small tensors, and the recurrent state's shape (key width x value width per value head)."""

    kind: str  # "deltanet" or "lightning"
    projections: list[tuple[str, int, int]]  # (name, in, out) per layer, no biases
    other_per_layer: int  # conv1d, dt_bias / A_log, gated norm weights
    n_heads: int  # value heads (one state each)
    k_dim: int  # key width per head (the state's rows)
    v_dim: int  # value width per head (the state's columns)
    conv_kernel: int = 0
    conv_channels: int = 0
    chunk: int = 64


@dataclass
class Decoder:
    """A decoder-only stack: attention and/or Mamba mixer + dense / MoE MLP in each layer."""

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
    # per layer "attention" / "mamba" / "attention+mamba" (parallel hybrid) / "none" (default all attention)
    mixers: list[str] | None = None
    mamba2: Mamba2 | None = None
    mamba1: Mamba1 | None = None
    linear: LinearAttn | None = None  # mixers "linear": linear attention layers
    q_gate: bool = False  # Qwen3-Next gated attention: q_proj also writes a sigmoid output gate
    mlp_kinds: list[str] | None = None  # per layer "dense" / "moe" / "none" (default all dense)
    moe: Moe | None = None
    attn_sinks: bool = False  # gpt-oss: one learned sink logit per head
    window: int = 0  # local attention span (tokens)
    local_layers: int = 0  # attention layers limited to `window`
    local_kind: str = ""  # "sliding" / "chunked"
    other_params: int = 0  # extra non-matmul params (embedding LayerNorm, OPT projections, ...)
    extra: dict = field(default_factory=dict)


def decoder_of(cfg: Mapping, mt: str, inter: int = 0, *, tie: bool = False, shape: Mapping | None = None,
               **fields) -> Decoder:
    """A Decoder of the shapes most readers read alike: width, layers, attention heads (`attention_shape`
    with the keywords `shape`), vocabulary, positions, and the tied head (`tie`: the config class's
    default); `fields` set the rest."""
    h = get_int(cfg, HIDDEN, "hidden_size")
    L = get_int(cfg, LAYERS, "num_hidden_layers")
    nh, nkv, hd = attention_shape(cfg, h, **(shape or {}))
    return Decoder(model_type=mt, h=h, n_layers=L, nh=nh, nkv=nkv, hd=hd, vocab=get_int(cfg, VOCAB, "vocab_size"),
                   inter=inter, max_pos=max_pos(cfg), tie=get_bool(cfg, "tie_word_embeddings", tie), **fields)


def lin(name: str, i: int, o: int, n_layers: int, bias: bool = False, count: int = 1,
        active: float = 1.0) -> LinearShape | None:
    if n_layers <= 0 or i <= 0 or o <= 0 or count <= 0:
        return None
    return LinearShape(name=name, in_features=i, out_features=o, count_per_layer=count,
                       active_per_token=active, n_layers=n_layers, bias=bias)


@dataclass
class Counts:
    linears: list[LinearShape]
    other: int
    embedding: int
    lm_head: int
    n_attention_layers: int
    n_moe_layers: int
    n_dense_layers: int = -1


def _mla_linears(d: Decoder, la: int) -> tuple[list[LinearShape | None], int]:
    """DeepSeek-V2/V3 multi-head latent attention: low-rank q (optional) and a shared compressed KV."""
    m, h = d.mla or {}, d.h
    qk_hd = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
    lins: list[LinearShape | None] = []
    other = 0
    if m.get("q_lora_rank"):
        lins.append(lin("q_a", h, m["q_lora_rank"], la, d.qkv_bias))
        lins.append(lin("q_b", m["q_lora_rank"], d.nh * qk_hd, la))
        other += m["q_lora_rank"] * la  # q_a_layernorm
    else:
        lins.append(lin("q", h, d.nh * qk_hd, la))
    lins.append(lin("kv_a", h, m["kv_lora_rank"] + m["qk_rope_head_dim"], la, d.qkv_bias))
    lins.append(lin("kv_b", m["kv_lora_rank"], d.nh * (m["qk_nope_head_dim"] + m["v_head_dim"]), la))
    lins.append(lin("o", d.nh * m["v_head_dim"], h, la, d.o_bias))
    other += m["kv_lora_rank"] * la  # kv_a_layernorm
    return lins, other


def _attention_linears(d: Decoder, la: int) -> tuple[list[LinearShape | None], int]:
    if not la:
        return [], 0
    if d.mla:
        return _mla_linears(d, la)
    h = d.h
    if d.fused_qkv:
        lins = [lin("qkv", h, (d.nh + 2 * d.nkv) * d.hd, la, d.qkv_bias), lin("o", d.nh * d.hd, h, la, d.o_bias)]
    else:
        q_out = d.nh * d.hd * (2 if d.q_gate else 1)
        lins = [lin("q", h, q_out, la, d.qkv_bias), lin("k", h, d.nkv * d.hd, la, d.qkv_bias),
                lin("v", h, d.nkv * d.hd, la, d.qkv_bias), lin("o", d.nh * d.hd, h, la, d.o_bias)]
    other = 0
    per_norm = 2 if d.qk_norm_bias else 1
    if d.qk_norm == "head":
        other += 2 * d.hd * per_norm * la
    elif d.qk_norm == "full":
        other += (d.nh + d.nkv) * d.hd * per_norm * la
    if d.attn_sinks:
        other += d.nh * la
    return lins, other


def _mamba_linears(d: Decoder, lm: int) -> tuple[list[LinearShape | None], int]:
    h = d.h
    if not lm:
        return [], 0
    if d.mamba2:
        mb = d.mamba2
        proj_out = 2 * mb.d_inner + 2 * mb.n_groups * mb.d_state + mb.n_heads
        conv_dim = mb.d_inner + 2 * mb.n_groups * mb.d_state
        lins = [lin("in_proj", h, proj_out, lm, mb.proj_bias), lin("out_proj", mb.d_inner, h, lm, mb.proj_bias)]
        other = lm * (conv_dim * mb.d_conv + (conv_dim if mb.conv_bias else 0)  # depthwise conv1d
                      + 3 * mb.n_heads  # dt_bias, A_log, D
                      + (mb.d_inner if mb.gated_norm else 0))  # gated RMSNorm
        return lins, other
    if d.mamba1:
        m1 = d.mamba1
        lins = [lin("in_proj", h, 2 * m1.d_inner, lm, m1.proj_bias),
                lin("x_proj", m1.d_inner, m1.dt_rank + 2 * m1.d_state, lm),
                lin("dt_proj", m1.dt_rank, m1.d_inner, lm, True), lin("out_proj", m1.d_inner, h, lm, m1.proj_bias)]
        other = lm * (m1.d_inner * m1.d_conv + (m1.d_inner if m1.conv_bias else 0)  # conv1d
                      + m1.d_inner * m1.d_state + m1.d_inner  # A_log, D
                      + ((m1.dt_rank + 2 * m1.d_state) if m1.inner_norms else 0))
        return lins, other
    raise InputError("layer_types", "Mamba layers listed but the config describes no Mamba mixer")


def _linear_attn_linears(d: Decoder, ll: int) -> tuple[list[LinearShape | None], int]:
    if not ll:
        return [], 0
    if d.linear is None:
        raise InputError("layer_types", "linear-attention layers listed but the config describes none")
    return [lin(n, i, o, ll) for n, i, o in d.linear.projections], d.linear.other_per_layer * ll


def mlp_linears(x: int, width: int, n_layers: int, gated: bool, bias: bool = False, count: int = 1,
                active: float = 1.0) -> list[LinearShape | None]:
    """An MLP from width `x` through `width` and back: gated (gate, up, down) or plain (fc1, fc2)."""
    names = (("gate", x, width), ("up", x, width), ("down", width, x)) if gated else (
        ("fc1", x, width), ("fc2", width, x))
    return [lin(n, i, o, n_layers, bias, count, active) for n, i, o in names]


def _mlp_linears(d: Decoder, ld: int, le: int) -> list[LinearShape | None]:
    h = d.h
    lins: list[LinearShape | None] = []
    if ld and d.inter:
        lins += mlp_linears(h, d.inter, ld, d.gated, d.mlp_bias)
    if le and d.moe:
        mo = d.moe
        e, k, b = mo.n_experts, mo.top_k, d.mlp_bias or mo.expert_bias
        lins.append(lin("router", h, mo.n_experts, le, mo.router_bias))
        x = mo.latent or h  # the experts' input / output width
        if mo.latent:
            lins += [lin("latent_in", h, x, le), lin("latent_out", x, h, le)]
        lins += mlp_linears(x, mo.width, le, mo.gated, b, e, k)
        if mo.shared_width:
            if mo.gated:
                lins += [lin("shared_gate", h, mo.shared_width, le), lin("shared_up", h, mo.shared_width, le)]
            else:
                lins.append(lin("shared_up", h, mo.shared_width, le))
            lins.append(lin("shared_down", mo.shared_width, h, le))
            if mo.shared_gate_scalar:
                lins.append(lin("shared_expert_gate", h, 1, le))
    return lins


def build_decoder(d: Decoder) -> Counts:
    """Count a decoder's matmuls, small tensors, embedding and head."""
    h, L = d.h, d.n_layers
    mixers = d.mixers or ["attention"] * L
    kinds = d.mlp_kinds or ["dense"] * L
    la = sum(1 for m in mixers if "attention" in m)
    lm = sum(1 for m in mixers if "mamba" in m)
    le = sum(1 for k in kinds if k == "moe")
    ld = sum(1 for k in kinds if k == "dense")
    ll = sum(1 for m in mixers if m == "linear")
    mixer_parts = [_attention_linears(d, la), _mamba_linears(d, lm), _linear_attn_linears(d, ll)]
    lins = [x for part, _ in mixer_parts for x in part] + _mlp_linears(d, ld, le)
    per = 2 if d.norm_bias else 1
    other = sum(o for _, o in mixer_parts) + d.norms_per_layer * h * per * L + (h * per if d.final_norm else 0)
    other += d.other_params
    emb_dim = d.emb_dim or h
    embedding = d.vocab * emb_dim + d.pos_rows * h
    lm_head = 0 if d.tie else d.vocab * emb_dim + (d.vocab if d.lm_head_bias else 0)
    return Counts([x for x in lins if x is not None], other, embedding, lm_head, la, le, ld)


# ----------------------------------------------------------------------------------------------------
# from counts to a ModelSpec


def inactive_params(linears: Iterable[LinearShape]) -> int:
    """Expert weights (and biases) a token does not pass through."""
    return sum(int(round(x.params // x.count_per_layer * (x.count_per_layer - x.active_per_token)))
               for x in linears if x.count_per_layer > x.active_per_token)


def counts_spec(counts: Counts, cfg: Mapping, name: str, source: str, mt: str, **fields) -> ModelSpec:
    """A ModelSpec from counted parts; `fields` are ModelSpec's shape fields (n_layers, hidden_size...)."""
    total = sum(x.params for x in counts.linears) + counts.other + counts.embedding + counts.lm_head
    extra = dict(fields.pop("extra", {}) or {})
    extra["params_other"] = counts.other
    published = cfg.get("_published_params")
    quant = quant_from_name(name)
    fields.setdefault("n_moe_layers", counts.n_moe_layers)
    return ModelSpec(
        name=name, model_type=mt, linears=tuple(counts.linears), params_total=total,
        params_active=total - inactive_params(counts.linears), params_embedding=counts.embedding,
        params_lm_head=counts.lm_head, tied_embeddings=counts.lm_head == 0,
        quant=quant if quant != "none" else quant_from_config(cfg),
        published_params=str(published) if published is not None else None, source=source, extra=extra,
        **fields)


def _ssm_of(d: Decoder, n_mamba: int) -> SSMShape | None:
    if not n_mamba:
        return None
    if d.linear:
        li = d.linear
        return SSMShape(li.kind, n_mamba, li.n_heads * li.v_dim, li.k_dim, li.conv_kernel, li.n_heads, li.v_dim,
                        chunk=li.chunk, conv_channels=li.conv_channels,
                        proj_width=sum(o for _, i, o in li.projections if i == d.h))
    if d.mamba2:
        mb = d.mamba2
        return SSMShape("mamba2", n_mamba, mb.d_inner, mb.d_state, mb.d_conv, mb.n_heads,
                        mb.d_inner // max(1, mb.n_heads), mb.n_groups, mb.chunk)
    if d.mamba1:
        m1 = d.mamba1
        return SSMShape("mamba1", n_mamba, m1.d_inner, m1.d_state, m1.d_conv, dt_rank=m1.dt_rank)
    return None


def decoder_spec(d: Decoder, cfg: Mapping, name: str, source: str) -> ModelSpec:
    """Count a `Decoder` and describe it as a ModelSpec (the common path of most readers)."""
    counts = build_decoder(d)
    extra = dict(d.extra)
    kinds = d.mlp_kinds or []
    inter = d.inter if ("dense" in kinds or d.moe is None) else 0
    moe = d.moe
    if moe is not None and moe.shared_width:
        extra["shared_expert_intermediate_size"] = moe.shared_width
    mixers = d.mixers or []
    n_mamba = sum(1 for m in mixers if "mamba" in m or m == "linear")
    if n_mamba or "none" in mixers:
        extra["layer_types"] = list(mixers)
    for k in ("sliding_window", "sliding_window_pattern", "rotary_pct", "partial_rotary_factor"):
        if cfg.get(k) is not None:
            extra[k] = cfg[k]
    mla = d.mla or {}
    fields: dict = dict(
        n_layers=d.n_layers, hidden_size=d.h, n_heads=d.nh, n_kv_heads=d.nkv, head_dim=d.hd,
        intermediate_size=inter, vocab_size=d.vocab, max_position_embeddings=d.max_pos, gated_mlp=d.gated,
        n_attention_layers=counts.n_attention_layers if mixers else -1,
        n_experts=moe.n_experts if moe else 0, experts_per_token=moe.top_k if moe else 0,
        moe_intermediate_size=moe.width if moe else 0, n_shared_experts=moe.n_shared if moe else 0,
        n_dense_mlp_layers=counts.n_dense_layers if (kinds and "none" in kinds) else -1,
        attention_window=d.window if d.local_layers else 0, n_local_attention_layers=d.local_layers,
        local_attention=d.local_kind if d.local_layers else "", ssm=_ssm_of(d, n_mamba), extra=extra)
    if mla:
        fields.update(qk_head_dim=mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"], v_head_dim=mla["v_head_dim"],
                      kv_latent_dim=mla["kv_lora_rank"] + mla["qk_rope_head_dim"],
                      q_latent_dim=mla.get("q_lora_rank") or 0)
    return counts_spec(counts, cfg, name, source, d.model_type, **fields)


def with_extra(spec: ModelSpec, **extra) -> ModelSpec:
    return replace(spec, extra={**spec.extra, **extra})
