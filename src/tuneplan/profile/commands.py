"""CLI: `tuneplan probe` and `tuneplan profile`.

Imports nothing heavy at module import (the CLI imports this on every start): torch, transformers,
peft and rich are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tuneplan.errors import InputError, shown


def _need_profile_deps() -> None:
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError("profile", f"needs {' and '.join(missing)}: pip install 'tuneplan[profile]' "
                                    "(on a CPU-only machine install a CPU torch wheel first)")


# ---------------------------------------------------------------- probe


def cmd_probe(args: argparse.Namespace) -> int:
    _need_profile_deps()
    import os

    import yaml

    from tuneplan.errors import check_output_path
    from tuneplan.profile.device import probe, save_entry

    _check_threads(args.threads)
    from tuneplan.specs.gpu import names_catalog_part

    if args.name and names_catalog_part(args.name):  # before the measurement
        raise InputError("name", f"'{shown(args.name)}' names a catalog GPU: this machine's measured figures "
                                 "saved under it would replace the catalog's in every estimate naming it; give "
                                 "another name (default local-cpu, or local-<CUDA device name>)")
    if args.out is not None and not str(args.out).strip():
        raise InputError("out", "empty path: give a YAML/JSON file or a folder")
    # before the measurement: an --out file that exists only with --force (a folder's file is named after
    # the entry, known after the probe)
    if args.out is not None and not os.path.isdir(args.out) and os.path.splitext(args.out)[1]:
        check_output_path(os.path.expanduser(args.out), "out", "GPU file (YAML or JSON)", force=args.force)
    entry = probe(args.device, args.name, quick=args.quick, threads=args.threads)
    entry.pop("_spreads", None)
    for w in entry.pop("_warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    path = save_entry(entry, args.out)
    sys.stdout.write(yaml.safe_dump(entry, sort_keys=False))
    print(f"saved to {path}")
    return 0


# ---------------------------------------------------------------- profile


def _lists(args: argparse.Namespace) -> dict[str, Any]:
    """The comma-separated options as lists (empty where not given: the grid takes the default)."""
    from tuneplan.profile.config import parse_int, parse_layers, parse_list, parse_on_off

    def strs(s: str) -> str:
        return s.strip().lower()

    convs = (("methods", "method", strs), ("seq_lens", "seq_len", parse_int),
             ("micro_batches", "micro_batch", parse_int), ("grad_accums", "grad_accum", parse_int),
             ("layers", "layers", parse_layers), ("lora_ranks", "lora_rank", parse_int),
             ("precisions", "precision", strs), ("grad_ckpts", "grad_ckpt", parse_on_off),
             ("attns", "attn", str.strip), ("optimizers", "optimizer", strs), ("nprocs", "nproc", parse_int))
    return {key: parse_list(getattr(args, name), conv, name.replace("_", "-")) for key, name, conv in convs}


def _check_threads(threads: int | None) -> None:
    if threads is not None and not 1 <= threads <= 4096:
        from tuneplan.specs.limits import shown_number

        raise InputError("threads", f"must be a positive number of CPU threads (got {shown_number(threads)})")


def _check_profile_args(args: argparse.Namespace, lists: dict[str, Any]) -> None:
    """Bad values refused before any model is built: counts below 1 or beyond tuneplan.specs.limits'
    bounds (a 400-digit --steps would profile forever), NaN or negative limits, --config-override keys
    the model's config lacks or values of the wrong type."""
    import math

    from tuneplan.specs import limits as lim

    _check_threads(args.threads)
    counts = (("seq_lens", "seq-len", lim.MAX_SEQ_LEN), ("micro_batches", "micro-batch", lim.MAX_MICRO_BATCH),
              ("grad_accums", "grad-accum", lim.MAX_GRAD_ACCUM), ("lora_ranks", "lora-rank", lim.MAX_LORA_RANK),
              ("layers", "layers", lim.MAX_LAYERS), ("nprocs", "nproc", lim.MAX_PROFILE_PROCESSES))
    for name, flag, upper in counts:
        for v in lists.get(name) or ():
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InputError(flag, f"must be positive layer counts or 'full' (got {v})" if flag == "layers"
                                 else f"must be positive integers (got {v})")
            lim.bound_number(flag, v, upper)
    if args.warmup < 0:
        raise InputError("warmup", f"must be >= 0 (got {args.warmup})")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise InputError("timeout", f"must be a positive number of seconds (got {args.timeout})")
    if args.max_mem_gib is not None and not (math.isfinite(args.max_mem_gib) and args.max_mem_gib > 0):
        raise InputError("max-mem-gib", f"must be a positive number of GiB (got {args.max_mem_gib})")
    if not 0 < args.target_error < 1 or args.target_error != args.target_error:
        raise InputError("target-error", f"must be between 0 and 1 (got {args.target_error})")
    if args.lora_alpha is not None and args.lora_alpha < 1:
        raise InputError("lora-alpha", f"must be a positive integer (got {args.lora_alpha})")
    for flag, value, upper in (("steps", args.steps, lim.MAX_PROFILE_STEPS),
                               ("warmup", args.warmup, lim.MAX_PROFILE_STEPS),
                               ("lora-alpha", args.lora_alpha, lim.MAX_LORA_RANK),
                               ("group-size", args.group_size, lim.MAX_GROUP_SIZE),
                               ("completion-len", args.completion_len, lim.MAX_SEQ_LEN),
                               ("seed", args.seed, lim.MAX_SEED)):
        lim.bound_number(flag, value, upper)
    _check_overrides(args.model, args.config_override)


def _check_overrides(model: str, text: str | None) -> None:
    """Each --config-override key is in the model's config (or a known size key), its value of the
    config's type, and the result within tuneplan.specs.limits' bounds."""
    from tuneplan.profile.config import parse_overrides
    from tuneplan.specs.limits import CONFIG_BOUNDS, check_config_sizes

    overrides = parse_overrides(text)
    if not overrides:
        return
    try:
        from tuneplan.specs.catalog import load_model_config

        base = load_model_config(model)
    except Exception:  # noqa: BLE001 - the model itself is checked (and reported) when it is built
        base = None
    merged = dict(base or {})
    for key, value in overrides:
        old = merged.get(key)
        if base is not None and key not in base and key not in CONFIG_BOUNDS:
            raise InputError("config-override", f"unknown key '{key}': {model}'s config has no such entry")
        if key in CONFIG_BOUNDS and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError("config-override", f"{key} must be an integer (got {value!r})")
        if isinstance(old, (int, float)) and not isinstance(old, bool) and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError("config-override", f"{key} must be a number like {old!r} (got {value!r})")
        merged[key] = value
    check_config_sizes(merged, "config-override")


def _count_rows(path: str) -> int:
    from tuneplan.profile.rows import read_rows

    try:
        return len(read_rows(path))
    except OSError:
        return 0


DEFAULT_BUDGET = "10m"
"""--auto's time budget when none is given."""


def _budget(args: argparse.Namespace) -> float:
    """--auto's budget in seconds, checked before any work; --budget without --auto is refused (the
    grid measures every configuration, so a budget would silently be ignored)."""
    from tuneplan.profile.config import parse_duration
    from tuneplan.specs.limits import MAX_SECONDS

    if args.budget is not None and not args.auto:
        raise InputError("budget", "bounds the sampling of --auto: add --auto, or leave --budget out to "
                                   "measure every configuration of the grid")
    text = args.budget if args.budget is not None else DEFAULT_BUDGET
    budget = parse_duration(text)
    if budget < 1.0:
        raise InputError("budget", f"{text} is under one training step; give e.g. --budget 10m")
    if budget > MAX_SECONDS:
        raise InputError("budget", f"{text} is beyond any profiling session (at most {MAX_SECONDS:,.0f} s)")
    return budget


def cmd_profile(args: argparse.Namespace) -> int:
    _need_profile_deps()
    from tuneplan.profile.config import parse_overrides
    from tuneplan.profile.grid import curve_path, profile_auto, profile_grid

    lists = _lists(args)
    _check_profile_args(args, lists)
    budget = _budget(args)
    lists["seq_lens"] = lists["seq_lens"] or ([128, 256, 512, 1024] if args.auto else [512])
    lists["micro_batches"] = lists["micro_batches"] or ([1, 2, 4, 8] if args.auto else [1])
    if args.steps < 1:
        raise InputError("steps", "must be >= 1")
    opts: dict[str, Any] = {
        **{k: v for k, v in lists.items() if k not in ("methods", "seq_lens", "micro_batches", "layers")},
        "lora_targets": args.lora_targets, "lora_alpha": args.lora_alpha, "sharding": args.sharding,
        "device": args.device, "threads": args.threads, "max_mem_gib": args.max_mem_gib,
        "config_override": parse_overrides(args.config_override), "seed": args.seed,
        "gpu_name": args.gpu_name, "timeout_s": args.timeout, "progress": not args.no_progress,
        "stage": args.stage, "trainer": args.trainer, "group_size": args.group_size,
        "completion_len": args.completion_len, "isolate": not args.in_process,
        "echo": lambda line: print(line, flush=True),
    }
    before = _count_rows(args.out)
    try:
        if args.auto:
            rows, res = profile_auto(args.model, budget, args.target_error, lists["methods"],
                                     lists["seq_lens"], lists["micro_batches"], lists["layers"],
                                     args.steps, args.warmup, args.out, **opts)
            _print_curve(res, budget)
            print(f"{len(rows)} rows appended to {args.out}; learning curve in {curve_path(args.out)}")
        else:
            rows = profile_grid(args.model, lists["methods"], lists["seq_lens"], lists["micro_batches"],
                                lists["layers"], args.steps, args.warmup, args.out, **opts)
            n_bad = sum(1 for r in rows if r.get("status") != "ok")
            print(f"{len(rows)} rows appended to {args.out}" + (f" ({n_bad} oom/error)" if n_bad else ""))
    except KeyboardInterrupt:
        kept = _count_rows(args.out) - before
        print(f"\ninterrupted: the {kept} rows measured so far are kept in {args.out}", file=sys.stderr)
        return 130
    return 0


def _print_curve(res: Any, budget: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="learning curve (leave-one-out relative error of step time)")
    for name, justify in (("runs", "right"), ("phase", "left"), ("spent", "right"), ("LOO error", "right")):
        table.add_column(name, justify=justify)
    for p, ch in zip(res.curve, res.trace, strict=False):
        table.add_row(str(p.n_runs), ch.phase, f"{p.cost_s:.1f} s",
                      "-" if p.loo_error is None else f"{100 * p.loo_error:.1f}%")
    console = Console()
    console.print(table)
    why = {"budget": "budget spent", "target": "target error reached",
           "exhausted": "every configuration measured"}[res.stop_reason]
    console.print(f"stopped: {why} ({res.spent_s:.1f} s of {budget:.0f} s)")


# ---------------------------------------------------------------- registration


def register(subparsers: Any) -> None:
    """Add `probe` and `profile` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "probe", help="measure this device's matmul TFLOP/s and memory bandwidth; save it as a GPU entry",
        description="Measure achievable dense matmul TFLOP/s per precision (fp32, bf16; tf32 and fp16 on "
                    "CUDA) and copy bandwidth, and save a GPU-catalog entry (local-cpu or local-<cuda name>) "
                    "under $TUNEPLAN_HOME/gpus/ (default ~/.tuneplan/gpus/).")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--name", default=None, help="entry name (default local-cpu / local-<cuda device name>)")
    p.add_argument("--out", default=None, help="YAML/JSON file or folder to write (default the user GPU folder; "
                   "an existing file only with --force)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for the matmuls")
    p.add_argument("--quick", action="store_true", help="small sizes only (seconds; less accurate)")
    p.set_defaults(func=cmd_probe)

    q = subparsers.add_parser(
        "profile", help="measure real fine-tuning steps on this device and write runs-schema rows",
        description="Build the model from its config with random weights, run warm-up and timed optimizer "
                    "steps on synthetic token batches for every combination of the comma-separated lists "
                    "(or a smart sample of them with --auto --budget), and append one row per configuration "
                    "to --out in the runs schema.")
    q.add_argument("--model", required=True, help="catalog name, config.json path (or folder), or Hub id")
    q.add_argument("--method", default="full", help="list of full, lora, dora, qlora, gptq-lora (default full)")
    q.add_argument("--seq-len", default=None, help="list of sequence lengths (default 512; --auto: 128,256,512,1024)")
    q.add_argument("--micro-batch", default=None, help="list of micro-batch sizes (default 1; --auto: 1,2,4,8)")
    q.add_argument("--grad-accum", default=None, help="list of gradient-accumulation steps (default 1)")
    q.add_argument("--layers", default=None, help="list of layer counts to truncate to; 'full' = whole model")
    q.add_argument("--lora-rank", default=None, help="list of LoRA ranks (default 16)")
    q.add_argument("--lora-alpha", type=int, default=None, help="LoRA alpha (default 2 x rank)")
    q.add_argument("--lora-targets", default="all-linear",
                   help="all-linear (default) or short/module names, e.g. q,v or q,k,v,o,gate,up,down")
    q.add_argument("--precision", default=None,
                   help="list of fp32, bf16, fp16, amp-bf16, amp-fp16 (default fp32 on CPU, bf16 on CUDA)")
    q.add_argument("--optimizer", default=None, help="list of adamw (default), sgd, adafactor, adamw-8bit")
    q.add_argument("--grad-ckpt", default=None, help="list of on/off (default off)")
    q.add_argument("--attn", default=None, help="list of sdpa (default), eager, flash_attention_2")
    q.add_argument("--nproc", default=None, help="list of data-parallel process counts (torchrun; default 1)")
    q.add_argument("--sharding", default="ddp", choices=["ddp", "fsdp"], help="with --nproc > 1 (default ddp)")
    q.add_argument("--steps", type=int, default=8, help="timed optimizer steps per configuration (default 8)")
    q.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    q.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    q.add_argument("--threads", type=int, default=None, help="CPU threads (default torch's)")
    q.add_argument("--max-mem-gib", type=float, default=None,
                   help="simulated memory size: a configuration using more is recorded as oom")
    q.add_argument("--config-override", default=None,
                   help="model config overrides, e.g. hidden_size=256,intermediate_size=688,vocab_size=32000")
    q.add_argument("--gpu-name", default=None, help="the rows' gpu value (default local-cpu / the CUDA GPU name)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--timeout", type=float, default=1800.0, help="seconds per torchrun configuration")
    q.add_argument("--stage", default="sft", help="sft (default), dpo or grpo (TRL's DPOTrainer / GRPOTrainer; "
                   "needs trl): rows carry the stage column")
    q.add_argument("--trainer", default="loop", help="sft steps by the profiler's own loop (default) or trl "
                   "(TRL's SFTTrainer, the baseline of a DPO / GRPO comparison)")
    q.add_argument("--group-size", type=int, default=8, help="grpo: completions per prompt (default 8, TRL's)")
    q.add_argument("--completion-len", type=int, default=64,
                   help="grpo: new tokens per completion, all generated (default 64; prompt = --seq-len)")
    q.add_argument("--out", default="runs.csv", help="runs CSV to append to (default runs.csv)")
    q.add_argument("--auto", action="store_true", help="smart sampling of the grid within --budget")
    q.add_argument("--budget", default=None, help="time budget for --auto: 90s, 10m, 1h (default 10m)")
    q.add_argument("--target-error", type=float, default=0.05,
                   help="--auto stops once the leave-one-out error falls below this (default 0.05)")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.add_argument("--in-process", action="store_true",
                   help="measure in this process (default: each configuration in a child process, so that "
                        "one the system's OOM killer ends is recorded as an oom row)")
    q.set_defaults(func=cmd_profile)
