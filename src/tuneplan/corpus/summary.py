"""A dataset read once into its token counts per example (`summarise`), with the counts, the length
histogram, and what the collator does with it, as text (a terminal chart) or a dict."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from tuneplan.corpus.collate import Collation
from tuneplan.corpus.read import ReadState, examples, file_kind, total_units
from tuneplan.corpus.tokens import TokenCounter, token_counter

PROGRESS_MIN_BYTES = 32 << 20
"""A progress bar (stderr, only on a terminal) for reads of more than 32 MiB."""


@dataclass
class DataSummary:
    """Token counts per example of one dataset file. Arrays (int64, one entry per example): `prompt`
    tokens (not trained on with a completion-only loss), `length` (the longest sequence of the example,
    prompt + completion), `real` (all its sequences' tokens)."""

    path: str
    kind: str
    shape: str
    tokens_source: str
    exact: bool
    prompt: Any
    length: Any
    real: Any
    rows: int
    bad_rows: int
    bad_examples: list = field(default_factory=list)
    split: str | None = None

    @property
    def examples(self) -> int:
        return len(self.length)

    def stats(self) -> dict:
        import numpy as np

        L = self.length
        q = np.percentile(L, [50, 90, 99]) if len(L) else [0, 0, 0]
        return {"examples": self.examples, "rows": self.rows, "bad_rows": self.bad_rows,
                "tokens": int(self.real.sum()), "prompt_tokens": int(self.prompt.sum()),
                "completion_tokens": int((self.length - self.prompt).clip(min=0).sum()),
                "mean_length": float(L.mean()), "median_length": float(q[0]), "p90_length": float(q[1]),
                "p99_length": float(q[2]), "min_length": int(L.min()), "max_length": int(L.max())}

    def assumption(self) -> str:
        """The line the estimate's assumptions carry about where the counts come from."""
        bad = f"; {self.bad_rows} bad row(s) left out (--skip-bad-rows)" if self.bad_rows else ""
        split = f", split '{self.split}'" if self.split else ""
        return (f"Examples and tokens from {self.path} ({self.kind}{split}, {self.shape} rows, {self.examples:,} "
                f"examples{bad}); tokens {self.tokens_source}.")

    def histogram(self, bins: int = 12) -> list[tuple[int, int, int]]:
        """(low, high, examples) of equal-width length bins (whole tokens: at most `bins` bins)."""
        import numpy as np

        L = self.length
        lo, hi = int(L.min()), int(L.max())
        width = max(1, -(-(hi - lo + 1) // bins))
        counts = np.bincount((L - lo) // width, minlength=-(-(hi - lo + 1) // width))
        return [(lo + i * width, lo + (i + 1) * width - 1, int(c)) for i, c in enumerate(counts)]

    def to_dict(self) -> dict:
        return {"path": self.path, "file_kind": self.kind, "shape": self.shape, "split": self.split,
                "tokens_source": self.tokens_source, "exact_tokens": self.exact, **self.stats(),
                "bad_row_examples": self.bad_examples,
                "histogram": [{"low": a, "high": b, "examples": c} for a, b, c in self.histogram()]}


def _progress(total: int):
    """A rich progress bar on stderr, shown when stderr is a terminal and the read is long."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    return Progress("reading", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                    transient=True, disable=total < PROGRESS_MIN_BYTES or not sys.stderr.isatty())


def summarise(path: str | os.PathLike, *, shape: str | None = None, tokenizer: str | None = None,
              skip_bad_rows: bool = False, counter: TokenCounter | None = None) -> DataSummary:
    """Read the file once, streamed, and count each example's tokens."""
    from pathlib import Path

    import numpy as np

    p = Path(path)
    counter = counter or token_counter(tokenizer)
    state = ReadState(str(p), file_kind(p) if p.exists() else "")
    counts = []  # (prompt, length, real) arrays of each batch
    gen = examples(p, shape, skip_bad_rows=skip_bad_rows, state=state)
    units = total_units(p, state.kind) if p.exists() else 0
    with _progress(units) as bar:
        task = bar.add_task("read", total=units)
        for batch, read in gen:
            if batch:
                counts.append(counter.count(batch))
            bar.update(task, completed=read)
    prompt, length, real = (np.concatenate(xs) for xs in zip(*counts, strict=True)) if counts \
        else np.zeros((3, 0), np.int64)
    return DataSummary(path=str(p), kind=state.kind, shape=state.shape, tokens_source=counter.describe(),
                       exact=counter.exact, prompt=prompt, length=length, real=real,
                       rows=state.rows, bad_rows=state.bad_rows, bad_examples=list(state.bad_examples),
                       split=state.split)


def render_histogram(s: DataSummary, width: int = 40, bins: int = 12) -> list[str]:
    """The length histogram as a terminal bar chart."""
    h = s.histogram(bins)
    top = max(c for _, _, c in h) or 1
    label = [f"{a:,}-{b:,}" for a, b, _ in h]
    w = max(len(x) for x in label)
    return [f"  {lab:>{w}} tokens │{'█' * max(1 if c else 0, round(width * c / top)):<{width}} {c:,}"
            for lab, (_, _, c) in zip(label, h, strict=True)]


def render_collation(c: Collation) -> list[str]:
    """What the collator does, one line per figure."""
    seq = f" at {c.seq_len:,} tokens" if c.seq_len else ""
    lines = [f"collator: {c.mode}{seq}, micro-batch {c.micro_batch}"]
    if c.examples_cut:
        lines.append(f"  truncated: {c.examples_cut:,} example(s) longer than {c.seq_len:,} tokens "
                     f"({c.tokens_cut:,} tokens cut)")
    lines.append(f"  {c.samples:,} samples in {c.micro_batches:,} micro-batches; real tokens {c.real_tokens:,}, "
                 f"computed (padded) {c.padded_tokens:,}: padding waste {c.padding_waste:.1%}")
    lines.append(f"  micro-batch length: median {c.batch_len_p50:,.0f}, p99 {c.batch_len_p99:,.0f}, "
                 f"longest {c.batch_len_max:,} tokens")
    if c.attention_fraction is not None:
        lines.append(f"  with cross-document masking, attention computes {c.attention_fraction:.1%} of a full "
                     "causal mask's work (without it, examples attend across their neighbours)")
    return lines


def render_summary(s: DataSummary) -> list[str]:
    st = s.stats()
    parts = f"prompt {st['prompt_tokens']:,}, completion {st['completion_tokens']:,}"
    if st["tokens"] != st["prompt_tokens"] + st["completion_tokens"]:  # a preference pair's two sequences
        parts = "all sequences; the longest of each example: " + parts
    lines = [f"{s.path}: {st['examples']:,} examples ({s.kind}, {s.shape} rows"
             + (f", split '{s.split}'" if s.split else "") + ")",
             f"tokens: {s.tokens_source}",
             f"  total {st['tokens']:,} ({parts})",
             f"  length per example: mean {st['mean_length']:,.1f}, median {st['median_length']:,.0f}, "
             f"p90 {st['p90_length']:,.0f}, p99 {st['p99_length']:,.0f}, max {st['max_length']:,}"]
    if s.bad_rows:
        lines.append(f"  {s.bad_rows:,} bad row(s) left out (--skip-bad-rows): " + "; ".join(s.bad_examples))
    return lines
