"""Weight storage implied by a checkpoint name or a config's `quantization_config` block."""

from __future__ import annotations

import re
from collections.abc import Mapping

_QUANT_SUFFIXES: tuple[tuple[str, str], ...] = (
    # (case-insensitive suffix regex, quant); longest first, applied repeatedly
    (r"-gptq-int4$", "gptq-int4"), (r"-gptq-int8$", "int8"), (r"-awq-int4$", "awq-int4"), (r"-bnb-4bit$", "nf4"),
    (r"-bnb-8bit$", "int8"), (r"-gptq$", "gptq-int4"), (r"-awq$", "awq-int4"), (r"-int4$", "gptq-int4"),
    (r"-int8$", "int8"), (r"-4bit$", "nf4"), (r"-8bit$", "int8"),
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
