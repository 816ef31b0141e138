"""Issue 19 point 6: a configuration whose process the OOM killer ends (SIGKILL, no Python exception)
is recorded as an `oom` row and profiling goes on; tested on CPU with children that kill themselves."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tuneplan.errors import InputError
from tuneplan.profile.isolate import ChildDied, describe_exit, run_isolated

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_result_and_exception_cross_back():
    assert run_isolated(sum, [1, 2, 3]) == 6
    with pytest.raises(InputError, match="steps"):
        run_isolated(_raise_input_error)


def _raise_input_error():
    raise InputError("steps", "must be >= 1")


def test_a_killed_child_is_child_died_with_its_signal():
    with pytest.raises(ChildDied) as got:
        run_isolated(signal.raise_signal, signal.SIGKILL)
    assert got.value.killed and got.value.signal == signal.SIGKILL
    assert "SIGKILL" in str(got.value) and "out-of-memory killer" in str(got.value)
    with pytest.raises(ChildDied) as other:
        run_isolated(signal.raise_signal, signal.SIGTERM)
    assert not other.value.killed and "SIGTERM" in str(other.value)
    with pytest.raises(ChildDied) as code:
        run_isolated(os._exit, 3)
    assert code.value.exitcode == 3 and not code.value.killed
    assert "code 3" in describe_exit(3)


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tuneplan.profile import isolate as isolate_mod  # noqa: E402
from tuneplan.profile import runner as runner_mod  # noqa: E402
from tuneplan.profile.config import ProfileConfig  # noqa: E402
from tuneplan.profile.grid import profile_grid  # noqa: E402
from tuneplan.profile.rows import read_rows  # noqa: E402
from tuneplan.profile.runner import run_one  # noqa: E402

FAST = dict(steps=1, warmup=0, threads=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("model") / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
                             "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                             "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 128,
                             "tie_word_embeddings": False}))
    return str(p)


def test_isolated_measurement_is_an_ok_row(tiny):
    row = run_one(ProfileConfig(model=tiny, method="lora", seq_len=16, layers=1, isolate=True, **FAST))
    assert row["status"] == "ok" and row["step_time_s"] > 0 and row["peak_mem_gib"] > 0


def test_oom_killed_configuration_is_an_oom_row_and_profiling_goes_on(tiny, tmp_path, monkeypatch):
    real = runner_mod._measure

    def killed_at_batch_2(cfg, src, device, dist, out=None):
        if cfg.micro_batch == 2:  # what the kernel's OOM killer does: SIGKILL, mid-measurement
            os.kill(os.getpid(), signal.SIGKILL)
        return real(cfg, src, device, dist, out)

    monkeypatch.setattr(isolate_mod, "START_METHOD", "fork")  # the child must see the patched _measure
    monkeypatch.setattr(runner_mod, "_measure", killed_at_batch_2)
    out = tmp_path / "runs.csv"
    rows = profile_grid(tiny, ["full"], [16], [1, 2, 3], [1], out=out, isolate=True, **FAST)
    assert [r["status"] for r in rows] == ["ok", "oom", "ok"], [r.get("error") for r in rows]
    assert "SIGKILL" in rows[1]["error"] and "out of memory" in rows[1]["notes"]
    on_disk = read_rows(out)
    assert [r["status"] for r in on_disk] == ["ok", "oom", "ok"] and float(on_disk[1]["micro_batch_size"]) == 2


def test_profile_command_isolates_by_default(tiny, tmp_path, monkeypatch, capsys):
    import argparse

    from tuneplan.profile.commands import register

    def killed(cfg, src, device, dist, out=None):
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(isolate_mod, "START_METHOD", "fork")
    monkeypatch.setattr(runner_mod, "_measure", killed)
    ap = argparse.ArgumentParser(prog="tuneplan")
    register(ap.add_subparsers(dest="cmd", required=True))
    out = tmp_path / "runs.csv"
    args = ap.parse_args(["profile", "--model", tiny, "--seq-len", "16", "--layers", "1", "--steps", "1",
                          "--warmup", "0", "--threads", "1", "--out", str(out), "--no-progress"])
    assert args.func(args) == 0
    assert [r["status"] for r in read_rows(out)] == ["oom"]
    assert "1 oom/error" in capsys.readouterr().out
    assert ap.parse_args(["profile", "--model", tiny, "--in-process"]).in_process
