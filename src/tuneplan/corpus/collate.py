"""What the collator does with a length distribution (numpy): truncation, padding (to the maximum, to the
longest in each batch, group-by-length), packing (best-fit decreasing or wrapped), and the micro-batches that
result. The samplers as the trainers run them, and the attention share of packing with cross-document
masking: docs/data.md, "What the collator does"."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tuneplan.errors import InputError

MODES = ("max", "longest", "group-by-length")
PACKINGS = ("bfd", "wrapped")
MEGABATCH = 50
"""HF's LengthGroupedSampler: megabatches of 50 micro-batches, each sorted by length."""
SEED = 0
"""The random order the `longest` sampler's batches are drawn from (a fixed seed: the same data gives the
same figures)."""


@dataclass
class Collation:
    """One epoch's micro-batches (over all data-parallel ranks together)."""

    mode: str
    seq_len: int | None
    micro_batch: int
    examples: int
    examples_cut: int
    tokens_cut: int
    real_tokens: int
    samples: int
    micro_batches: int
    padded_tokens: int
    batch_len_p50: float
    batch_len_p99: float
    batch_len_max: int
    attention_fraction: float | None
    batch_lengths: Any  # int64 array, one padded length per micro-batch, in the sampler's order

    @property
    def padding_waste(self) -> float:
        """The share of the computed tokens that are padding."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    def to_dict(self) -> dict:
        """The figures (not the batch lengths), padding_waste after padded_tokens."""
        out: dict[str, Any] = {}
        for f in fields(self)[:-1]:
            out[f.name] = getattr(self, f.name)
            if f.name == "padded_tokens":
                out["padding_waste"] = self.padding_waste
        return out


def truncate(lengths, seq_len: int | None):
    """(lengths cut to seq_len, examples cut, tokens cut)."""
    import numpy as np

    lengths = np.asarray(lengths, dtype=np.int64)
    if seq_len is None:
        return lengths, 0, 0
    over = lengths > seq_len
    return np.minimum(lengths, seq_len), int(over.sum()), int((lengths[over] - seq_len).sum())


def _batch_max(ordered, micro_batch: int):
    """The longest length of each consecutive micro-batch (the last one may be short) and its size."""
    import numpy as np

    n = len(ordered)
    full = n // micro_batch
    maxes = ordered[: full * micro_batch].reshape(full, micro_batch).max(axis=1) if full else np.zeros(0, np.int64)
    sizes = np.full(full, micro_batch, dtype=np.int64)
    if n % micro_batch:
        maxes = np.append(maxes, ordered[full * micro_batch:].max())
        sizes = np.append(sizes, n % micro_batch)
    return maxes.astype(np.int64), sizes


def longest_batches(lengths, micro_batch: int, seed: int = SEED):
    """Micro-batch lengths of the random sampler, each padded to its longest: (lengths, sizes)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(lengths))
    return _batch_max(np.asarray(lengths, dtype=np.int64)[order], micro_batch)


def grouped_batches(lengths, micro_batch: int, seed: int = SEED):
    """HF's LengthGroupedSampler: random megabatches of MEGABATCH micro-batches, each sorted longest
    first; the micro-batch with the longest example moved to the front."""
    import numpy as np

    lengths = np.asarray(lengths, dtype=np.int64)
    order = lengths[np.random.default_rng(seed).permutation(len(lengths))]
    mega = MEGABATCH * micro_batch
    parts = [-np.sort(-order[i:i + mega]) for i in range(0, len(order), mega)]
    maxes, sizes = _batch_max(np.concatenate(parts) if parts else order, micro_batch)
    if len(maxes):
        top = int(np.argmax(maxes))
        maxes[[0, top]] = maxes[[top, 0]]
        sizes[[0, top]] = sizes[[top, 0]]
    return maxes, sizes


def pack_bfd(lengths, seq_len: int) -> int:
    """Sequences of best-fit decreasing packing: each example (at most seq_len long) goes into the open
    sequence with the least room that holds it, longest examples first. Counted by room: `room[c]` open
    sequences with c tokens free; examples of one length are placed together."""
    import numpy as np

    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0:
        return 0
    if lengths.max() > seq_len:
        raise ValueError("pack_bfd: truncate the lengths to seq_len first")
    room = np.zeros(seq_len + 1, dtype=np.int64)
    values, counts = np.unique(lengths[lengths > 0], return_counts=True)
    opened = 0
    for length, k in zip(values[::-1].tolist(), counts[::-1].tolist(), strict=True):
        while k:
            fits = np.flatnonzero(room[length:])
            if fits.size:  # the tightest open sequence that holds it
                c = length + int(fits[0])
                put = min(k, int(room[c]))
                room[c] -= put
                room[c - length] += put
                k -= put
            else:  # new sequences, each filled with this length until it holds no more
                per = seq_len // length
                full, rest = divmod(k, per)
                room[seq_len - per * length] += full
                opened += full
                if rest:
                    room[seq_len - rest * length] += 1
                    opened += 1
                k = 0
    return opened


def collate(lengths, *, micro_batch: int, seq_len: int | None = None, padding: str = "longest",
            packing: bool = False, packing_strategy: str = "bfd", seed: int = SEED) -> Collation:
    """The micro-batches of one epoch over `lengths` (tokens per example after the template). `seq_len`:
    the truncation length (the padding length with `max`, the packed length with packing); without it,
    `max` and packing take the longest example."""
    import numpy as np

    if padding not in MODES:
        raise InputError("padding", f"unknown value '{padding}'", MODES)
    if packing_strategy not in PACKINGS:
        raise InputError("packing-strategy", f"unknown value '{packing_strategy}'", PACKINGS)
    raw = np.asarray(lengths, dtype=np.int64)
    if raw.size == 0:
        raise InputError("data", "no examples")
    if micro_batch < 1:
        raise InputError("micro-batch", "must be a positive integer")
    wrapped = packing and packing_strategy == "wrapped"
    cut_len, n_cut, t_cut = truncate(raw, None if wrapped else seq_len)
    real = int(raw.sum()) if wrapped else int(cut_len.sum())
    longest = int(cut_len.max())
    samples, attention = len(raw), None
    if packing or padding == "max":  # every micro-batch one length
        s = int(seq_len or longest)
        if packing:
            samples = -(-real // s) if wrapped else pack_bfd(cut_len, s)
            attention = None if wrapped else float((cut_len.astype(np.float64) ** 2).sum() / (samples * float(s) ** 2))
        mb = np.full(-(-samples // micro_batch), s, dtype=np.int64)
        padded, mode = samples * s, f"packed ({packing_strategy})" if packing else "padded to max"
    else:
        mb, sizes = (longest_batches if padding == "longest" else grouped_batches)(cut_len, micro_batch, seed)
        padded, s = int((mb * sizes).sum()), seq_len
        mode = ("padded to the longest in each batch" if padding == "longest"
                else "group-by-length, padded to the longest in each batch")
    return Collation(mode=mode, seq_len=None if s is None else int(s), micro_batch=micro_batch, examples=len(raw),
                     examples_cut=n_cut, tokens_cut=t_cut, real_tokens=real, samples=int(samples),
                     micro_batches=len(mb), padded_tokens=int(padded),
                     batch_len_p50=float(np.percentile(mb, 50)), batch_len_p99=float(np.percentile(mb, 99)),
                     batch_len_max=int(mb.max()), attention_fraction=attention, batch_lengths=mb)


def length_bins(batch_lengths, quantiles=(0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)) -> list[tuple[int, float]]:
    """(representative length, share of micro-batches) of the batch lengths cut at `quantiles`: the
    lengths a step time is evaluated at to weigh the real distribution (each bin's mean, rounded up)."""
    import numpy as np

    b = np.sort(np.asarray(batch_lengths, dtype=np.int64))
    n = len(b)
    cuts = sorted({int(round(q * n)) for q in quantiles} | {0, n})
    out: dict[int, float] = {}
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        if hi > lo:
            length = int(np.ceil(b[lo:hi].mean()))
            out[length] = out.get(length, 0.0) + (hi - lo) / n
    return sorted(out.items())
