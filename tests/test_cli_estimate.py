"""`tuneplan estimate` end to end: JSON keys, tables, bad input as one line with exit code 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tuneplan.cli import main

BASE = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--gpu", "H100-SXM5-80GB",
        "--gpus", "4", "--examples", "30000", "--tokens-per-example", "1000", "--epochs", "3",
        "--micro-batch", "4", "--rate", "2.49"]
TOP_KEYS = {"wall_clock_s", "device_hours", "cost_usd", "energy_kwh", "tokens_per_s", "samples_per_s",
            "step_time_s", "memory_per_gpu_gib", "fits", "estimator", "assumptions", "max_micro_batch",
            "step_breakdown_s", "memory_breakdown_gib", "mfu", "co2_kg", "steps", "warnings"}


def run_json(args, capsys):
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keys_and_consistency(capsys):
    d = run_json(BASE, capsys)
    assert set(d) >= TOP_KEYS
    assert d["estimator"] == "tuneplan"
    assert d["device_hours"] == pytest.approx(d["wall_clock_s"] * 4 / 3600)
    assert d["cost_usd"] == pytest.approx(d["device_hours"] * 2.49)
    assert d["tokens_per_s"] == pytest.approx(4 * 4 * 1000 / d["step_time_s"])
    assert d["samples_per_s"] == pytest.approx(d["tokens_per_s"] / 1000)
    parts = {k: v for k, v in d["step_breakdown_s"].items() if k != "total"}
    assert sum(parts.values()) == pytest.approx(d["step_time_s"], rel=1e-6)
    assert {"forward", "backward", "recompute", "optimizer", "communication"} <= set(parts)
    assert 0 < d["mfu"] < 1
    assert d["fits"] is True and d["max_micro_batch"] >= 4
    assert all(isinstance(a, str) and a for a in d["assumptions"])


@pytest.mark.parametrize("est", ["tuneplan", "kavier", "xia"])
def test_each_estimator_runs(est, capsys):
    d = run_json(BASE + ["--estimator", est], capsys)
    assert d["estimator"] == est and d["tokens_per_s"] > 0 and d["wall_clock_s"] > 0


def test_table_output(capsys):
    assert main(BASE) == 0
    out = capsys.readouterr().out
    for word in ("wall clock", "device-hours", "cost", "energy", "tokens/s", "step time", "forward",
                 "backward", "MFU", "memory per GPU", "what this assumes"):
        assert word in out


def test_does_not_fit_warns_with_fix(capsys):
    d = run_json(["estimate", "--model", "meta-llama/Llama-3.1-70B", "--method", "full", "--gpu",
                  "A100-SXM4-80GB", "--examples", "1000", "--tokens-per-example", "2048"], capsys)
    assert d["fits"] is False
    assert any("does not fit" in w for w in d["warnings"])
    assert d["suggestions"]


def test_moe_sparse_faster_than_dense(capsys):
    args = ["estimate", "--model", "mistralai/Mixtral-8x7B-v0.1", "--method", "qlora", "--gpu",
            "H100-SXM5-80GB", "--examples", "1000", "--tokens-per-example", "512", "--micro-batch", "1",
            "--moe-experts", "modules"]  # an nn.Linear per expert: the stacked layout's re-materialised W + BA aside
    sparse = run_json(args + ["--calibration", "none"], capsys)
    dense = run_json(args + ["--calibration", "none", "--moe-mode", "dense"], capsys)
    def compute(d):
        return d["step_breakdown_s"]["forward"] + d["step_breakdown_s"]["backward"]

    # 8 experts' FLOPs instead of 2; in sparse mode each expert's GEMM gets a quarter of the rows (less efficient,
    # physics/ops.expert_gemm_rows), so dense costs less than 4x, still well above the sparse step
    assert compute(dense) > 1.4 * compute(sparse)
    # the adapters' kernel launches and the NF4 dequantisation touch every expert in both modes
    assert dense["step_time_s"] > 1.25 * sparse["step_time_s"]
    sparse = run_json(args, capsys)
    dense = run_json(args + ["--moe-mode", "dense"], capsys)
    assert dense["step_time_s"] > sparse["step_time_s"]  # and still slower once calibrated


def test_large_parallel_runs(capsys):
    d = run_json(["estimate", "--model", "meta-llama/Llama-3.1-70B", "--method", "lora", "--gpu",
                  "H100-SXM5-80GB", "--gpus", "8", "--tp", "4", "--examples", "10000",
                  "--tokens-per-example", "2048", "--micro-batch", "1"], capsys)
    assert d["step_breakdown_s"]["tensor_parallel"] > 0
    d = run_json(["estimate", "--model", "meta-llama/Llama-3.1-405B", "--method", "full", "--gpu",
                  "H100-SXM5-80GB", "--gpus", "512", "--nodes", "64", "--tp", "8", "--pp", "8",
                  "--grad-accum", "16", "--micro-batch", "1", "--tokens", "1e9", "--seq-len", "8192"], capsys)
    assert d["step_breakdown_s"]["pipeline_bubble"] > 0
    assert d["fits"] in (True, False)


@pytest.mark.parametrize("extra,field", [
    (["--micro-batch", "0"], "--micro-batch"),
    (["--gpus", "-2"], "--gpus"),
    (["--gpus", "2.5"], "--gpus"),
    (["--gpus", "6", "--nodes", "4"], "gpus"),
    (["--gpus", "4", "--tp", "3"], "tp"),
    (["--method", "qlora", "--precision", "fp32"], "qlora"),
    (["--method", "sideways"], "method"),
    (["--gpu", "H900"], "gpu"),
    (["--model", "no-such-model-xyz"], "model"),
    (["--optimizer", "adam3"], "--optimizer"),
    (["--interval", "1.5"], "interval"),
])
def test_bad_input_is_one_line_exit_2(extra, field, capsys):
    args = list(BASE)
    for i in range(0, len(extra), 2):
        if extra[i] in args:
            j = args.index(extra[i])
            args[j + 1] = extra[i + 1]
        else:
            args += extra[i:i + 2]
    with pytest.raises(SystemExit) as ei:
        code = main(args)
        raise SystemExit(code)
    assert ei.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert field in err
    assert "Traceback" not in err


def test_unknown_gpu_lists_close_names(capsys):
    assert main(BASE[:6] + ["H100-SXM9"] + BASE[7:]) == 2
    err = capsys.readouterr().err
    assert "H100-SXM5-80GB" in err


def test_seq_above_max_position_is_warning(capsys):
    d = run_json(["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "H100-SXM5-80GB",
                  "--examples", "10", "--tokens-per-example", "8192", "--micro-batch", "1"], capsys)
    assert any("max_position_embeddings" in w for w in d["warnings"])


def test_one_off_gpu_flags_and_gpu_file(tmp_path, capsys):
    d = run_json(["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--peak-tflops", "100", "--memory-gib", "24",
                  "--bandwidth-gbs", "900", "--examples", "100", "--tokens-per-example", "256", "--rate", "1"],
                 capsys)
    assert d["gpu"] == "custom-gpu"
    f = tmp_path / "g.yaml"
    f.write_text("name: my-gpu\nmemory_gib: 24\nmemory_bandwidth_gbs: 900\npeak_tflops: {bf16: 100}\n")
    d = run_json(["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--gpu-file", str(f), "--examples", "100",
                  "--tokens-per-example", "256", "--rate", "1"], capsys)
    assert d["gpu"] == "my-gpu"


def test_one_off_gpu_flags_under_a_name_of_its_own(capsys):
    # --gpu naming no catalog part with all three figures given: that GPU, not an "unknown GPU" error
    # whose hint was to give those very flags
    flags = ["estimate", "--model", "Qwen/Qwen2.5-0.5B", "--gpu", "lab-box", "--peak-tflops", "100",
             "--memory-gib", "24", "--examples", "100", "--tokens-per-example", "256"]
    d = run_json([*flags, "--bandwidth-gbs", "900"], capsys)
    assert d["gpu"] == "lab-box" and d["memory_capacity_gib"] == 24 and d["cost_usd"] is None
    assert main(flags) == 2  # a figure missing: still the unknown name
    assert "gpu: unknown GPU 'lab-box'" in capsys.readouterr().err


def test_catalog_listings(capsys):
    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert len(models) >= 100
    # real layer counts, never the internal "all layers" marker
    assert all(m["n_attention_layers"] >= 0 and m["n_dense_mlp_layers"] >= 0 for m in models)
    by = {m["name"]: m for m in models}
    llama = by["meta-llama/Llama-3.1-8B"]
    assert llama["n_attention_layers"] == llama["n_dense_mlp_layers"] == llama["n_layers"] == 32
    nh = by["nvidia/Nemotron-H-8B-Base-8K"]  # hybrid: 4 attention layers of 52 (its layer pattern)
    assert 0 < nh["n_attention_layers"] < nh["n_layers"]
    moe = by["Qwen/Qwen3-30B-A3B"]
    assert moe["n_dense_mlp_layers"] == 0 and moe["n_moe_layers"] == 48
    assert main(["gpus", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)
    assert {"A100-SXM4-80GB", "H100-SXM5-80GB", "L40S-48GB"} <= {g["name"] for g in gpus}


def test_estimate_path_imports_nothing_heavy():
    code = ("import sys; from tuneplan.cli import main; main(['estimate','--model','Qwen/Qwen2.5-0.5B',"
            "'--gpu','L4-24GB','--examples','10','--tokens-per-example','100','--json']);"
            "heavy=[m for m in ('torch','transformers','pandas','sklearn','matplotlib','fastapi','scipy')"
            " if m in sys.modules]; print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


def test_breakdowns_add_up_with_the_shipped_calibration(capsys):
    for method, master, fits in (("full", "fp32", False), ("full", "none", True), ("lora", "auto", True)):
        d = run_json(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", method, "--gpu",
                      "A100-SXM4-80GB", "--examples", "1000", "--tokens-per-example", "512", "--micro-batch", "1",
                      "--master-weights", master], capsys)
        # 16 bytes/param of an 8B full fine-tune with an fp32 master never fits 80 GB; 8 in place do
        assert d["fits"] is fits
        assert sum(d["memory_breakdown_gib"].values()) == pytest.approx(d["memory_per_gpu_gib"], rel=1e-9)
        parts = {k: v for k, v in d["step_breakdown_s"].items() if k != "total"}
        assert sum(parts.values()) == pytest.approx(d["step_time_s"], rel=1e-9)


def test_assumptions_name_the_adapter_terms_only_for_adapters(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--tokens", "1e6",
            "--seq-len", "512"]
    lines = {m: [a for a in run_json(base + ["--method", m], capsys)["assumptions"] if a.startswith("Adapters:")]
             for m in ("lora", "dora", "full")}
    assert "16 small kernels" in lines["lora"][0] and "56 small kernels" in lines["dora"][0]
    assert lines["full"] == []


@pytest.mark.parametrize("method", ["lora", "full"])
def test_both_peaks_in_json_and_table(method, capsys):
    """The allocated peak is the tensors' parts, the reserved peak adds the allocator's part, and
    nvidia-smi's (memory_per_gpu_gib) adds the CUDA context: each figure from the breakdown by hand."""
    d = run_json(BASE[:4] + [method] + BASE[5:], capsys)
    parts = dict(d["memory_breakdown_gib"])
    after = parts.pop("allocator", 0.0), parts.pop("cuda_context", 0.0), parts.pop("variable_shape", 0.0)
    assert d["memory_allocated_gib"] == pytest.approx(sum(parts.values()), rel=1e-9)
    assert d["memory_reserved_gib"] == pytest.approx(d["memory_allocated_gib"] + after[0] + after[2], rel=1e-9)
    assert d["memory_per_gpu_gib"] == pytest.approx(d["memory_reserved_gib"] + after[1], rel=1e-9)
    assert 0 < d["memory_allocated_gib"] < d["memory_reserved_gib"] < d["memory_per_gpu_gib"]
    assert main(BASE[:4] + [method] + BASE[5:]) == 0
    out = capsys.readouterr().out
    for label, key in (("allocated", "memory_allocated_gib"), ("reserved", "memory_reserved_gib")):
        assert re.search(rf"peak {label} \(torch\)\s*│\s*{re.escape(f'{d[key]:,.2f}')} │", out)


def test_estimators_without_the_memory_model_say_no_peaks_or_both(capsys):
    for est in ("kavier", "xia"):
        d = run_json(BASE + ["--estimator", est], capsys)
        assert {"memory_allocated_gib", "memory_reserved_gib"} <= set(d)
        a, r = d["memory_allocated_gib"], d["memory_reserved_gib"]
        assert (a is None) == (r is None)
        if a is not None:
            assert a <= r <= d["memory_per_gpu_gib"]


@pytest.mark.parametrize("argv,message", [
    (["estimate", "--model", "Qwen2.5-0.5B", "--gpu", "H100-SXM5-80GB", "--interval", "1"],
     "tuneplan estimate: error: interval: must be between 0 and 1 (got 1.0)"),
    (["plan", "--model", "Qwen2.5-0.5B", "--interval", "-0.5"],
     "tuneplan plan: error: interval: must be between 0 and 1 (got -0.5)"),
    (["predict", "--runs", "x.csv", "--out", "y.csv", "--interval", "2"],
     "tuneplan predict: error: interval: must be between 0 and 1, or 0 for none (got 2.0)"),
])
def test_interval_is_checked_alike_by_every_command(argv, message, capsys):
    """One check (commands.common.check_interval) behind each command's --interval, before any work."""
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == message


def test_unknown_flag_names_its_command(capsys):
    # argparse said "tuneplan: error: unrecognized arguments", not which command's flags to look up
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--runs", "r.csv", "--out", "c.json", "--calibration", "c0.json"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == ("tuneplan calibrate: error: unrecognized arguments: --calibration c0.json "
                                       "(`tuneplan calibrate --help` lists the flags)\n")
