"""Weight storage implied by a checkpoint name or a config's `quantization_config` block."""

from __future__ import annotations

import re
from collections.abc import Mapping

_QUANT_OF = {"gptq-int4": "gptq-int4", "gptq-int8": "gptq-int8", "awq-int4": "awq-int4", "bnb-4bit": "nf4",
             "bnb-8bit": "int8", "gptq": "gptq-int4", "awq": "awq-int4", "int4": "gptq-int4", "int8": "gptq-int8",
             "4bit": "nf4", "8bit": "int8"}
"""Checkpoint-name quantisation suffixes (case-insensitive) -> weight storage; a suffix before any it ends with."""
_QUANT_SUFFIX = re.compile(r"(?<=.)-(" + "|".join(_QUANT_OF) + ")$", re.IGNORECASE)  # never the whole name


def split_quant_suffix(name: str) -> tuple[str, str]:
    """`("Qwen/Qwen-7B-Chat", "gptq-int4")` for `"Qwen/Qwen-7B-Chat-Int4"`; quant "none" if no suffix.

    Suffixes (case-insensitive): -Int4 / -GPTQ / -GPTQ-Int4 -> gptq-int4, -Int8 / -GPTQ-Int8 -> gptq-int8
    (Qwen's -Int8 checkpoints are GPTQ), -bnb-8bit / -8bit -> int8, -AWQ -> awq-int4, -bnb-4bit / -4bit -> nf4. The first (outermost) suffix decides the quant.
    """
    quant, base = "none", name.strip()
    while m := _QUANT_SUFFIX.search(base):  # stacked suffixes are all stripped
        base = base[: m.start()]
        quant = _QUANT_OF[m.group(1).lower()] if quant == "none" else quant
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
            return "gptq-int8" if method == "gptq" else "int8"
        return f"{method}-int4" if bits in (4, None) else "none"
    return "none"


def quant_from_name(name: str) -> str:
    """Base weight storage implied by a checkpoint name (see `split_quant_suffix`)."""
    return split_quant_suffix(name)[1]
