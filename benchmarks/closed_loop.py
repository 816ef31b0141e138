"""The loop closed on this machine, judged on accuracy (run by hand; a few minutes on 2 CPU cores).

Probe this CPU, profile a small Llama-style model, calibrate on those runs, predict configurations that were
not measured (another sequence length, layer count and method), measure them too and compare; then the
few-runs loop: calibrate on 6 runs at one sequence length, predict 6 at another. Prints the held-out MdAPE
of each loop next to the timing spread and speed drift that bound how finely this machine can be judged.

    python benchmarks/closed_loop.py [--workdir DIR]

tests/test_closed_loop.py checks the same loop's behaviour (every step runs and answers) on a few runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from tuneplan.cli import main

OVERRIDE = "hidden_size=256,intermediate_size=688,vocab_size=32000,num_attention_heads=4,num_key_value_heads=2"
COMMON = ["--model", "meta-llama/Llama-3.2-1B", "--config-override", OVERRIDE, "--steps", "6", "--warmup", "2",
          "--threads", "2", "--no-progress"]
HELD_OUT = (["--layers", "2", "--method", "full", "--seq-len", "96", "--micro-batch", "2"],
            ["--layers", "3", "--method", "dora", "--seq-len", "128", "--micro-batch", "2"],
            ["--layers", "2", "--method", "lora", "--seq-len", "128", "--micro-batch", "2"],
            ["--layers", "3", "--method", "full", "--seq-len", "64", "--micro-batch", "4"],
            ["--layers", "4", "--method", "lora", "--seq-len", "96", "--micro-batch", "1"])
"""Not measured in training: another sequence length (96), another layer count (3), another method
(LoRA: training saw full fine-tuning and DoRA only)."""
SENTINEL = ["--layers", "2", "--method", "full", "--seq-len", "64", "--micro-batch", "2"]
"""A training configuration measured again at the end, to tell whether the machine's speed moved."""
FEW_RUNS_GRID = ["--layers", "2", "--method", "full,lora,dora", "--micro-batch", "1,2"]
"""Six configurations per sequence length: three methods, two micro-batches."""


def run(argv: list[str]) -> None:
    if main(argv) != 0:
        raise SystemExit(f"closed_loop: `tuneplan {' '.join(argv)}` failed")


def speed_drift(work: Path, measured: pd.DataFrame, extra: list[str]) -> float:
    """Re-measure the configuration `extra` (already in `measured`) now; relative change of its speed."""
    again = work / f"again-{len(list(work.glob('again-*')))}.csv"
    run(["profile", *COMMON, *extra, "--out", str(again)])
    now = float(pd.read_csv(again)["tokens_per_s"].iloc[-1])
    values = dict(zip(extra[::2], extra[1::2], strict=True))
    first = measured[(measured["method"] == values["--method"])
                     & (measured["seq_len"] == int(values["--seq-len"]))
                     & (measured["micro_batch_size"] == int(values["--micro-batch"]))
                     & (measured["layers"] == int(values["--layers"]))]
    return abs(now / float(first["tokens_per_s"].iloc[0]) - 1)


def spread_of(rows: pd.DataFrame) -> float:
    """Median p90/p10 step-time ratio: above ~1.6 the machine is too busy for timing to mean anything."""
    return float(np.median(rows["step_time_s_p90"] / rows["step_time_s_p10"]))


def held_out_loop(work: Path) -> str:
    train, test = work / "train.csv", work / "test.csv"
    run(["profile", *COMMON, "--layers", "2,4", "--method", "full,dora", "--seq-len", "64,128",
         "--micro-batch", "1,2,4", "--out", str(train)])
    for _round in range(2):  # each held-out configuration measured twice, compared by its mean
        for extra in HELD_OUT:
            run(["profile", *COMMON, *extra, "--out", str(test)])
    cal, pred_path = work / "local.json", work / "pred.csv"
    run(["calibrate", "--runs", str(train), "--out", str(cal)])
    run(["predict", "--runs", str(test), "--calibration", str(cal), "--out", str(pred_path)])
    rows, pred = pd.read_csv(train), pd.read_csv(pred_path)
    per_config = pred.groupby(["method", "layers", "seq_len", "micro_batch_size"], sort=False)[
        ["tokens_per_s", "pred_tokens_per_s"]].mean()
    err = (per_config["pred_tokens_per_s"] / per_config["tokens_per_s"] - 1).abs()
    drift = speed_drift(work, rows, SENTINEL)
    return (f"held-out loop: MdAPE {err.median():.1%} over {len(err)} unmeasured configurations "
            f"(errors {', '.join(f'{e:.1%}' for e in err)}); timing spread p90/p10 "
            f"{spread_of(pd.concat([rows, pred])):.2f}, speed drift {drift:.1%} (target: MdAPE < 15% + drift)")


def few_runs_loop(work: Path) -> str:
    short, long_ = work / "short.csv", work / "long.csv"
    run(["profile", *COMMON, *FEW_RUNS_GRID, "--seq-len", "64", "--out", str(short)])
    run(["profile", *COMMON, *FEW_RUNS_GRID, "--seq-len", "128", "--out", str(long_)])
    cal, pred_path = work / "six.json", work / "pred6.csv"
    run(["calibrate", "--runs", str(short), "--out", str(cal)])
    run(["predict", "--runs", str(long_), "--calibration", str(cal), "--out", str(pred_path)])
    pred = pd.read_csv(pred_path)
    err = (pred["pred_tokens_per_s"] / pred["tokens_per_s"] - 1).abs()
    drift = speed_drift(work, pd.read_csv(short), ["--layers", "2", "--method", "lora", "--seq-len", "64",
                                                   "--micro-batch", "2"])
    return (f"few-runs loop: 6 runs at seq 64 -> 6 at seq 128, MdAPE {err.median():.1%} "
            f"(errors {', '.join(f'{e:.1%}' for e in err)}); timing spread p90/p10 "
            f"{spread_of(pd.concat([pd.read_csv(short), pred])):.2f}, speed drift {drift:.1%} "
            f"(target: MdAPE < 25% + drift)")


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, help="where the runs files go (default: a temporary folder)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        run(["probe", "--quick"])
        print(held_out_loop(work))
        print(few_runs_loop(work))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
