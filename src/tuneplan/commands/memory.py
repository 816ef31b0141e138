"""`tuneplan memory MODEL`: memory per GPU for each method x precision, and the common GPUs each fits
on (no GPU to choose first; no data size)."""

from __future__ import annotations

import argparse

from tuneplan.commands.catalogs import plain_table
from tuneplan.commands.common import add_data_args, name_list, positive_int, print_json, read_data


def register(sub) -> None:
    from tuneplan.plan.memory_table import DEFAULT_METHODS, DEFAULT_PRECISIONS, DEFAULT_SEQ_LEN
    from tuneplan.specs.framework import OPTIMIZER_IMPLS

    p = sub.add_parser("memory", help="memory per GPU of a model by method and precision, and the GPUs it fits on",
                       description="Will it fit? Memory per GPU (as nvidia-smi shows it) of fine-tuning MODEL with "
                                   "each method and precision at one sequence length and micro-batch, and which "
                                   "common GPUs it fits on. No GPU or data size needed.")
    p.add_argument("model", help="catalog name or Hugging Face id, or a config.json (or folder)")
    p.add_argument("--methods", type=name_list, help=f"comma-separated (default {','.join(DEFAULT_METHODS)})")
    p.add_argument("--precisions", type=name_list, help=f"comma-separated (default {','.join(DEFAULT_PRECISIONS)})")
    p.add_argument("--seq-len", type=positive_int, help=f"tokens per sample (default {DEFAULT_SEQ_LEN})")
    p.add_argument("--micro-batch", type=positive_int, help="samples per GPU (default 1)")
    p.add_argument("--grad-ckpt", nargs="?", const="full", choices=("none", "selective", "full", "offload"),
                   help="activation checkpointing (alone: full; default none)")
    p.add_argument("--optimizer", help="optimizer (default adamw)")
    p.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS,
                   help="how the AdamW step runs: foreach (torch's default, one second-moment-sized temporary at "
                        "the step), fused or for-loop (default foreach)")
    p.add_argument("--gpus", type=positive_int, help="GPUs per run (default 1); memory is per GPU")
    p.add_argument("--sharding", help="with --gpus > 1: ddp (default), fsdp, zero2, zero3, ...")
    p.add_argument("--lora-rank", type=positive_int, help="LoRA rank (default 16)")
    p.add_argument("--on", type=name_list, help="GPUs to check instead of the common ones (catalog names)")
    p.add_argument("--calibration", help="calibration file or name (default: the shipped one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_data_args(p, collator=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tuneplan.plan.memory_table import memory_table

    data_note = _data_seq_len(args)
    gpus = {"gpus": args.gpus, "nodes": args.gpus // 8 if args.gpus > 8 else None} if args.gpus else {}
    t = memory_table(args.model, methods=args.methods, precisions=args.precisions, seq_len=args.seq_len,
                     micro_batch=args.micro_batch, on=args.on, calibration=args.calibration,
                     grad_ckpt=args.grad_ckpt, optimizer=args.optimizer, optimizer_impl=args.optimizer_impl,
                     sharding=args.sharding, lora_rank=args.lora_rank, **gpus)
    if data_note is not None:
        t.notes.append(data_note[0])
    if args.json:
        return print_json(t.to_dict() | ({"data": data_note[1]} if data_note else {}))
    print(render(t))
    return 0


def _data_seq_len(args: argparse.Namespace) -> tuple[str, dict] | None:
    """`--data`: the table at the longest batch the data makes (its longest example, truncated at --seq-len
    when given): every micro-batch holding that example is padded to it. (note, data summary) or None."""
    data = read_data(args)
    if data is None:
        return None
    import numpy as np

    from tuneplan.corpus.collate import truncate

    cut, n_cut, _ = truncate(data.length, args.seq_len)
    longest = int(cut.max())
    note = (data.assumption().removesuffix(".") + f"; memory at the longest batch: every sample {longest:,} tokens "
            f"(the longest example{', truncated at --seq-len' if n_cut else ''}; median "
            f"{float(np.median(cut)):,.0f}).")
    args.seq_len = longest
    return note, data.to_dict()


def _fits_text(row: dict, gpus: list[tuple[str, float]]) -> str:
    on = row["fits_on"]
    if not on:
        return f"none checked (the largest: {gpus[-1][0]}, {gpus[-1][1]:g} GiB)" if gpus else "-"
    names = [n for n, _ in gpus]
    first = names.index(on[0])
    if on == names[first:]:
        return f"{on[0]} and up" if len(on) > 1 else on[0]
    return ", ".join(on)


COLUMNS = (("method", "left"), ("precision / weights", "left"), ("GiB/GPU", "right"), ("fits on", "left"))


def render(t) -> str:
    """The table as plain text (aligned columns; rich is not needed to read it in a pipe)."""
    head = (f"{t.model}: memory per GPU at seq_len {t.seq_len}, micro-batch {t.micro_batch}"
            f"{f', {t.gpus_per_run} GPUs' if t.gpus_per_run > 1 else ''}")
    rows = [(r["method"], r["weights"], f"{r['memory_per_gpu_gib']:,.1f}", _fits_text(r, t.gpus)) for r in t.rows]
    header, *body = plain_table(COLUMNS, rows).split("\n")
    lines = [head, header, "-" * (header.index("fits on") - 2) + "  " + "-" * 24, *body]
    lines += ["", "GPUs checked (smallest first): " + ", ".join(f"{n} ({m:g} GiB)" for n, m in t.gpus)]
    lines += [f"- {n}" for n in t.notes]
    return "\n".join(lines)
