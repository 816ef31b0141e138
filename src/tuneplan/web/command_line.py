"""The command line equivalent to a web request (`tuneplan estimate ...`, `tuneplan plan ...`), and a
plan request's `plan_run` keyword arguments and search size."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from tuneplan.plan.options import plan_values
from tuneplan.runs.table import cell_str
from tuneplan.specs.job import job_fields, job_options
from tuneplan.web.schemas import (
    DEFAULT_INTERVAL,
    ESTIMATE_JOB,
    PLAN_FIELDS,
    PLAN_JOB,
    EstimateRequest,
    ModelChoice,
    PlanRequest,
)

JOB_DEFAULTS = {n: f.default for n, f in job_fields().items()}


def _is_default(name: str, value: Any) -> bool:
    d = JOB_DEFAULTS.get(name, object())
    if name == "lora_targets" and isinstance(value, str):
        return tuple(t.strip() for t in value.split(",") if t.strip()) == tuple(d)
    if isinstance(d, float) and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) == d
    return value == d


FLAGS = {"ckpt_mode": "grad-ckpt"} | {f: o.flag.removeprefix("--") for f, o in PLAN_FIELDS.items()}
"""Request fields whose CLI flag has another name than JobSpec's or the field's own (with dashes)."""


def _flags(req: Any, names: Iterable[str], job: dict[str, str]) -> list[str]:
    """`--flag value` of each of these request fields that is set and not at its default (JobSpec's for
    the `job` fields {request field: JobSpec field}, the request model's, the CLI's interval), as the CLI
    reads it: a switch (and its --no- form unless JobSpec declares it switch-only), a flag repeated per
    value or a comma-separated list, a number or a name."""
    out: list[str] = []
    for name in names:
        v, field = getattr(req, name), job.get(name)
        extra = job_options()[field].extra if field else {}
        if v in (None, []) or (_is_default(field, v) if field else v == type(req).model_fields[name].default
                               or (name == "interval" and v == DEFAULT_INTERVAL)):
            continue
        flag = "--" + (extra.get("flag") or FLAGS.get(name, name).replace("_", "-"))
        if isinstance(v, bool):
            out += [flag if v else "--no-" + flag[2:]] if v or not extra.get("switch_only") else []
        elif extra.get("repeat"):
            out += [x for item in v for x in (flag, str(item))]
        else:
            out += [flag, ",".join(map(str, v)) if isinstance(v, list) else cell_str(v)]
    return out


def _model_flags(req: ModelChoice) -> tuple[list[str], str]:
    if req.config_json is not None:
        return ["--model", "config.json"], "save the pasted config as config.json in the current folder first"
    return ["--model", str(req.model)], ""


def estimate_command(req: EstimateRequest) -> tuple[str, str]:
    """The `tuneplan estimate ...` command line for a request, and a note when it needs a file."""
    args, note = _model_flags(req)
    args += _flags(req, ("gpu", "peak_tflops", "memory_gib", "bandwidth_gbs", "estimator", "interval",
                         *(n for n in ESTIMATE_JOB if n != "rate"), "ckpt_mode", "rate", "provider"),
                   ESTIMATE_JOB)
    return shlex.join(["tuneplan", "estimate", *args]), note


def plan_command(req: PlanRequest) -> tuple[str, str]:
    """The `tuneplan plan ...` command line for a request."""
    args, note = _model_flags(req)
    args += _flags(req, (*PLAN_FIELDS, "interval", *(n for n in PLAN_JOB if n != "rate"), "rate", "provider"), PLAN_JOB)
    return shlex.join(["tuneplan", "plan", *args]), note


def plan_kwargs(req: PlanRequest) -> dict[str, Any]:
    """`tuneplan.plan.search.plan` keyword arguments for a request (the model apart)."""
    kw: dict[str, Any] = {"interval": DEFAULT_INTERVAL if req.interval is None else (req.interval or None)}
    kw |= plan_values({o.name: v for f, o in PLAN_FIELDS.items() if (v := getattr(req, f)) != []})  # []: the default
    kw |= {field: v for name, field in PLAN_JOB.items() if name != "rate" and (v := getattr(req, name)) is not None}
    if req.rate is not None:  # a rate given replaces the provider's price
        kw["rate"] = req.rate
    elif req.provider is not None:
        kw["provider"] = req.provider
    return kw


def plan_space_size(req: PlanRequest) -> int:
    """How many configurations the planner would enumerate for a request (before it drops the invalid
    ones): GPU types x counts x methods x micro-batches x gradient accumulations x shardings x
    checkpointing, as `tuneplan.plan.space.enumerate_grid` lays them out."""
    from tuneplan.plan.search import DEFAULT_METHODS, default_gpus
    from tuneplan.plan.space import DEFAULT_MICRO_BATCHES, DEFAULT_SHARDINGS, GPUS_PER_NODE, gpu_counts

    def n(given: list | None, default) -> int:
        return len(set(given)) if given else len(default())

    return (n(req.gpus, default_gpus) * n(req.methods, lambda: DEFAULT_METHODS)
            * n(req.gpu_counts, lambda: gpu_counts(req.max_gpus, req.gpus_per_node or GPUS_PER_NODE))
            * n(req.micro_batches, lambda: DEFAULT_MICRO_BATCHES) * n(req.grad_accums, lambda: [1])
            * n(req.shardings, lambda: DEFAULT_SHARDINGS) * (1 if req.grad_ckpt is not None else 2))
