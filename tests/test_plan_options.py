"""plan/options.py: each plan option declared once gives the `plan` flag, the web request field and the
workload column, read to the same `plan_run` keywords."""

from __future__ import annotations

import pytest

from tuneplan.cli import build_parser
from tuneplan.commands.plan import plan_kwargs
from tuneplan.errors import InputError
from tuneplan.plan.batch import row_kwargs
from tuneplan.plan.options import PLAN_OPTIONS, plan_values
from tuneplan.web.command_line import plan_kwargs as web_plan_kwargs
from tuneplan.web.schemas import PlanRequest


def _cli(*argv: str) -> dict:
    return plan_kwargs(build_parser("plan").parse_args(["plan", "--model", "m", *argv]))


def test_every_option_is_a_flag_and_a_request_field():
    actions = {s: a for a in build_parser("plan")._subparsers._group_actions[0].choices["plan"]._actions
               for s in a.option_strings}
    for o in PLAN_OPTIONS:
        assert actions[o.flag].dest == o.name and actions[o.flag].default == o.default
        if o.field:
            assert PlanRequest.model_fields[o.field].default == o.default


def test_values_read_to_plan_run_keywords():
    assert plan_values({"deadline": "1h30m", "deadline_h": None, "budget": "$1,200", "grad_ckpt": False,
                        "gpu_counts": [2, 4]}) == {"deadline_s": 5400.0, "budget_usd": 1200.0, "grad_ckpt": (False,),
                                                   "gpu_counts_": [2, 4]}


def test_cli_web_and_workload_agree():
    same = {"gpus": ["H100-SXM5-80GB", "A100-SXM4-80GB"], "methods": ["lora", "qlora"], "max_gpus": 4,
            "deadline_s": 9000.0, "budget_usd": 300.0, "objective": "fastest", "global_batch": 16}
    cli = _cli("--gpus", "H100-SXM5-80GB,A100-SXM4-80GB", "--method", "lora;qlora", "--max-gpus", "4",
               "--deadline-h", "2.5", "--budget-usd", "300", "--objective", "fastest", "--global-batch", "16")
    web = web_plan_kwargs(PlanRequest(model="m", gpus=["H100-SXM5-80GB", "A100-SXM4-80GB"], methods=["lora", "qlora"],
                                      max_gpus=4, deadline_h=2.5, budget_usd=300, objective="fastest", global_batch=16))
    row = row_kwargs({"Model": "m", "GPUs": "H100-SXM5-80GB|A100-SXM4-80GB", "method": "lora;qlora", "max-gpus": "4",
                      "deadline_h": "2.5", "budget_usd": "$300", "objective": " fastest", "global_batch": "16"}, {})
    for kw in (cli, web, row):
        assert {k: kw[k] for k in same} == same


def test_workload_gpus_count_and_errors():
    assert row_kwargs({"model": "m", "gpus": "8", "max_gpus": "2"}, {})["max_gpus"] == 8  # a count: the largest
    assert row_kwargs({"model": "m", "gpu": "L40S-48GB"}, {})["gpus"] == ["L40S-48GB"]
    assert row_kwargs({"model": "m", "deadline": "2h", "deadline_h": "9"}, {})["deadline_s"] == 7200.0
    with pytest.raises(InputError, match="max-gpus: 'x' is not a number"):
        row_kwargs({"model": "m", "max_gpus": "x"}, {})
