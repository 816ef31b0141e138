"""The character approximation computed on whole Arrow batches (pyarrow.compute and numpy), without
turning rows into Python objects: what makes a multi-GB file quick to read when no tokenizer is given.

It gives exactly the counts of `CharCounter` on the same rows (tests/test_corpus.py checks it), for the
common shapes with clean columns: `text`, `prompt-completion` of strings, and `chat` as a `messages`
list of {role, content} strings. Anything else (another shape, a null, a non-text value, a chat with
no assistant turn) returns None, and the batch goes the row-by-row way, which names the bad row."""

from __future__ import annotations

from typing import Any


def _column(batch: Any, name: str) -> Any:
    """The batch's column `name` as one array, or None."""
    import pyarrow as pa

    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _utf8_lengths(array: Any):
    import numpy as np
    import pyarrow.compute as pc

    return np.asarray(pc.utf8_length(array).to_numpy(zero_copy_only=False), dtype=np.int64)


def _string_lengths(batch: Any, name: str):
    """Characters per row of a string column with no nulls, or None."""
    import pyarrow as pa

    col = _column(batch, name)
    if col is None or not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) or col.null_count:
        return None
    return _utf8_lengths(col)


def _chat_chars(batch: Any):
    """(prompt characters, completion characters) per row of a clean `messages` column, rendered as
    CharCounter renders message lists ("role: content\\n" per turn; the last assistant turn is the
    completion, the turns before it the prompt, those after it dropped), or None."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    col = _column(batch, "messages")
    if col is None:
        return None
    t = col.type
    if not pa.types.is_list(t) or col.null_count or not pa.types.is_struct(t.value_type):
        return None
    fields = {t.value_type.field(i).name: t.value_type.field(i).type for i in range(t.value_type.num_fields)}
    if not all(pa.types.is_string(fields.get(k, pa.null())) for k in ("role", "content")):
        return None
    n = len(col)
    counts = np.asarray(pc.list_value_length(col).to_numpy(zero_copy_only=False), dtype=np.int64)
    if n == 0 or (counts == 0).any():
        return None
    flat = pc.list_flatten(col)
    role, content = flat.field("role"), flat.field("content")
    if flat.null_count or role.null_count or content.null_count:
        return None
    chars = _utf8_lengths(role) + _utf8_lengths(content) + 3
    parent = np.repeat(np.arange(n), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(len(parent)) - starts[parent]
    assistant = np.asarray(pc.equal(role, "assistant").to_numpy(zero_copy_only=False), dtype=bool)
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, parent, np.where(assistant, pos, -1))
    if (last < 0).any():
        return None
    mine = last[parent]
    prompt = np.bincount(parent, weights=np.where(pos < mine, chars, 0), minlength=n).astype(np.int64)
    completion = np.bincount(parent, weights=np.where(pos == mine, chars, 0), minlength=n).astype(np.int64)
    return prompt, completion


def char_counts(batch: Any, shape: str, chars_per_token: float):
    """(prompt tokens, sequence length, real tokens) of a pyarrow batch by the character approximation,
    or None where the batch needs the row-by-row reading."""
    import numpy as np

    chars = None
    if shape == "text":
        text = _string_lengths(batch, "text")
        chars = None if text is None else (np.zeros_like(text), text)
    elif shape == "prompt-completion":
        p, c = _string_lengths(batch, "prompt"), _string_lengths(batch, "completion")
        chars = None if p is None or c is None else (p, c)
    elif shape == "chat":
        chars = _chat_chars(batch)
    if chars is None:
        return None
    prompt = np.ceil(chars[0] / chars_per_token).astype(np.int64)
    length = np.ceil((chars[0] + chars[1]) / chars_per_token).astype(np.int64)
    return prompt, length, length.copy()
