"""`tuneplan data PATH`: the dataset's token counts, its length histogram, and what the collator does."""

from __future__ import annotations

import argparse

from tuneplan.commands.common import DATA_SHAPES, positive_int, print_json
from tuneplan.commands.learn import check_plot_path


def register(sub) -> None:
    p = sub.add_parser("data", help="your dataset: token counts, length histogram, what the collator does",
                       description="Read a training dataset (JSONL, JSON, CSV, Parquet, a datasets.save_to_disk "
                                   "folder), count its tokens per example (exact with --tokenizer), and show the "
                                   "length histogram and what the collator does with it: padding, packing, "
                                   "truncation, the longest batch (docs/data.md).")
    p.add_argument("path", help="the data file or save_to_disk folder")
    p.add_argument("--data-format", choices=DATA_SHAPES, help="the rows' shape (default: detected from the columns)")
    p.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json or a tokenizer folder (local files; its chat "
                   "template applied); without it, an approximation from characters")
    p.add_argument("--skip-bad-rows", action="store_true", help="leave out rows that cannot be read")
    c = p.add_argument_group("collator")
    c.add_argument("--seq-len", type=positive_int, help="truncation length (padding length with --padding max, packed "
                   "length with --packing; default: no truncation)")
    c.add_argument("--micro-batch", type=positive_int, help="samples per micro-batch (default 4)")
    c.add_argument("--padding", choices=("max", "longest", "group-by-length"), help="pad to --seq-len (max), to each "
                   "batch's longest, or to each batch's longest with HF's group_by_length sampler (default: the "
                   "framework's)")
    c.add_argument("--group-by-length", action="store_true", help="HF's group_by_length sampler")
    c.add_argument("--packing", action="store_true", help="pack examples into --seq-len sequences")
    c.add_argument("--packing-strategy", choices=("bfd", "wrapped"), help="bfd (default) or wrapped")
    c.add_argument("--framework", help="take padding and packing from this framework (data/frameworks.yaml)")
    o = p.add_argument_group("output")
    o.add_argument("--bins", type=positive_int, default=12, help="histogram bins (default 12)")
    o.add_argument("--plot", help="write the length histogram (PNG or SVG)")
    o.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tuneplan.corpus.summary import render_collation, render_histogram, render_summary, summarise
    from tuneplan.integrations.dataset import data_collation
    from tuneplan.specs.job import make_job

    check_plot_path(args.plot)  # before the read: a folder or a suffix matplotlib cannot draw is refused
    s = summarise(args.path, shape=args.data_format, tokenizer=args.tokenizer, skip_bad_rows=args.skip_bad_rows)
    grouped = args.group_by_length or args.padding == "group-by-length"
    job = make_job(seq_len=args.seq_len, micro_batch=args.micro_batch,
                   padding="longest" if args.padding == "group-by-length" else args.padding,
                   packing=args.packing or None, framework=args.framework)
    col, _, _ = data_collation(s, job, group_by_length=grouped, packing_strategy=args.packing_strategy)
    if args.plot:
        plot_lengths(s, col, args.plot, bins=max(args.bins, 30))
    if args.json:
        return print_json(s.to_dict() | {"collator": col.to_dict()})
    print("\n".join(render_summary(s) + ["length histogram (tokens per example):"]
                    + render_histogram(s, bins=args.bins) + render_collation(col)))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def plot_lengths(s, col, path: str, bins: int = 40) -> None:
    """The example-length histogram with the truncation length and the longest batch marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(s.length, bins=bins, color="#4c72b0")
    if col.seq_len:
        ax.axvline(col.seq_len, color="#c44e52", linestyle="--", label=f"seq_len {col.seq_len:,}")
    ax.axvline(float(s.length.mean()), color="#55a868", label=f"mean {s.length.mean():,.0f}")
    ax.set_xlabel("tokens per example")
    ax.set_ylabel("examples")
    ax.set_title(f"{s.path}: {s.examples:,} examples ({'exact' if s.exact else 'approximate'} tokens)")
    ax.legend()
    fig.tight_layout()
    from tuneplan.errors import atomic_output

    with atomic_output(path, "plot", "plot") as tmp:  # all at once: an interrupted write leaves no half file
        fig.savefig(tmp, format=path.rsplit(".", 1)[-1].lower())
    plt.close(fig)
