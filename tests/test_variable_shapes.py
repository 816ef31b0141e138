"""Batches padded to their longest sample (`--padding longest`): the caching allocator's extra reserved
memory, and how runs files and the CLI carry the setting."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import reference_dir, tiny_llama_config

from tuneplan.errors import InputError
from tuneplan.physics.constants import DEFAULT_CONSTANTS
from tuneplan.physics.memory import memory
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.architectures import model_from_config
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]


def mem(job, c=DEFAULT_CONSTANTS, seq=256):
    m = model_from_config(tiny_llama_config(num_hidden_layers=4), "tiny")
    out = memory(build_arrays([(m, H100, job, seq)]), c)
    return {k: float(np.asarray(v)[0]) for k, v in out.items()}


def test_padding_to_longest_reserves_one_more_set_of_transients():
    fixed = mem(make_job(method="lora", gpus=1, padding="max"))
    varied = mem(make_job(method="lora", gpus=1, padding="longest"))
    # allocated (the longest batch's peak) is unchanged; reserved holds the transients once more
    assert varied["allocated_gib"] == pytest.approx(fixed["allocated_gib"])
    transients = fixed["activations_gib"] + fixed["logits_gib"]
    assert transients > 0
    assert varied["reserved_gib"] - fixed["reserved_gib"] == pytest.approx(
        DEFAULT_CONSTANTS.variable_shape_reserve * transients)
    assert varied["nvidia_smi_gib"] - varied["reserved_gib"] == pytest.approx(fixed["nvidia_smi_gib"] - fixed["reserved_gib"])
    # the constant scales it linearly; 0 removes it
    half = mem(make_job(method="lora", gpus=1, padding="longest"), DEFAULT_CONSTANTS.with_(variable_shape_reserve=0.5))
    assert half["reserved_gib"] - fixed["reserved_gib"] == pytest.approx(0.5 * transients)


def test_packing_or_max_padding_keeps_shapes_fixed():
    assert not make_job(method="lora", padding="max").variable_shapes()
    assert make_job(method="lora").variable_shapes()  # hf-trainer's default (no framework given): longest
    assert make_job(method="lora", padding="longest").variable_shapes()
    assert not make_job(method="lora", padding="longest", packing=True).variable_shapes()
    packed = mem(make_job(method="lora", gpus=1, padding="longest", packing=True))
    fixed = mem(make_job(method="lora", gpus=1, padding="max"))
    assert packed["reserved_gib"] == pytest.approx(fixed["reserved_gib"])


def test_unknown_padding_is_a_named_error():
    with pytest.raises(InputError) as exc:
        make_job(method="lora", padding="shortest")
    assert "padding" in str(exc.value) and "longest" in str(exc.value)


def test_runs_rows_carry_padding_and_bad_values_are_reported():
    from tuneplan.learn.dataset import row_to_config

    base = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": 512,
            "micro_batch_size": 1, "gpus": 1}
    assert row_to_config(base).job.padding == "max"
    assert row_to_config({**base, "padding": "longest"}).job.variable_shapes()
    with pytest.raises(InputError, match="padding"):
        row_to_config({**base, "padding": "ragged"})


def test_cli_padding_flag(capsys):
    from tuneplan.cli import main

    args = ["estimate", "--model", "meta-llama/Llama-3.2-1B", "--method", "lora", "--gpu", "H100-SXM5-80GB",
            "--examples", "1000", "--tokens-per-example", "300", "--seq-len", "1024", "--json",
            "--calibration", "none"]  # the term itself (a calibration's learned correction also sees the setting)
    import json

    assert main(args + ["--padding", "max"]) == 0
    fixed = json.loads(capsys.readouterr().out)
    assert main(args + ["--padding", "longest"]) == 0
    varied = json.loads(capsys.readouterr().out)
    fb, vb = fixed["memory_breakdown_gib"], varied["memory_breakdown_gib"]
    assert {k: v for k, v in vb.items() if k != "allocator"} == pytest.approx(
        {k: v for k, v in fb.items() if k != "allocator"})  # allocated parts unchanged
    assert vb["allocator"] > fb["allocator"]
    assert varied["memory_per_gpu_gib"] - fixed["memory_per_gpu_gib"] == pytest.approx(
        vb["allocator"] - fb["allocator"])
    assert any("longest" in a for a in varied["assumptions"])
    with pytest.raises(SystemExit) as exc:
        main(args + ["--padding", "shortest"])
    assert exc.value.code == 2


@pytest.mark.skipif(reference_dir() is None, reason="shared reference runs not beside the checkout")
def test_ms_swift_micro_benchmarks_default_to_longest_padding():
    """ms-swift's Jan-2024 tables keep samples whole up to max_length and pad each batch to its longest;
    its packing rows and the Dec-2023 tables are not marked."""
    from tuneplan.runs.io import read_runs

    df = read_runs(reference_dir() / "ms-swift.csv").df
    longest = df[df["padding"] == "longest"]
    assert len(longest) > 100
    assert longest["defaults_used"].str.contains("padding=longest").all()
    assert not df[df["notes"].str.contains("packing", na=False)]["padding"].eq("longest").any()
    old = read_runs(reference_dir() / "ms-swift-2023v1.csv").df
    assert not old["padding"].eq("longest").any()


def test_web_estimate_takes_padding():
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    c = TestClient(create_app(warm_up=False))
    assert c.get("/api/options").json()["paddings"] == ["max", "longest"]
    body = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "examples": 1000,
            "tokens_per_example": 300, "seq_len": 1024}
    fixed = c.post("/api/estimate", json={**body, "padding": "max"}).json()
    varied = c.post("/api/estimate", json={**body, "padding": "longest"}).json()
    assert varied["memory_per_gpu_gib"] > fixed["memory_per_gpu_gib"]
    assert "--padding longest" in varied["command"]
    assert c.post("/api/estimate", json={**body, "padding": "ragged"}).status_code == 422


def test_runs_rows_say_what_their_memory_measures():
    from tuneplan.learn.dataset import arrays_for, row_to_config

    base = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": 512,
            "micro_batch_size": 1, "gpus": 1}
    cfgs = [row_to_config({**base, "mem_kind": k}) for k in ("allocated", "reserved", "nvidia-smi", "")]
    assert arrays_for(cfgs)["reports_reserved"].tolist() == [0.0, 1.0, 1.0, 1.0]


def test_the_assumption_says_which_bound_the_length_is():
    """Padded to its batch's longest example: --seq-len is the upper bound of what a batch runs at; a mean
    tokens per example is a lower one, and the assumption says so (not "the upper bound")."""
    from tuneplan.physics.run import workload, workload_assumptions

    given = make_job(method="lora", padding="longest", examples=100, tokens_per_example=300, seq_len=2048)
    mean = make_job(method="lora", padding="longest", examples=100, tokens_per_example=300)
    text_given = workload_assumptions(given, workload(given))[0]
    text_mean = workload_assumptions(mean, workload(mean))[0]
    assert "compute assumes the expected longest of" in text_given
    fixed = make_job(method="lora", padding="longest", examples=100, seq_len=2048)
    assert "compute assumes seq_len, the upper bound" in workload_assumptions(fixed, workload(fixed))[0]
    assert "the mean length, a lower bound" in text_mean and "upper bound" not in text_mean.split("--seq-len")[0]


def test_a_batch_runs_at_its_expected_longest_example():
    """Padded to its batch's longest: lengths spread evenly about the mean over [max(0, 2 mean - cap),
    min(cap, 2 mean)], the longest of k averages lo + (hi - lo) k / (k + 1). A mean of 800 under a 2,048
    cap: uniform on [0, 1600]; one example 800 (not padded), two 1066.7, seven 1400. A mean of 1,500:
    [952, 2048], three 952 + 1096 x 3/4 = 1774."""
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
    from tuneplan.physics.run import batch_lengths, longest_of

    assert longest_of(800.0, 2048.0, np.array([1.0, 2.0, 7.0])) == pytest.approx([800.0, 3200 / 3, 1400.0])
    assert longest_of(1500.0, 2048.0, 3.0) == pytest.approx(1774.0)
    assert longest_of(2048.0, 2048.0, 8.0) == 2048.0  # fixed lengths: the cap
    m = model_from_config(tiny_llama_config(num_hidden_layers=4), "tiny")
    job = make_job(method="lora", gpus=1, micro_batch=1, grad_accum=4, padding="longest", seq_len=2048,
                   tokens_per_example=800, examples=100)
    assert job.length_gap() == 1248
    assert job.updated(padding="max").length_gap() == 0 and job.updated(packing=True).length_gap() == 0
    a = build_arrays([(m, H100, job, 2048)])
    run, mean = batch_lengths(a)
    assert (run["seq_len"][0], run["attn_span"][0], run["attn_keys"][0], mean[0]) == (800, 800, 400, 800)
    # one example of 800 tokens under a 2,048 cap: the step of an 800-token sequence; memory at the cap
    short = build_arrays([(m, H100, job.updated(seq_len=800), 800)])
    est = TuneplanEstimator()
    p, q = est.physics(a), est.physics(short)
    assert p["step_s"][0] == pytest.approx(q["step_s"][0])
    assert p["tokens_per_step"][0] == pytest.approx(4 * 800)
    assert p["allocated_gib"][0] > q["allocated_gib"][0]
    # two a batch: 1066.7 tokens computed per example, 800 counted
    two = job.updated(micro_batch=2)
    p2, at = est.physics(build_arrays([(m, H100, two, 2048)])), build_arrays([(m, H100, two.updated(
        seq_len=1067, tokens_per_example=1067), 1067)])
    assert batch_lengths(build_arrays([(m, H100, two, 2048)]))[0]["seq_len"][0] == pytest.approx(3200 / 3)
    assert p2["tokens_per_step"][0] == pytest.approx(2 * 4 * 800)
    assert p2["step_s"][0] == pytest.approx(est.physics(at)["step_s"][0], rel=2e-3)


def test_runs_rows_carry_their_mean_length():
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": 2048,
           "avg_tokens_per_sample": 844, "micro_batch_size": 1, "gpus": 1, "padding": "longest"}
    assert row_to_config(row).job.length_gap() == 2048 - 844
    assert row_to_config({**row, "avg_tokens_per_sample": 4000}).job.tokens_per_example == 2048  # at most the cap
    assert row_to_config({**row, "padding": "max"}).job.length_gap() == 0
