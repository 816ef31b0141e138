"""The `tuneplan` command: a thin layer that parses, calls the API, and prints.

Each subcommand lives in its own module with `register(subparsers)`; only the module of the
command being run is imported, so `tuneplan estimate` starts fast. Bad input is one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "estimate": ("tuneplan.commands.estimate", "time, throughput, memory, cost and energy of a fine-tuning run"),
    "memory": ("tuneplan.commands.memory", "memory per GPU of a model by method and precision; the GPUs it fits on"),
    "data": ("tuneplan.commands.data", "your dataset: token counts, length histogram, what the collator does"),
    "models": ("tuneplan.commands.catalogs", "list the model catalog"),
    "gpus": ("tuneplan.commands.catalogs", "list the GPU catalog"),
    "frameworks": ("tuneplan.commands.catalogs", "list the framework profiles and the defaults each sets"),
    "predict": ("tuneplan.commands.predict", "predict every row of a runs file"),
    "calibrate": ("tuneplan.commands.learn", "fit a calibration on measured runs"),
    "validate": ("tuneplan.commands.learn", "fit on a training split, report errors on held-out runs"),
    "plan": ("tuneplan.commands.plan", "search GPU type x count x method x batch: cheapest, fastest, deadline"),
    "curve": ("tuneplan.commands.plan", "throughput and memory versus micro-batch, as a plot"),
    "probe": ("tuneplan.profile.commands", "measure this device's FLOP/s and bandwidth -> a GPU entry"),
    "profile": ("tuneplan.profile.commands", "measure real fine-tuning steps on this machine"),
    "serve": ("tuneplan.web.commands", "the web planner (FastAPI)"),
}


EXAMPLES: dict[str, tuple[str, ...]] = {
    "tuneplan": (
        "tuneplan memory meta-llama/Llama-3.1-8B",
        "tuneplan estimate --model meta-llama/Llama-3.1-8B --gpu H100-SXM5-80GB --method lora --seq-len 2048",
        "tuneplan plan --model meta-llama/Llama-3.1-8B --examples 50000 --tokens-per-example 800 --deadline 12h",
    ),
    "estimate": (
        "tuneplan estimate --model meta-llama/Llama-3.1-8B --gpu H100-SXM5-80GB --method lora --seq-len 2048",
        "tuneplan estimate --model Qwen/Qwen2.5-7B --gpu A100-SXM4-80GB --gpus 4 --method full --sharding fsdp "
        "--examples 30000 --tokens-per-example 1000 --epochs 3",
        "tuneplan estimate --from my_axolotl.yaml --gpu L40S-48GB --json",
    ),
    "memory": (
        "tuneplan memory meta-llama/Llama-3.1-8B",
        "tuneplan memory meta-llama/Llama-3.1-70B --methods lora,qlora --gpus 8 --sharding fsdp --json",
        "tuneplan memory Qwen/Qwen2.5-7B --data train.jsonl --tokenizer ./tokenizer.json --seq-len 4096",
    ),
    "data": ("tuneplan data train.jsonl --tokenizer ./tokenizer.json --seq-len 2048",
             "tuneplan data train.parquet --packing --seq-len 4096 --json",
             "tuneplan data train.jsonl --plot lengths.png"),
    "models": ("tuneplan models --search llama", "tuneplan models --json > models.json"),
    "gpus": ("tuneplan gpus", "tuneplan gpus --json"),
    "frameworks": ("tuneplan frameworks", "tuneplan frameworks trl@0.21", "tuneplan frameworks --json"),
    "predict": ("tuneplan predict --runs my_runs.csv --out predicted.csv",
                "tuneplan predict --runs my_runs.csv --out predicted.csv --estimator kavier"),
    "calibrate": ("tuneplan calibrate --runs my_runs.csv --out mine.json",
                  "tuneplan calibrate --runs ../shared/reference/runs reference/runs --from-scratch --out default.json "
                  "--force"),
    "validate": ("tuneplan validate --runs my_runs.csv --split random",
                 "tuneplan validate --runs ../shared/reference/runs --split by-source --learners tuneplan"),
    "plan": (
        "tuneplan plan --model meta-llama/Llama-3.1-8B --examples 50000 --tokens-per-example 800 --deadline 12h",
        "tuneplan plan --model meta-llama/Llama-3.1-8B --gpus A100-SXM4-80GB,H100-SXM5-80GB --methods lora,qlora "
        "--examples 50000 --tokens-per-example 800 --budget 400 --objective fastest",
        "tuneplan plan --model Qwen/Qwen2.5-7B --gpus H100-SXM5-80GB --tokens 2e8 --objective energy --top 5",
    ),
    "curve": ("tuneplan curve --model meta-llama/Llama-3.1-8B --gpu H100-SXM5-80GB --method lora --seq-len 2048",
              "tuneplan curve --model meta-llama/Llama-3.1-8B --gpu H100-SXM5-80GB --seq-len 2048 --plot curve.png"),
    "probe": ("tuneplan probe", "tuneplan probe --quick --name my-laptop"),
    "profile": ("tuneplan probe && tuneplan profile --model sshleifer/tiny-gpt2 --method lora --auto",),
    "serve": ("tuneplan serve", "tuneplan serve --port 8080"),
}
"""Two or three examples per command, shown at the end of its --help (and of `tuneplan --help`)."""


def examples_epilog(name: str) -> str:
    return "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES.get(name, ()))


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (`tuneplan: error: ...`) with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="tuneplan", description="Plan fine-tuning runs: time, memory, cost, energy.",
                           epilog=examples_epilog("tuneplan"), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    done: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if (only is not None and name != only) or module in done:  # a module registers all its commands
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError:
            sub.add_parser(name, help=help_text + " (not installed)")
            continue
        mod.register(sub)
        done.add(module)
    for name, p in sub.choices.items():  # each subcommand's --help ends with its examples, kept as written
        if name in EXAMPLES and not p.epilog:
            p.epilog = examples_epilog(name)
            p.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    from tuneplan.errors import TuneplanError

    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in COMMANDS else None
    parser = build_parser(only)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named with the command whose flags they are not (argparse names only `tuneplan`)
        prog = f"tuneplan {args.command}" if getattr(args, "command", None) else "tuneplan"
        parser.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(extra)} (`{prog} --help` lists the "
                       "flags)\n")
    if getattr(args, "version", False):
        from tuneplan import __version__

        print(f"tuneplan {__version__}")
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if not argv else 2
    try:
        return int(args.func(args) or 0)
    except TuneplanError as exc:
        print(f"tuneplan {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"tuneplan {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the last resort: a bug is one line too (TUNEPLAN_DEBUG=1 re-raises)
        if os.environ.get("TUNEPLAN_DEBUG"):
            raise
        print(f"tuneplan {args.command}: internal error ({type(exc).__name__}: {str(exc)[:200]}); this is a bug "
              "in tuneplan, please report it (TUNEPLAN_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
