"""`--from FILE` (and `--format`) for estimate, plan and curve: the user's own training config fills
every flag the command line leaves unset; what was used, assumed and ignored is printed."""

from __future__ import annotations

import argparse
import sys

from tuneplan.commands.common import job_fields, job_kwargs
from tuneplan.errors import InputError

FORMAT_CHOICES = ("axolotl", "llamafactory", "torchtune", "trl", "litgpt", "accelerate", "deepspeed", "verl", "nemo-rl",
                  "openrlhf")
"""Same as tuneplan.configs.FORMATS (not imported here: the parser must not load the readers)."""
PLAN_PINS = ("micro_batch", "grad_accum", "sharding")
"""Job fields `plan` takes as pins (one value instead of a search) when a config states them."""


def add_from_args(p: argparse.ArgumentParser, func=None) -> None:
    """The `--from` / `--format` flags (and the command's function, when given)."""
    if func is not None:
        p.set_defaults(func=func)
    g = p.add_argument_group("your training config")
    g.add_argument("--from", dest="from_files", action="append", metavar="FILE",
                   help="read your training config (axolotl, LLaMA-Factory, torchtune, TRL/transformers, litgpt, "
                        "accelerate or DeepSpeed; repeat for the launcher's file); flags given here override it")
    g.add_argument("--format", dest="config_format", action="append", choices=FORMAT_CHOICES,
                   help="force the format (once for all files, or once per --from) instead of detecting it")


def read_from(args: argparse.Namespace, fill) -> object:
    """The ConfigRead of `--from` (None without it), after `fill(args, cfg)` set the flags it fills;
    with `--data`, the data's sizes stay in place of those the config filled in."""
    files = getattr(args, "from_files", None)
    if not files:
        return None
    from tuneplan.configs import read_configs

    sizes = {k: getattr(args, k, None) for k in ("examples", "tokens", "tokens_per_example")}
    cfg = read_configs(files, getattr(args, "config_format", None))
    fill(args, cfg)
    if getattr(args, "data", None):
        for k, v in sizes.items():
            setattr(args, k, v)
    return cfg


def apply_from(args: argparse.Namespace):
    """Fill unset flags of estimate / curve from `--from`. Returns the ConfigRead (None without --from)."""
    return read_from(args, _fill)


def _fill(args: argparse.Namespace, cfg) -> None:
    attr_of = {fld: attr for attr, fld in job_fields().items()}
    for fld, value in cfg.job_kwargs().items():
        attr = attr_of.get(fld)
        if attr is not None and hasattr(args, attr) and getattr(args, attr) is None:
            setattr(args, attr, ",".join(value) if fld == "lora_targets" else value)
    if getattr(args, "model", None) is None and cfg.model:
        args.model = cfg.model
    if getattr(args, "examples", None) is None and getattr(args, "tokens", None) is None:
        from tuneplan.configs import fill_work

        job = job_kwargs(args)
        cfg.notes.extend(fill_work(job, cfg))
        args.examples = job["examples"]
        args.epochs = job.get("epochs", args.epochs)
    _check_nulls(args, cfg)


def _check_nulls(args: argparse.Namespace, cfg) -> None:
    """A length the config sets to null (torchtune's `tokenizer.max_seq_len: null`) and no flag gives
    (--data gives the lengths, untruncated): the error names the file's key."""
    where = cfg.nulls.get("seq_len")
    if where and not any(getattr(args, k, None) is not None for k in ("seq_len", "tokens_per_example", "data")):
        raise InputError("seq-len", f"{where} is null (samples are not truncated, so the length is the data's): "
                         "give --seq-len, --tokens-per-example or --data")


def apply_from_plan(args: argparse.Namespace):
    """Fill `plan`'s unset flags from `--from`: the method and GPU count become one-value searches,
    the batch shape and sharding pins."""
    return read_from(args, _fill_plan)


def _fill_plan(args: argparse.Namespace, cfg) -> None:
    job = cfg.job_kwargs()
    if getattr(args, "model", None) is None and cfg.model:
        args.model = cfg.model
    if args.methods is None and "method" in job:
        args.methods = [job["method"]]
    if args.gpu_counts is None and cfg.stated("gpus"):
        args.gpu_counts = [job["gpus"]]
    if args.grad_ckpt is None and "grad_ckpt" in job:
        args.grad_ckpt = job["grad_ckpt"]
    skip = {"method", "gpus", "nodes", "grad_ckpt", "tp", "pp", "cp", "ep", "rate_usd_per_gpu_hour"}
    for fld, value in job.items():
        if fld in skip or not hasattr(args, fld) or getattr(args, fld) is not None:
            continue
        if fld in PLAN_PINS and not cfg.stated(fld):
            continue
        setattr(args, fld, ",".join(value) if fld == "lora_targets" else value)
    if args.examples is None and args.tokens is None:
        from tuneplan.configs import fill_work

        work = {k: v for k, v in job.items() if k in ("micro_batch", "grad_accum", "gpus")}
        cfg.notes.extend(fill_work(work, cfg))
        args.examples = work["examples"]
    _check_nulls(args, cfg)


def print_provenance(cfg, stream=None) -> None:
    """The used / assumed / ignored lists, ignored keys grouped by reason."""
    lines = [f"Read from {', '.join(f'{f} ({k})' for f, k in zip(cfg.files, cfg.formats, strict=True))}:",
             "  used:", *(f"    - {line}" for line in cfg.used())]
    if cfg.assumed():
        lines += ["  assumed (the file does not say):", *(f"    - {line}" for line in cfg.assumed())]
    if cfg.ignored:
        by_why: dict[str, list[str]] = {}
        for f, k, why in cfg.ignored:
            by_why.setdefault(why, []).append(k if len(cfg.files) == 1 else f"{f}:{k}")
        lines += ["  ignored:", *(f"    - {', '.join(keys)}: {why}" for why, keys in by_why.items())]
    print("\n".join([*lines, "  command-line flags override the file."]), file=stream or sys.stdout)
