"""Compute a `ModelSpec` from a Hugging Face style config.json (no parameter count is typed in).

`READERS` maps each `model_type` to a reader (one module per family: llama, gpt, t5, ssm, moe,
vision); `model_from_config` picks it (by `model_type`, else by the architecture's class name, else by
key names) and returns one ModelSpec shape whatever the architecture.

Config conventions follow transformers' config classes (defaults included), plus the original key
names of checkpoints that ship custom code (Qwen-1, ChatGLM, Baichuan, RW/Falcon, MPT, BlackMamba) or
NeMo/Megatron names (Nemotron). Keys that start with an underscore are catalog metadata; the only ones
read are `_published_params` (kept as a string) and `_inferred_not_stated` (values the catalog
curator inferred for keys the source did not state: used only when the key itself is absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tuneplan.errors import InputError
from tuneplan.specs.architectures import gpt, linear, llama, moe, ssm, t5, vision  # noqa: F401 - readers
from tuneplan.specs.architectures.base import (
    HEADS,
    HIDDEN,
    INTER,
    LAYERS,
    READERS,
    VOCAB,
    has,
    inferred_values,
    with_extra,
)
from tuneplan.specs.architectures.quant import quant_from_config, quant_from_name, split_quant_suffix
from tuneplan.specs.limits import check_config_sizes
from tuneplan.specs.model import ModelSpec

__all__ = ["READERS", "SUPPORTED_MODEL_TYPES", "detect_model_type", "looks_llama_like", "model_from_config",
           "quant_from_config", "quant_from_name", "split_quant_suffix"]

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(READERS))

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
    "glm4moeforcausallm": "glm4_moe", "nemotronhforcausallm": "nemotron_h", "gptossforcausallm": "gpt_oss",
    "jambaforcausallm": "jamba", "falconh1forcausallm": "falcon_h1", "starcoder2forcausallm": "starcoder2",
    "llavaforconditionalgeneration": "llava", "llavanextforconditionalgeneration": "llava_next",
    "qwen2_5_vlforconditionalgeneration": "qwen2_5_vl", "qwen2vlforconditionalgeneration": "qwen2_vl",
    "internvlchatmodel": "internvl_chat",
}


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
    if has(config, "ffn_hidden_size") and has(config, "num_layers") and (
            "activation_func" in config or "num_query_groups" in config):
        return "nemotron"  # NeMo / Megatron GPT key names
    if "multi_query" in config and not archs:
        return "gpt_bigcode"  # GPTBigCodeConfig key (Falcon configs name their architecture)
    if has(config, "d_model") and has(config, "d_ff"):
        return "t5"
    if has(config, "state_size") and not has(config, *HEADS):
        return "mamba"
    return ""


def fill_inferred(config: Mapping) -> dict:
    """The config with curator-inferred values filled in; a text_config-only file read as its text part."""
    cfg = dict(config)
    cfg.update({k: v for k, v in inferred_values(config).items() if cfg.get(k) is None})
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and not has(cfg, *HIDDEN) and "vision_config" not in cfg:
        merged = {**{k: cfg[k] for k in ("tie_word_embeddings", "_published_params") if k in cfg}, **text}
        merged.setdefault("model_type", text.get("model_type") or cfg.get("model_type"))
        cfg = merged
    return cfg


GENERIC_NEEDS = (HIDDEN, LAYERS, HEADS, INTER, VOCAB)


def model_from_config(config: dict, name: str, source: str = "") -> ModelSpec:
    """Build a ModelSpec from a config.json dict; every count is computed from the shapes.

    Raises InputError naming the offending field for configs that cannot describe a model.
    """
    if not isinstance(config, Mapping):
        raise InputError("config", f"must be a JSON object, got {type(config).__name__}")
    check_config_sizes(config)
    cfg = fill_inferred(config)
    mt = detect_model_type(cfg)
    if isinstance(cfg.get("vision_config"), Mapping):
        return vision.read_vlm(cfg, mt, name, source)
    reader = READERS.get(mt)
    if reader is not None:
        return reader(cfg, mt, name, source)
    if mt and mt in UNSUPPORTED:
        raise InputError("model_type", f"'{mt}' is not modelled: {UNSUPPORTED[mt]}", SUPPORTED_MODEL_TYPES)
    if all(has(cfg, *keys) for keys in GENERIC_NEEDS):
        spec = replace(READERS["llama"](cfg, "llama", name, source), model_type=mt or "llama")
        return with_extra(spec, generic_reading=f"model_type '{mt or '(none)'}' read as a llama-like decoder")
    what = f"unsupported model_type '{mt}'" if mt else "no model_type and no recognisable architecture"
    raise InputError("model_type", f"{what} (a llama-like config needs hidden_size, num_hidden_layers, "
                     "num_attention_heads, intermediate_size, vocab_size)", SUPPORTED_MODEL_TYPES)


UNSUPPORTED: dict[str, str] = {
    "gemma3n": "per-layer embeddings, AltUp and LAuReL blocks and KV-cache sharing; no reader describes them yet",
    "mllama": "cross-attention image layers (Llama 3.2 Vision); no reader describes them yet",
}
"""Model types whose configs are recognised but whose architecture no reader describes (yet): the
reason, so they are refused instead of being read as a llama-like decoder."""


def looks_llama_like(config: Mapping) -> bool:
    """True when a config without model_type is read as a plain llama decoder (catalog helper)."""
    mt = detect_model_type(fill_inferred(config))
    if mt in ("llama", "mistral", "yi"):
        return True
    return mt == "" and all(has(config, *k) for k in GENERIC_NEEDS)
