"""JobSpec (a frozen dataclass checked as it is built): one-line errors naming the field and the
allowed values, the fields given, changed copies, options declared once for the CLI, the web API and
the plan, and the estimate's tables when the output is not a terminal."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from tuneplan.errors import InputError
from tuneplan.specs.job import JOB_GROUPS, METHODS, JobSpec, job_fields, job_options, make_job


def test_fields_given_copies_and_records():
    j = make_job(method="lora", examples=1000, seq_len=512, lora_targets="q,v")
    assert {"method", "examples", "seq_len", "lora_targets"} <= j.given  # and the framework defaults make_job filled
    assert j.lora_targets == ("q", "v") and j.examples == 1000.0 and isinstance(j.examples, float)
    d = dataclasses.asdict(j)
    assert list(d) == list(job_fields()) and JobSpec(**d) == j and JobSpec(**d).given == set(d)
    c = j.updated(micro_batch=8)
    assert c.micro_batch == 8 and j.micro_batch == 4 and c.given == j.given | {"micro_batch"}
    assert hash(make_job(method="lora", examples=1000, seq_len=512, lora_targets="q,v")) == hash(j)
    assert pickle.loads(pickle.dumps(j)) == j and copy.deepcopy(j) == j
    assert pickle.loads(pickle.dumps(j)).given == j.given
    with pytest.raises(dataclasses.FrozenInstanceError):
        j.micro_batch = 2
    with pytest.raises(TypeError):
        j.updated(micro_bach=8)
    f = job_options()["micro_batch"]
    assert f.default == 4 and f.type is int and f.extra["group"] == "batch and sequence"
    assert "save_final" in job_fields() and "save_final" not in job_options()


def test_a_derived_copy_is_not_checked_again():
    """An RL job's reward-model pass is an sft job with the RL job's options left on (`updated`)."""
    rl = make_job(stage="grpo", group_size=4, method="lora")
    reward = rl.updated(method="full", stage="sft")
    assert reward.stage == "sft" and reward.group_size == 4
    with pytest.raises(InputError, match="group-size applies to the RL stages"):
        JobSpec(**dataclasses.asdict(reward))


def test_text_values_are_read_as_their_type():
    """A config file or a form hands numbers and switches as text: read as the field's type."""
    j = make_job(micro_batch="8", epochs="2.5", packing="yes", grad_ckpt="selective", method="LoRA")
    assert (j.micro_batch, j.epochs, j.packing, j.checkpointing, j.method) == (8, 2.5, True, "selective", "lora")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"micro_batch": 0}, "micro-batch: must be a positive integer"),
    ({"micro_batch": 2.5}, "micro-batch: '2.5' is not a valid integer"),
    ({"micro_batch": True}, "micro-batch: 'True' is a switch, not an integer"),  # was read as 1
    ({"method": "zz"}, "method: unknown value 'zz' (allowed: full, lora,"),
    ({"sharding": "zero9"}, "sharding: unknown value 'zero9' (allowed: none, ddp, zero1,"),
    ({"grad_ckpt": "zz"}, "grad-ckpt: unknown mode 'zz' (allowed: none, selective, full, offload)"),
    ({"gpus": 3, "nodes": 2}, "job: gpus (3) must be divisible by nodes (2)"),
    ({"lora_targets": ("q", 1)}, "lora-targets: item 2: '1' is not text"),
    ({"zz": 1}, "zz: unknown job option 'zz'"),
    ({"micro_bach": 1}, "micro_bach: unknown job option 'micro_bach'; closest: micro_batch"),
    ({"seq_len": "abc"}, "seq-len: 'abc' is not a valid integer"),
    ({"epochs": "many"}, "epochs: 'many' is not a valid number"),
    ({"packing": "maybe"}, "packing: 'maybe' is not a valid switch (allowed: true, false)"),
    ({"framework": "zz"}, "framework: unknown framework 'zz'"),
    ({"quant": "int3"}, "quant: unknown quantisation 'int3' (allowed: none, int8, nf4,"),
    ({"epochs": 1e308}, "epochs: 1e+308 is beyond any physical fine-tuning run"),
    ({"group_size": 4}, "job: group-size applies to the RL stages (grpo, ppo, rloo, online-dpo, xpo, nash-md), not --stage sft"),
])
def test_errors_are_one_line_naming_the_field(kwargs, message):
    with pytest.raises(InputError) as exc:
        make_job(**kwargs)
    text = str(exc.value)
    assert text.startswith(message) and "\n" not in text


def test_allowed_values_are_the_literal_choices():
    with pytest.raises(InputError) as exc:
        make_job(method="zz")
    assert exc.value.field == "method" and exc.value.allowed == list(METHODS)


def test_every_option_has_a_concern_group():
    """Each job option declares its group (its section of --help, of the web form's request model and
    of docs/architecture.md's list): one of the named concerns."""
    groups = {n: o.extra["group"] for n, o in job_options().items()}
    assert groups and set(groups.values()) <= set(JOB_GROUPS)
    assert groups["micro_batch"] == "batch and sequence" and groups["tp"] == "parallelism"
    assert groups["precision"] == "precision" and groups["stage"] == "stage (preference and RL fine-tuning)"
    assert groups["rate_usd_per_gpu_hour"] == "work and money"


def test_piped_estimate_tables_are_whole(monkeypatch):
    """Not a terminal: the tables take their content's width; no header or cell is cut at 80 columns."""
    import io

    import tuneplan
    from tuneplan.report.tables import estimate_text, report_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert report_console(file=io.StringIO()).width > 1000
    monkeypatch.setenv("COLUMNS", "100")  # a width asked for is kept
    assert report_console(file=io.StringIO()).width == 100
    monkeypatch.delenv("COLUMNS")

    r = tuneplan.estimate("meta-llama/Llama-3.1-8B", "A100-SXM4-80GB", method="lora", examples=1000, seq_len=512)
    text = estimate_text(r)
    assert "…" not in text
    assert r.rate_source in text  # the price's source, a long note, on one line
    lines = text.splitlines()
    assert any(line.startswith("┃ figure ") for line in lines)
    assert max(len(line) for line in lines) > 80
    for a in r.assumptions:
        assert f"  - {a}" in lines


def test_an_option_is_declared_once():
    """Every JobSpec option is a CLI flag of estimate, a field of the web's estimate request (named as
    the flag) and, unless the planner searches it (declared with axis=), a field of the plan request and a
    flag of plan."""
    import argparse

    from tuneplan.commands.common import add_job_args
    from tuneplan.commands.common import job_options as cli_options
    from tuneplan.specs.job import plan_axes
    from tuneplan.web.schemas import ESTIMATE_JOB, PLAN_JOB, EstimateRequest, PlanRequest

    opts = job_options()
    assert set(cli_options()) == set(opts)
    assert set(ESTIMATE_JOB.values()) == set(opts) and set(ESTIMATE_JOB) <= set(EstimateRequest.model_fields)
    assert set(PLAN_JOB.values()) == set(opts) - set(plan_axes()) and set(PLAN_JOB) <= set(PlanRequest.model_fields)
    assert ESTIMATE_JOB["rate"] == "rate_usd_per_gpu_hour" and ESTIMATE_JOB["peft_option"] == "peft_options"
    assert {"method", "micro_batch", "sharding", "grad_ckpt", "gpus"} <= set(plan_axes())
    for name, info in opts.items():  # the help text is the field's, everywhere
        web = next(k for k, v in ESTIMATE_JOB.items() if v == name)
        assert EstimateRequest.model_fields[web].description == info.help
    p = argparse.ArgumentParser()
    add_job_args(p, skip=plan_axes())
    flags = {a.dest for a in p._actions}
    assert "micro_batch" not in flags and "lora_rank" in flags and "rate" in flags


def test_web_request_bounds_are_the_job_bounds():
    from pydantic import ValidationError

    from tuneplan.specs.limits import JOB_BOUNDS
    from tuneplan.web.schemas import EstimateRequest

    base = {"model": "Qwen/Qwen2.5-7B", "gpu": "H100-SXM5-80GB"}
    assert EstimateRequest(**base, micro_batch=JOB_BOUNDS["micro_batch"]).micro_batch == JOB_BOUNDS["micro_batch"]
    for bad in ({"micro_batch": JOB_BOUNDS["micro_batch"] + 1}, {"micro_batch": 0}, {"image_size": -1},
                {"epochs": float("inf")}, {"method": "magic"}, {"peft_option": ["r=8"] * 65}):
        with pytest.raises(ValidationError) as exc:
            EstimateRequest(**base, **bad)
        assert exc.value.errors()[0]["loc"][0] == next(iter(bad))
    assert EstimateRequest(**base, image_size=0, rate=0).rate == 0


def test_settings_left_at_tuneplans_defaults_are_said():
    from tuneplan.physics.job_assumptions import job_assumptions

    def said(**kw):
        return [a for a in job_assumptions(make_job(**kw)) if a.startswith("Not given")]

    # nothing given: the method, micro-batch, epochs (with a data size) and the LoRA rank and targets filled in
    assert said(examples=1000, tokens_per_example=500) == [
        "Not given, tuneplan's defaults: method lora, micro-batch 4, 1 epoch, LoRA rank 16, adapters on all-linear "
        "(--method, --micro-batch, --epochs, --lora-rank, --lora-targets set them)."]
    # full fine-tuning has no rank, no data size no epochs; what is given is not said
    assert said(method="full", micro_batch=2, seq_len=512) == []
    assert said(method="full", seq_len=512)[0].startswith("Not given, tuneplan's defaults: micro-batch 4 (")


def test_more_gpus_than_a_server_holds_fill_nodes_of_eight_and_say_so():
    from tuneplan.physics.job_assumptions import job_assumptions
    from tuneplan.specs.job import make_job

    job = make_job(gpus=1024)
    assert job.nodes == 128 and job.gpus_per_node == 8
    assert any("Nodes not given" in a and "128 nodes of 8 GPUs" in a for a in job_assumptions(job))
    assert make_job(gpus=12).nodes == 2  # 2 nodes of 6: the same number on each
    assert make_job(gpus=8).nodes == 1
    stated = make_job(gpus=16, nodes=1)  # a node count given is kept, and not said as filled in
    assert stated.nodes == 1 and not any("Nodes not given" in a for a in job_assumptions(stated))
