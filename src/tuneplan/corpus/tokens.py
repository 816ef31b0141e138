"""Tokens per example: exact with a local tokenizer (a `tokenizer.json`, or a tokenizer folder with its chat
template), or a stated approximation from characters. What is counted per sequence, and a preference pair's
two sequences: docs/data.md, "Tokens"."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tuneplan.corpus.read import Example
from tuneplan.errors import InputError, file_kind, shown

CHARS_PER_TOKEN = 4.0
"""Without a tokenizer: tokens = ceil(characters / 4), the common rule of thumb for English BPE
vocabularies, checked by `benchmarks/chars_per_token.py` against byte-level BPEs trained offline on
English prose (docs/data.md has the figures)."""
APPROX_ERROR = 0.25
"""The approximation's expected error per example, said with every approximate count: the median
absolute relative error per held-out paragraph of chars / 4 against the trained BPEs' counts, rounded
up (docs/data.md); a dataset's total is closer, code, numbers and other languages differ more."""


def _plain(messages: list[dict]) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def _as_messages(v: Any, role: str) -> list[dict]:
    if v is None:
        return []
    return v if isinstance(v, list) else [{"role": role, "content": v}]


class TokenCounter:
    """Counts the tokens of Examples. `exact`: a real tokenizer; `source`: what counts, for the assumptions."""

    exact = False
    template = False
    source = ""
    plain_chat = False  # message lists met and joined as "role: content" lines (no chat template)

    def describe(self) -> str:
        """`source`, and how message lists were rendered when they were met without a chat template."""
        return self.source + ("; no chat template: message lists joined as 'role: content' lines"
                              if self.plain_chat and not self.template else "")

    def _encode(self, texts: list[str], special: bool) -> list[int]:
        raise NotImplementedError

    def _render_chat(self, convs: list[list[dict]], generation_prompt: bool) -> list[str]:
        return [_plain(c) for c in convs]

    def count(self, batch: list[Example]):
        """(prompt tokens, sequence length, real tokens) per example, as int64 arrays: the length is the
        longest of the example's sequences (prompt + completion), the real tokens all of them together."""
        import numpy as np

        chat = [isinstance(ex.prompt, list) or any(isinstance(c, list) for c in ex.completions) for ex in batch]
        prompt, length, real = [0] * len(batch), [0] * len(batch), [0] * len(batch)  # lists: numpy item writes are slow
        for kind in (False, True):  # plain strings (special tokens added), then message lists
            idx = [i for i, c in enumerate(chat) if c == kind]
            if idx:
                self._fill(batch, idx, prompt, length, real, chat=kind)
        return tuple(np.array(x, dtype=np.int64) for x in (prompt, length, real))

    def _fill(self, batch, idx, prompt, length, real, *, chat: bool) -> None:
        p_texts, p_where, s_texts, s_where = [], [], [], []
        for i in idx:
            ex = batch[i]
            p = _as_messages(ex.prompt, "user") if chat else ex.prompt or ""
            if p:
                p_texts.append(p)
                p_where.append(i)
            for c in ex.completions or [[] if chat else ""]:  # none (an RL prompt): the prompt is the sequence
                s_texts.append(p + (_as_messages(c, "assistant") if chat else c))
                s_where.append(i)
        if chat:
            self.plain_chat = True
            p_texts = self._render_chat(p_texts, True) if p_texts else []
            s_texts = self._render_chat(s_texts, False)
        special = not (chat and self.template)  # a chat template writes its own special tokens
        for i, c in zip(p_where, self._encode(p_texts, special) if p_texts else [], strict=True):
            prompt[i] = c
        for i, c in zip(s_where, self._encode(s_texts, special), strict=True):
            length[i] = max(length[i], c)
            real[i] += c


class CharCounter(TokenCounter):
    """The approximation: ceil(characters / CHARS_PER_TOKEN) of each rendered sequence."""

    source = (f"approximated from characters (1 token per {CHARS_PER_TOKEN:g} characters, expected error "
              f"about +-{APPROX_ERROR:.0%} per example on English text, more on code or other languages; "
              "--tokenizer PATH for exact counts)")

    def _encode(self, texts: list[str], special: bool) -> list[int]:
        return [math.ceil(len(t) / CHARS_PER_TOKEN) for t in texts]


class FileTokenizer(TokenCounter):
    """A `tokenizer.json` read by the `tokenizers` library (no chat template)."""

    exact = True

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self.tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises its own Exception for a bad file
            raise InputError("tokenizer", f"{path}: not a readable tokenizer.json ({str(exc).splitlines()[0]})") from None
        self.source = f"exact, {path} (tokenizers)"

    def _encode(self, texts: list[str], special: bool) -> list[int]:
        # encode_batch_fast (tokenizers >= 0.20) leaves out the offsets: a third less time, the same ids
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [len(e.ids) for e in encode(texts, add_special_tokens=special)]


class HFTokenizer(TokenCounter):
    """A tokenizer folder read by transformers (local files only), with its chat template when it has one."""

    exact = True

    def __init__(self, path: Path) -> None:
        import logging

        from transformers import AutoTokenizer

        logging.getLogger("transformers").setLevel(logging.ERROR)
        try:
            self.tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # transformers raises OSError / ValueError / its own for unreadable folders
            raise InputError("tokenizer", f"{path}: not a readable tokenizer folder ({str(exc).splitlines()[0]})") from None
        self.template = bool(getattr(self.tok, "chat_template", None))
        self.source = (f"exact, {path} (transformers AutoTokenizer)"
                       + ("; its chat template applied to message lists" if self.template else ""))

    def _render_chat(self, convs: list[list[dict]], generation_prompt: bool) -> list[str]:
        if not self.template:
            return super()._render_chat(convs, generation_prompt)
        try:
            out = self.tok.apply_chat_template(convs, tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as exc:  # the template's own errors (jinja: roles it refuses, ...)
            raise InputError("tokenizer", f"the chat template refused a conversation ({str(exc).splitlines()[0]})") from None
        return list(out)

    def _encode(self, texts: list[str], special: bool) -> list[int]:
        return [len(ids) for ids in self.tok(texts, add_special_tokens=special)["input_ids"]]


def token_counter(path: str | None) -> TokenCounter:
    """The counter for `--tokenizer PATH` (a tokenizer.json, or a folder), or the approximation without one."""
    if not path:
        return CharCounter()
    p = Path(path)
    if not p.exists():
        raise InputError("tokenizer", f"{p}: no such file or folder (a tokenizer.json or a tokenizer folder)")
    if p.is_dir() and not (p / "tokenizer_config.json").exists() and not (p / "tokenizer.json").exists():
        raise InputError("tokenizer", f"{p}: a folder with no tokenizer.json or tokenizer_config.json")
    if not (p.is_dir() or p.is_file()):  # a FIFO or a device would block the library's read
        raise InputError("tokenizer", f"{shown(p)}: not a regular file ({file_kind(p.stat().st_mode)})")
    counter = (HFTokenizer(p) if (p / "tokenizer_config.json").exists() else FileTokenizer(p / "tokenizer.json")) \
        if p.is_dir() else FileTokenizer(p)
    if not counter._encode(["hello world"], False)[0]:  # no vocabulary: every example counted 0 tokens, "exact"
        raise InputError("tokenizer", f"{p}: encodes text to no tokens (no vocabulary: a tokenizer_config.json "
                                      "without its tokenizer.json or tokenizer.model, or an empty one)")
    return counter
