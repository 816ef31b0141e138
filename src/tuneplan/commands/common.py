"""Flags shared by estimate, predict, plan and curve. The job flags are generated from JobSpec's
fields (`tuneplan.specs.job.option`): a new field declared with `option` is a flag of every command
that takes a job, with its help, default and choices (docs/architecture.md)."""

from __future__ import annotations

import argparse
import os
import sys
import types
import typing

from tuneplan.errors import InputError, check_output_path

BLAS_THREADS_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
"""numpy's BLAS thread pool (OpenBLAS starts one thread per core when numpy is imported, ~0.07-0.1 s of
CPU here) is pure start-up cost for a command that calls no BLAS routine (no matrix product, no linear
algebra: an estimate's one configuration, predict's element-wise arrays), so such a command asks for
one thread unless the user's environment says otherwise."""


def single_threaded_blas() -> None:
    """Before numpy is imported: one BLAS thread, unless the environment sets its own count."""
    if "numpy" not in sys.modules and not any(os.environ.get(name) for name in BLAS_THREADS_VARS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def _int_from(text: str, lowest: int, what: str) -> int:
    from tuneplan.specs.limits import MAX_INT_DIGITS

    digits = text.strip().lstrip("+-").replace("_", "")
    if len(digits) > MAX_INT_DIGITS and digits.isdigit():
        raise argparse.ArgumentTypeError(f"an integer of {len(digits):,} digits is beyond any fine-tuning run "
                                         f"(at most {MAX_INT_DIGITS} digits)")
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < lowest:
        raise argparse.ArgumentTypeError(f"must be {what}, got {v}")
    return v


def positive_int(text: str) -> int:
    return _int_from(text, 1, "a positive integer")


def nonneg_int(text: str) -> int:
    return _int_from(text, 0, ">= 0")


def _float_from(text: str, positive: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if v != v or (v <= 0 or v == float("inf") if positive else v < 0):
        raise argparse.ArgumentTypeError(f"must be {'a positive number' if positive else '>= 0'}, got {text}")
    return v


def positive_float(text: str) -> float:
    return _float_from(text, True)


def nonneg_float(text: str) -> float:
    return _float_from(text, False)


def int_list(text: str) -> list[int]:
    """A comma-separated list of positive integers (1,2,4,8)."""
    try:
        out = [int(x) for x in text.replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not out or any(v < 1 for v in out):
        raise argparse.ArgumentTypeError(f"'{text}': give positive integers, e.g. 1,2,4,8")
    return out


def name_list(text: str) -> list[str]:
    """A comma-separated list of names (a;b is read as a,b)."""
    out = [x.strip() for x in text.replace(";", ",").split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError("give at least one name")
    return out


def add_gpu_args(p: argparse.ArgumentParser, gpu_required: bool = False) -> None:
    g = p.add_argument_group("GPU")
    g.add_argument("--gpu", help="catalog name (see `tuneplan gpus`), e.g. H100-SXM5-80GB")
    g.add_argument("--gpu-file", help="your own GPU as YAML/JSON (keys of `tuneplan gpus --json`)")
    g.add_argument("--peak-tflops", type=positive_float, help="one-off dense peak TFLOP/s")
    g.add_argument("--memory-gib", type=positive_float, help="one-off GPU memory, GiB")
    g.add_argument("--bandwidth-gbs", type=positive_float, help="one-off memory bandwidth, GB/s")
    add_strict_names(g)


def add_strict_names(p) -> None:
    """`--strict-names`: refuse a GPU family name instead of reading it as the catalog's default variant."""
    p.add_argument("--strict-names", action="store_true",
                   help="refuse a GPU family name (A100, A100-80GB, H100...) instead of reading it as the "
                        "catalog's default variant (which the output's assumptions name)")


NUMBER_TYPES = {(int, "positive"): positive_int, (int, "nonneg"): nonneg_int,
                (float, "positive"): positive_float, (float, "nonneg"): nonneg_float}


def plain_type(annotation):
    """The type inside `X | None`."""
    args = [t for t in typing.get_args(annotation) if t is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1 else annotation


def job_options() -> dict[str, tuple[str, str, dict]]:
    """JobSpec's options (fields declared with `specs.job.option`) as {field: (flag, --help group,
    argparse keywords)}: the one place a job flag is declared is its field."""
    from tuneplan.specs.job import job_options as options

    out: dict[str, tuple[str, str, dict]] = {}
    for name, opt in options().items():
        extra = opt.extra
        flag = extra.get("flag") or name.replace("_", "-")
        kind = plain_type(opt.type)
        kw: dict = {"dest": flag.replace("-", "_"), "default": None, "help": opt.help}
        if extra.get("repeat"):
            kw.update(action="append", metavar="NAME=VALUE")
        elif kind is bool and extra.get("modes"):
            # a switch that also takes a mode word (--grad-ckpt, --grad-ckpt selective); --no-X below
            kw.update(nargs="?", const="true", metavar="MODE", choices=(*extra["modes"], "true", "false"))
        elif kind is bool:
            kw["action"] = "store_true" if extra.get("switch_only") else argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is typing.Literal:
            kw["choices"] = typing.get_args(kind)
        elif extra.get("choices") == "frameworks":
            # NAME, an alias or NAME@VERSION: checked by the job (one line naming the allowed profiles)
            kw["metavar"] = "NAME[@VERSION]"
        elif kind in (int, float):
            kw["type"] = NUMBER_TYPES[kind, extra.get("number", "positive")]
        out[name] = ("--" + flag, extra["group"], kw)
    return out


def add_job_args(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> dict[str, argparse._ArgumentGroup]:
    """The job flags, generated from JobSpec's fields in their --help groups (fields in `skip` left
    out, for a command that declares them its own way); returns the groups by title, so a command
    can add its own flags to one."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name, (flag, group, kw) in job_options().items():
        if name in skip:
            continue
        if group not in groups:
            groups[group] = p.add_argument_group(group)
        groups[group].add_argument(flag, **kw)
        if kw.get("nargs") == "?":
            groups[group].add_argument("--no-" + flag[2:], dest=kw["dest"], action="store_const", const="false",
                                       help=f"same as {flag} false")
    if "work and money" in groups:
        groups["work and money"].add_argument("--provider", help="take the price from this provider")
        groups["work and money"].add_argument("--prices", help="price file (CSV/YAML) instead of the shipped one")
    return groups


def job_fields() -> dict[str, str]:
    """{argparse dest: JobSpec field} of every job flag."""
    return {kw["dest"]: name for name, (_, _, kw) in job_options().items()}


def job_kwargs(args: argparse.Namespace) -> dict:
    """JobSpec keyword arguments from the job flags given (those left out take JobSpec's defaults)."""
    return {fld: v for attr, fld in job_fields().items() if (v := getattr(args, attr, None)) is not None}


DATA_SHAPES = ("text", "chat", "prompt-completion", "alpaca", "preference", "rl-prompt")
"""`--data-format` values (tuneplan.corpus.read.SHAPES; listed here so --help needs no import)."""


def add_data_args(p: argparse.ArgumentParser, *, collator: bool = True) -> argparse._ArgumentGroup:
    """`--data PATH` and its options: the user's own dataset in place of --examples/--tokens-per-example
    (docs/data.md)."""
    g = p.add_argument_group("your dataset (docs/data.md)")
    g.add_argument("--data", metavar="PATH", help="your training data: JSONL, JSON, CSV, Parquet or a "
                   "datasets.save_to_disk folder; its examples and token counts replace --examples and "
                   "--tokens-per-example")
    g.add_argument("--data-format", choices=DATA_SHAPES, help="the rows' shape (default: detected from the columns)")
    g.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json or a tokenizer folder (local files; "
                   "its chat template applied) for exact token counts; without it, an approximation from "
                   "characters with its expected error")
    g.add_argument("--skip-bad-rows", action="store_true", help="leave out rows that cannot be read (counted "
                   "in the output) instead of stopping at the first")
    if collator:
        g.add_argument("--group-by-length", action="store_true", help="HF's group_by_length sampler: batches "
                       "of similar lengths, the longest first")
        g.add_argument("--packing-strategy", choices=("bfd", "wrapped"), help="with --packing: best-fit "
                       "decreasing (bfd, TRL's default) or wrapped (concatenate and cut)")
    return g


def read_data(args: argparse.Namespace):
    """The DataSummary of `--data` (None without it)."""
    if not getattr(args, "data", None):
        for flag in ("tokenizer", "data_format"):
            if getattr(args, flag, None):
                raise InputError(flag.replace("_", "-"), "applies with --data PATH")
        return None
    from tuneplan.corpus.summary import summarise

    return summarise(args.data, shape=args.data_format, tokenizer=args.tokenizer, skip_bad_rows=args.skip_bad_rows)


INPUT_ATTRS = ("runs", "prices", "calibration", "gpu_file", "from_files", "base", "model")
"""argparse destinations that may name a file a command reads: an output may be none of them."""


def add_force_arg(p) -> None:
    """`--force`: replace an existing output file (never one of the command's inputs)."""
    p.add_argument("--force", action="store_true",
                   help="replace an existing output file (without it an existing file is refused; an input "
                        "of the command is refused either way)")


def input_paths(args: argparse.Namespace) -> list[str]:
    """The paths a command was given to read (runs files or folders, price, calibration, GPU and
    config files; a --model that names an existing file or folder)."""
    out: list[str] = []
    for attr in INPUT_ATTRS:
        v = getattr(args, attr, None)
        for x in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(x, str) and x.strip() and (attr != "model" or os.path.exists(x)):
                out.append(x)
    return out


def check_out(args: argparse.Namespace, path: str | None, field: str = "out", what: str = "file") -> str | None:
    """An output path checked before any work (tuneplan.errors.check_output_path): never one of the
    command's inputs; an existing file only with --force."""
    if path is None:
        return None
    return check_output_path(path, field, what, input_paths(args), bool(getattr(args, "force", False)))


def print_json(d, cfg=None) -> int:
    """`--json`: one JSON object (with the `--from` config read, when given) on stdout; exit code 0."""
    import json

    print(json.dumps(d | {"from_config": cfg.to_dict()} if cfg else d, indent=2, default=str))
    return 0


def check_interval(value: float, zero: str = "") -> None:
    """An interval coverage: 0 (none) or strictly between 0 and 1."""
    if not (value == 0 or 0 < value < 1):
        raise InputError("interval", f"must be between 0 and 1{zero} (got {value})")


def rich_table(title: str, columns, rows):
    """A rich Table: `columns` as (header, justify), `rows` of cells; the title on the left, a catalog's
    `name` column never wrapped."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", header_style="bold")
    for col, just in columns:
        t.add_column(col, justify=just, no_wrap=col == "name")
    for r in rows:
        t.add_row(*r)
    return t
