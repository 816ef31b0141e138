"""The profiler for real on CPU: tiny Llama configs with random weights (torch, transformers, peft)."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tuneplan.errors import InputError, TuneplanError
from tuneplan.profile.rows import COLUMNS, SCHEMA_COLUMNS, RowWriter, read_rows

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tuneplan.profile import grid as grid_mod  # noqa: E402
from tuneplan.profile import runner as runner_mod  # noqa: E402
from tuneplan.profile.commands import register  # noqa: E402
from tuneplan.profile.config import ProfileConfig  # noqa: E402
from tuneplan.profile.grid import curve_path, profile_auto, profile_grid  # noqa: E402
from tuneplan.profile.runner import run_one  # noqa: E402

FAST = dict(steps=2, warmup=1, threads=1)


def tiny_config(**over) -> dict:
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
           "intermediate_size": 172, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
           "tie_word_embeddings": False}
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("model") / "config.json"
    p.write_text(json.dumps(tiny_config()))
    return str(p)


def cli(*argv: str) -> int:
    ap = argparse.ArgumentParser(prog="tuneplan")
    register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(list(argv))
    try:
        return args.func(args)
    except TuneplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def test_full_and_lora_rows(tiny, tmp_path):
    out = tmp_path / "runs.csv"
    rows = profile_grid(tiny, ["full", "lora"], [32], [1, 2], [2], out=out, **FAST)
    assert len(rows) == 4
    header = next(csv.reader(out.open()))
    assert tuple(header[: len(SCHEMA_COLUMNS)]) == SCHEMA_COLUMNS
    assert tuple(header) == COLUMNS
    for r in rows:
        assert r["status"] == "ok", r.get("error")
        assert r["source"] == "profile" and r["framework"] == "tuneplan-profile"
        assert r["model"] == tiny and r["layers"] == 2 and r["n_layers_full"] == 4
        assert r["gpu"] == "local-cpu" and r["gpus"] == 1 and r["sharding"] == "none"
        assert r["mem_kind"] == "rss" and r["peak_mem_gib"] > 0.05
        assert r["precision"] == "fp32" and r["optimizer"] == "adamw"
        assert r["step_time_s"] > 0 and r["n_steps"] == 2
        assert r["step_time_s_p10"] <= r["step_time_s"] <= r["step_time_s_p90"]
        tokens = r["micro_batch_size"] * r["seq_len"]
        assert r["tokens_per_s"] == pytest.approx(tokens / r["step_time_s"])
        assert r["torch_version"] == torch.__version__ and r["threads"] == 1
        # params of the whole 4-layer model (the row's model), not of the 2 layers built
        assert r["params_b"] > r["params_b_built"] > 0
    full = [r for r in rows if r["method"] == "full"]
    lora = [r for r in rows if r["method"] == "lora"]
    assert all(r["lora_rank"] is None for r in full)
    assert all(r["lora_rank"] == 16 and r["lora_targets"] == "all-linear" for r in lora)
    assert lora[0]["trainable_params_m"] < full[0]["trainable_params_m"] / 4
    on_disk = read_rows(out)
    assert [r["id"] for r in on_disk] == ["profile-1", "profile-2", "profile-3", "profile-4"]
    assert on_disk[0]["model_hf_id"] == str(Path(tiny).resolve())


def test_dora_and_options(tiny):
    row = run_one(ProfileConfig(model=tiny, method="dora", seq_len=32, micro_batch=1, layers=1, lora_rank=4,
                            lora_targets="q,v", grad_ckpt=True, optimizer="sgd", attn="eager", **FAST))
    assert row["status"] == "ok", row.get("error")
    assert row["method"] == "dora" and row["lora_rank"] == 4 and row["lora_targets"] == "q,v"
    assert row["grad_ckpt"] is True and row["flash_attn"] is False and row["attn_impl"] == "eager"
    assert row["trainable_params_m"] > 0


def test_oom_is_recorded_and_profiling_goes_on(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny_config(vocab_size=32000)))
    out = tmp_path / "runs.csv"
    # micro-batch 64 x 128 tokens: the fp32 logits alone are 1 GiB; micro-batch 1 fits in 0.35 GiB
    rows = profile_grid(str(cfg), ["full"], [128], [64, 1], [1], out=out, max_mem_gib=0.35, **FAST)
    assert [(r["micro_batch_size"], r["status"]) for r in rows] == [(64, "oom"), (1, "ok")]
    oom = next(r for r in rows if r["status"] == "oom")
    assert "out of memory" in oom["error"] and oom.get("step_time_s") is None
    assert [r["status"] for r in read_rows(out)] == ["oom", "ok"]
    # the measured peak (not only the prediction) is held to the cap too
    row = run_one(ProfileConfig(model=str(cfg), seq_len=16, layers=1, max_mem_gib=0.001, **FAST))
    assert row["status"] == "oom" and "(model build)" in row["error"]


def test_append_only_keeps_rows_and_header(tiny, tmp_path):
    out = tmp_path / "runs.csv"
    profile_grid(tiny, ["lora"], [16], [1], [1], out=out, **FAST)
    header1 = out.read_text().splitlines()[0]
    profile_grid(tiny, ["lora"], [16], [1, 2], [1], out=out, **FAST)
    rows = read_rows(out)
    assert len(rows) == 3
    assert out.read_text().splitlines()[0] == header1
    assert len({r["id"] for r in rows}) == 3


def test_row_writer_merges_a_different_header(tmp_path):
    out = tmp_path / "runs.csv"
    out.write_text("id,model,step_time_s,my_note\nx-1,m,0.5,keep me\n")
    w = RowWriter(out)
    w.write({"model": "tiny", "step_time_s": 0.25, "status": "ok"})
    rows = read_rows(out)
    assert rows[0]["my_note"] == "keep me" and rows[0]["step_time_s"] == "0.5"
    assert rows[1]["model"] == "tiny" and rows[1]["id"] == "profile-1" and rows[1]["status"] == "ok"
    header = out.read_text().splitlines()[0].split(",")
    assert header[:4] == ["id", "model", "step_time_s", "my_note"] and "peak_mem_gib" in header


def test_interrupt_keeps_measured_rows(tiny, tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs.csv"
    real = runner_mod.run_one
    calls = {"n": 0}

    def flaky(cfg, src=None):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(cfg, src)

    monkeypatch.setattr(runner_mod, "run_one", flaky)
    rc = cli("profile", "--model", tiny, "--method", "lora", "--seq-len", "16", "--micro-batch", "1,2,4",
             "--layers", "1", "--steps", "1", "--warmup", "0", "--threads", "1", "--out", str(out),
             "--no-progress")
    assert rc == 130
    assert len(read_rows(out)) == 1
    assert "1 rows measured so far are kept" in capsys.readouterr().err


def test_torchrun_ddp_two_processes(tiny):
    row = run_one(ProfileConfig(model=tiny, method="full", seq_len=32, micro_batch=1, layers=1, nproc=2,
                            steps=2, warmup=1, threads=1))
    assert row["status"] == "ok", row.get("error")
    assert row["gpus"] == 2 and row["nproc"] == 2 and row["sharding"] == "ddp"
    assert 0.0 <= row["comm_share"] <= 1.0 and row["allreduce_s"] > 0
    assert row["tokens_per_s"] == pytest.approx(2 * 32 / row["step_time_s"])
    assert row["global_batch_size"] == 2


@pytest.mark.slow
def test_torchrun_fsdp_two_processes(tiny):
    row = run_one(ProfileConfig(model=tiny, method="lora", seq_len=32, micro_batch=1, layers=2, nproc=2,
                            sharding="fsdp", steps=2, warmup=1, threads=1))
    assert row["status"] == "ok", row.get("error")
    assert row["sharding"] == "fsdp-full" and row["comm_share"] is not None


def test_auto_with_real_runs_writes_rows_and_curve(tiny, tmp_path, monkeypatch):
    out = tmp_path / "auto.csv"
    rows, res = profile_auto(tiny, budget_s=25, target_error=0.5, methods=["full", "lora"], seq_lens=[16, 32],
                             micro_batches=[1, 2], layers=[1, 2], out=out, steps=1, warmup=0, threads=1)
    assert len(rows) == len(res.order) >= 5
    assert res.stop_reason in ("budget", "target", "exhausted")
    assert len(read_rows(out)) == len(rows)
    curve = read_rows(curve_path(out))
    assert len(curve) == len(rows) and curve[0]["phase"] == "anchor"
    assert curve_path(out).name == "auto.curve.csv"


@pytest.mark.parametrize("argv,match", [
    (["--method", "qlora"], "qlora: not available on this device (needs CUDA and bitsandbytes)"),
    (["--method", "gptq-lora"], "gptq-lora: not available"),
    (["--optimizer", "adamw-8bit"], "adamw-8bit: not available"),
    (["--device", "cuda"], "CUDA is not available"),
    (["--device", "tpu"], "unknown device"),
    (["--attn", "flash_attention_2"], "flash_attention_2: not available"),
    (["--method", "sft"], "unknown method"),
    (["--layers", "9"], "more than the 4 layers"),
    (["--auto", "--budget", "0s"], "no time at all"),
    (["--auto", "--budget", "soon"], "cannot read duration"),
    (["--config-override", "hidden_size"], "not key=value"),
])
def test_bad_input_is_one_line(tiny, tmp_path, capsys, argv, match):
    if "--device" in argv and "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "runs.csv"
    rc = cli("profile", "--model", tiny, "--out", str(out), "--no-progress", *argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert match in err and len(err.splitlines()) == 1
    assert not read_rows(out)  # nothing measured


def test_unbuildable_architectures(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "no-such-arch", "hidden_size": 8}))
    with pytest.raises(InputError, match="cannot build architecture 'no-such-arch'"):
        profile_grid(str(p), ["full"], [16], [1], out=None, **FAST)
    p.write_text(json.dumps({"model_type": "t5", "d_model": 8}))
    with pytest.raises(InputError, match="not a causal LM"):
        profile_grid(str(p), ["full"], [16], [1], out=None, **FAST)


def test_catalog_model_with_overrides(tmp_path):
    out = tmp_path / "runs.csv"
    rows = profile_grid("Qwen/Qwen2.5-0.5B", ["lora"], [16], [1], [1], out=out,
                        config_override="hidden_size=64,intermediate_size=128,num_attention_heads=4,"
                                        "num_key_value_heads=2,vocab_size=1000", **FAST)
    r = rows[0]
    assert r["status"] == "ok", r.get("error")
    assert r["model"] == "Qwen/Qwen2.5-0.5B" and r["n_layers_full"] == 24 and r["hidden_size"] == 64
    measured = json.loads(Path(r["model_hf_id"]).read_text())  # the measured architecture, next to out
    assert measured["hidden_size"] == 64 and measured["num_hidden_layers"] == 24
    assert Path(r["model_hf_id"]).parent == tmp_path / "runs.configs"
    assert [f.name for f in (tmp_path / "runs.configs").iterdir()] == [Path(r["model_hf_id"]).name]  # no temp file left


def test_rows_read_by_the_runs_reader(tiny, tmp_path):
    runs_io = pytest.importorskip("tuneplan.runs.io")
    out = tmp_path / "runs.csv"
    profile_grid(tiny, ["full"], [16], [1], [1], out=out, **FAST)
    table = runs_io.read_runs(out, resolve=False)
    assert not table.problems
    assert len(table.df) == 1


def test_probe_saves_a_gpu_entry(tmp_path, capsys):
    from tuneplan.specs.gpu import load_gpu_file, user_gpu_dir

    assert cli("probe", "--quick", "--threads", "1") == 0
    path = user_gpu_dir() / "local-cpu.yaml"
    gpu = load_gpu_file(path)
    assert gpu.name == "local-cpu" and gpu.memory_gib > 0 and gpu.memory_bandwidth_gbs > 0
    assert set(gpu.peak_tflops) >= {"fp32"} and gpu.peak_tflops["fp32"] > 0
    assert "saved to" in capsys.readouterr().out
    assert cli("probe", "--quick", "--threads", "1", "--name", "my-box", "--out", str(tmp_path / "g.yaml")) == 0
    assert load_gpu_file(tmp_path / "g.yaml").name == "my-box"


def test_probe_refuses_a_catalog_gpus_name(capsys):
    # saved as 'H100' (or any spelling of a catalog part), this CPU's figures replaced the catalog's H100
    # in every later estimate: 23 GiB and 7 tokens/s at the H100's price
    from tuneplan.specs.gpu import user_gpu_dir

    for name in ("H100", "NVIDIA A100-SXM4-80GB", "h100-sxm5-80gb"):
        assert cli("probe", "--quick", "--threads", "1", "--name", name) == 2
        assert f"name: '{name}' names a catalog GPU" in capsys.readouterr().err
    assert not list(user_gpu_dir().glob("*[Hh]100*")) and not list(user_gpu_dir().glob("*A100*"))


def test_commands_module_does_not_import_torch():
    code = ("import sys, tuneplan.profile.commands, tuneplan.profile; "
            "bad = [m for m in ('torch', 'transformers', 'peft', 'rich') if m in sys.modules]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_progress_bar_and_grid_module_smoke(tiny, tmp_path):
    rows = grid_mod.profile_grid(tiny, ["lora"], [16], [1], [1], out=None, progress=True, **FAST)
    assert rows[0]["status"] == "ok"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_cpu_steps_reuse_freed_memory_and_give_it_back_between_configurations():
    from tuneplan.profile.memory import current_rss_bytes, hold_freed_memory, release_freed_memory

    assert hold_freed_memory() is True
    release_freed_memory()
    before = current_rss_bytes()
    block = bytearray(64 * 1024 * 1024)  # one large block, as the logits of a step
    block[::4096] = b"\x01" * len(block[::4096])
    del block
    held = current_rss_bytes() - before
    assert held > 48 * 1024 * 1024  # freed but kept in the process: the next step reuses it
    release_freed_memory()
    assert current_rss_bytes() - before < held / 2  # returned between configurations
