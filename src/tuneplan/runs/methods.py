"""Rows whose `method` is `other`: the PEFT method their notes name, or a generic adapter.

A row of method `other` whose notes name one of peft's methods (tuneplan's catalogue, specs/peft.py)
takes that method, with the settings the notes state (virtual tokens, the trainable-parameter count);
one whose notes name none becomes the generic `adapter` with the caveat `generic-adapter`, and its
trainable-parameter count when the notes give one. Every change is recorded in `defaults_used`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from tuneplan.specs.peft import CATALOGUE

NOTE_METHODS: tuple[tuple[str, str], ...] = (
    (r"\bp-?tuning[ -]?v2\b", "prefix-tuning"),  # P-Tuning v2 = deep prompt tuning: a prefix in every layer
    (r"\bprefix[- _]?tuning\b", "prefix-tuning"),
    (r"\bp-?tuning\b|\bprompt[- _]?encoder\b", "p-tuning"),
    (r"\bprompt[- _]?tuning\b", "prompt-tuning"),
    (r"\badalora\b", "adalora"),
    (r"\bia3\b|\(ia\)\^?3", "ia3"),
    (r"\bloha\b", "loha"),
    (r"\blokr\b", "lokr"),
    (r"\bboft\b", "boft"),
    (r"\boft\b", "oft"),
    (r"\bvera\b", "vera"),
    (r"\bfourier[- _]?ft\b", "fourierft"),
    (r"\bhra\b", "hra"),
    (r"\bbone\b|\bmiss\b", "bone"),
    (r"\bln[- _]?tuning\b|\blayer[- _]?norm[- _]tuning\b", "ln-tuning"),
    (r"(?<!use_)\bdora\b(?!\s*=)", "dora"),
    (r"(?<!use_)\brs-?lora\b(?!\s*=)", "rslora"),
    (r"\bpissa\b", "pissa"),
    (r"\bolora\b", "olora"),
    (r"\bloftq\b", "loftq"),
    (r"\blora[- _]?fa\b", "lora-fa"),
)
"""How notes name a method (case-insensitive, first match wins). Plain 'LoRA' is not searched: a
LoRA row says so in its method column, and notes such as litgpt's 'LLaMA-Adapter v1 (not LoRA)' must
not read as one; ms-swift's `tuner <name>` is read first (`TUNER`)."""

TUNER = re.compile(r"\btuner[ :=]+([a-z0-9_-]+)", re.IGNORECASE)
"""ms-swift's tuner benchmark notes: 'tuner adalora', 'tuner lora' (a LoRA-family name is taken as
written; 'full', swift's own 'adapter' and names outside the catalogue fall through to the search)."""

VIRTUAL_TOKENS = re.compile(r"\b(?:pre_seq_len|num_virtual_tokens|virtual tokens?)[ :=]+(\d+)", re.IGNORECASE)
"""ChatGLM's P-Tuning v2 'pre_seq_len 128'; peft's num_virtual_tokens."""

TRAINABLE = re.compile(r"trainable param(?:eter)?s?\s*(\(M\))?\s*[:=]?\s*(\d[\d,]*(?:\.\d+)?)", re.IGNORECASE)
"""'trainable parameters 573,888' (litgpt), 'trainable params(M) 33.6896' (ms-swift, millions)."""

LORA_NAMES = ("lora", "qlora", "dora", "gptq-lora", "alora")


@lru_cache(maxsize=4096)
def named_method(notes: str) -> str | None:
    """The PEFT method a row's notes name, or None (each distinct notes text searched once)."""
    if m := TUNER.search(notes):
        name = m.group(1).lower().replace("_", "-")
        if (name in CATALOGUE and name != "adapter") or name in LORA_NAMES:
            return name
    for pattern, method in NOTE_METHODS:
        if re.search(pattern, notes, re.IGNORECASE):
            return method
    return None


def trainable_from_notes(notes: str) -> float | None:
    if not (m := TRAINABLE.search(notes)):
        return None
    value = float(m.group(2).replace(",", ""))
    return value * 1e6 if m.group(1) else value


def method_from_notes(st: Any) -> None:
    """Replace a row's method `other` by the method its notes name (or `adapter`), recording why."""
    if str(st.v.get("method") or "").strip().lower() != "other":
        return
    notes = str(st.v.get("notes") or "")
    method = named_method(notes)
    if method is None:
        method = "adapter"
        if "generic-adapter" not in st.caveats:
            st.caveats.append("generic-adapter")
        st.defaults_used.append("method=adapter(method other; the notes name no method tuneplan models: a "
                                "generic adapter)")
    else:
        st.defaults_used.append(f"method={method}(method other; named in the notes)")
    st.v["method"] = method
    tokens = VIRTUAL_TOKENS.search(notes)
    if tokens and method in ("prefix-tuning", "prompt-tuning", "p-tuning") and st.empty("peft_options"):
        st.fill("peft_options", f"num_virtual_tokens={tokens.group(1)}", "from the notes")
    trainable = trainable_from_notes(notes)
    if trainable and method == "adapter" and st.empty("trainable_params"):
        st.fill("trainable_params", f"{trainable:.0f}", "from the notes")
