"""Compatibility names: the config readers moved to `tuneplan.specs.architectures` (one module per
architecture family, a registry from model_type to reader). Import from there in new code."""

from __future__ import annotations

from tuneplan.specs.architectures import (
    READERS,
    SUPPORTED_MODEL_TYPES,
    detect_model_type,
    looks_llama_like,
    model_from_config,
    quant_from_config,
    quant_from_name,
    split_quant_suffix,
)

__all__ = ["READERS", "SUPPORTED_MODEL_TYPES", "detect_model_type", "looks_llama_like", "model_from_config",
           "quant_from_config", "quant_from_name", "split_quant_suffix"]
