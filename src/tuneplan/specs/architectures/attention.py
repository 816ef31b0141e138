"""Attention layouts read from configs: which layers attend locally (sliding window / chunks), MLA ranks."""

from __future__ import annotations

from collections.abc import Mapping

from tuneplan.errors import InputError
from tuneplan.specs.architectures.base import Decoder, get_bool, int_key, is_num

LOCAL_LAYER_TYPES = ("sliding_attention", "chunked_attention", "local_attention", "sliding", "local")
GLOBAL_LAYER_TYPES = ("full_attention", "attention", "global_attention", "global", "full")

ALL_LAYER_SLIDING = ("mistral", "mixtral", "starcoder2", "phi3", "mistral3")
"""Model types whose `sliding_window` (when set) applies to every layer (transformers' attention
classes pass it to every layer); qwen2-style models use it only with `use_sliding_window`."""


def _window(cfg: Mapping, key: str = "sliding_window") -> int:
    v = cfg.get(key)
    if v is None or v is False:
        return 0
    if not is_num(v) or v <= 0:
        raise InputError(key, f"must be a positive integer or null, got {v!r}")
    return int(v)


def _from_layer_types(cfg: Mapping, n: int) -> int | None:
    """Local layers counted from a `layer_types` list (None when the config has none)."""
    lt = cfg.get("layer_types")
    if lt is None:
        return None
    if not isinstance(lt, list) or len(lt) != n:
        raise InputError("layer_types", f"must list one entry per layer ({n})")
    types = [str(t).lower() for t in lt]
    bad = [t for t in types if t not in LOCAL_LAYER_TYPES + GLOBAL_LAYER_TYPES]
    if bad:
        raise InputError("layer_types", f"unknown layer type '{bad[0]}'", list(LOCAL_LAYER_TYPES + GLOBAL_LAYER_TYPES))
    return sum(t in LOCAL_LAYER_TYPES for t in types)


def local_attention_layout(cfg: Mapping, mt: str, n: int) -> tuple[int, int, str]:
    """(window in tokens, number of local layers, "sliding" / "chunked") for a stack of `n` attention
    layers; (0, 0, "") when every layer attends to the whole preceding context.

    Gemma 2: every other layer slides (even layers); Gemma 3: `sliding_window_pattern` - 1 of every
    pattern layers slide (default 6: 5 local, 1 global); Llama 4: chunked attention in the RoPE layers
    (3 of every 4, the 4th is a NoPE global layer); gpt-oss and newer configs: `layer_types`.
    """
    if mt == "llama4":
        chunk = _window(cfg, "attention_chunk_size")
        if not chunk:
            return 0, 0, ""
        nope = cfg.get("no_rope_layers")  # 1 = the layer uses RoPE = chunked
        local = sum(1 for x in nope if x) if isinstance(nope, list) and len(nope) == n else n - n // 4
        return chunk, local, "chunked"
    window = _window(cfg)
    if not window:
        return 0, 0, ""
    local = _from_layer_types(cfg, n)
    if local is None:
        if mt == "gemma2":
            local = (n + 1) // 2
        elif mt.startswith("gemma3"):
            pattern = int_key(cfg, "sliding_window_pattern", 6)
            local = n - n // pattern
        elif mt in ALL_LAYER_SLIDING:
            local = n
        elif mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_5_vl", "qwen2_vl"):
            if not get_bool(cfg, "use_sliding_window", False):
                return 0, 0, ""
            first_full = int_key(cfg, "max_window_layers", n, minimum=0)
            local = max(0, n - min(first_full, n))  # layers from max_window_layers on slide
        else:
            return 0, 0, ""
    return window, local, "sliding"


def apply_local_attention(d: Decoder, cfg: Mapping) -> None:
    mixers = d.mixers or ["attention"] * d.n_layers
    n_attn = sum(1 for m in mixers if "attention" in m)
    d.window, d.local_layers, d.local_kind = local_attention_layout(cfg, d.model_type, n_attn)


def mla_of(cfg: Mapping) -> dict:
    """DeepSeek-V2/V3 (and Kimi-K2, MiniCPM3) multi-head latent attention ranks and head widths."""
    nope = int_key(cfg, "qk_nope_head_dim")
    return {
        "q_lora_rank": int_key(cfg, "q_lora_rank", 0, minimum=0),
        "kv_lora_rank": int_key(cfg, "kv_lora_rank"),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": int_key(cfg, "qk_rope_head_dim"),
        "v_head_dim": int_key(cfg, "v_head_dim", nope),
    }
