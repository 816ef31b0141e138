"""The profiler's --stage: TRL's SFT, DPO and GRPO trainers on a tiny random-weight Llama on the CPU,
rows in the runs schema with the stage column, and the estimate's DPO / GRPO step against the SFT step
of the same model, as a ratio.

Tolerance: the estimated ratio is within a factor RATIO_TOLERANCE (DPO 1.75, GRPO 2.5) of the measured one. Why that wide:
the estimate's efficiency curve is a GPU's (doubling the tokens of a micro-step, as DPO's chosen +
rejected does, buys ~10% efficiency there, not on a CPU); TRL's host work per step (collation, its
fused LM head's tiles, toggling the adapter for the reference pass; for GRPO, HF generate's Python loop
per token) weighs more on a model this small than on a real one; and the CI box is shared (steps vary
by ~10%). Measured on the 2-core box at 10:00 UTC 2026-12-01: LoRA DPO/SFT 3.3 vs 2.2 estimated, full
2.3 vs 2.0; LoRA GRPO/SFT 2.1 vs 1.6 (docs/stages.md).
"""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("trl")
pytest.importorskip("datasets")

import tuneplan  # noqa: E402
from tuneplan.errors import InputError  # noqa: E402
from tuneplan.profile.config import ProfileConfig  # noqa: E402
from tuneplan.profile.runner import run_one  # noqa: E402

RATIO_TOLERANCE = {"dpo": 1.75, "grpo": 2.5}
"""Estimated / measured step ratio (stage over SFT) must lie within this factor either way (see above;
GRPO's is wider: its generation is ~16 host-bound decode steps whose Python overhead per token, on a
loaded 2-core box, varies by tens of percent from run to run)."""
SHAPE = dict(seq_len=128, micro_batch=4, steps=6, warmup=2, threads=1)
"""Six timed steps after two warm-up ones: with three after one, one odd step moved the median enough
that CI measured DPO/SFT 4.0 where this machine measures 2.7-3.1."""
CPU = dict(peak_tflops=0.05, memory_gib=64.0, bandwidth_gbs=10.0)
"""A one-off 'GPU' for this CPU: the ratios depend little on its figures (both steps are compute-bound)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
           "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
           "tie_word_embeddings": False}
    p = tmp_path_factory.mktemp("tiny-stage") / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


@pytest.fixture(scope="module")
def rows(tiny) -> dict[str, dict]:
    out = {}
    for stage in ("sft", "dpo", "grpo"):
        out[stage] = run_one(ProfileConfig(model=tiny, method="lora", stage=stage, trainer="trl", group_size=4,
                                       completion_len=16, **SHAPE))
    return out


def _estimate(tiny: str, **kw):
    return tuneplan.estimate(tiny, method="lora", precision="fp32", examples=100, seq_len=SHAPE["seq_len"],
                             micro_batch=SHAPE["micro_batch"], calibration="none", interval=None, **CPU, **kw)


def test_rows_carry_the_stage(rows):
    for stage, row in rows.items():
        assert row["status"] == "ok", row.get("error")
        assert row["stage"] == stage and row["framework"] == "trl" and row["step_time_s"] > 0
    dpo, grpo = rows["dpo"], rows["grpo"]
    assert dpo["tokens_per_s"] == pytest.approx(2 * 4 * 128 / dpo["step_time_s"])
    assert grpo["prompts_per_step"] == 1 and grpo["group_size"] == 4 and grpo["completion_len"] == 16
    assert grpo["tokens_per_s"] == pytest.approx(4 * (128 + 16) / grpo["step_time_s"])


@pytest.mark.parametrize("stage, extra", [("dpo", {}), ("grpo", dict(group_size=4, completion_len=16))])
def test_estimated_ratio_matches_the_measured_one(tiny, rows, stage, extra):
    measured = rows[stage]["step_time_s"] / rows["sft"]["step_time_s"]
    estimated = _estimate(tiny, stage=stage, **extra).step_time_s / _estimate(tiny).step_time_s
    assert abs(math.log(estimated / measured)) < math.log(RATIO_TOLERANCE[stage]), (stage, measured, estimated)


def test_profiler_stage_input_errors(tiny):
    with pytest.raises(InputError, match="stage"):
        run_one(ProfileConfig(model=tiny, stage="ppo", **SHAPE))
    with pytest.raises(InputError, match="group-size"):
        run_one(ProfileConfig(model=tiny, stage="grpo", group_size=3, **SHAPE))


def test_profile_cli_stage_flags(tiny, tmp_path, capsys):
    import argparse

    from tuneplan.errors import TuneplanError
    from tuneplan.profile.commands import register

    ap = argparse.ArgumentParser(prog="tuneplan")
    register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(["profile", "--model", tiny, "--stage", "kto", "--out", str(tmp_path / "r.csv"),
                          "--no-progress"])
    with pytest.raises(TuneplanError, match="stage"):
        args.func(args)
    args = ap.parse_args(["profile", "--model", tiny, "--stage", "grpo", "--group-size", "3", "--micro-batch", "2",
                          "--out", str(tmp_path / "r.csv"), "--no-progress"])
    with pytest.raises(TuneplanError, match="group-size"):
        args.func(args)
