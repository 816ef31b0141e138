"""The web API's request bodies (pydantic): what `POST /api/estimate` and `POST /api/plan` accept,
with the bounds that keep an absurd request from reaching the planner. The job's fields are generated
from JobSpec's options (`tuneplan.specs.job.option`): their type, bounds (specs/limits.py JOB_BOUNDS)
and help text; a request field is named as the CLI flag (`rate`, `peft_option`)."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from tuneplan.commands.common import plain_type
from tuneplan.plan.options import PLAN_OPTIONS, PlanOption
from tuneplan.specs.job import Option, job_options, plan_axes
from tuneplan.specs.limits import JOB_BOUNDS

ESTIMATORS = ("tuneplan", "kavier", "xia", "planner")
"""The estimators the page offers (slst needs a calibration file of its own)."""
DEFAULT_INTERVAL = 0.8
"""Interval coverage when a request gives none (the CLI's default)."""
UNBOUNDED = 1e12
"""Upper bound of a job number JOB_BOUNDS does not bound (a request is refused above it)."""
MAX_LIST = 64
"""Most values of a repeatable option (`peft_option`)."""

Float = Annotated[float, Field(allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=300)]
Targets = Annotated[str, Field(min_length=1, max_length=400, pattern=r"^[A-Za-z0-9_,\- ]+$")]
"""Comma-separated module names (`lora_targets`), as the CLI flag takes them."""


def _request_type(name: str, opt: Option) -> Any:
    """A JobSpec option's type in a request: numbers with their bounds (positive, or zero and up, at
    most JOB_BOUNDS'), Literal choices as declared, names and module lists of bounded length."""
    extra = opt.extra
    kind = plain_type(opt.type)
    low = {"gt": 0} if extra.get("number", "positive") == "positive" else {"ge": 0}
    upper = JOB_BOUNDS.get(name, UNBOUNDED)
    if extra.get("repeat"):
        return Annotated[list[Name], Field(max_length=MAX_LIST)]
    if kind is int:
        return Annotated[int, Field(**low, le=int(upper))]
    if kind is float:
        return Annotated[Float, Field(**low, le=upper)]
    if kind is bool or typing.get_origin(kind) is Literal:
        return kind
    if typing.get_origin(kind) is tuple:
        return Targets
    return Name


def request_name(name: str) -> str:
    """The request field of a JobSpec option: its CLI flag's name (`rate` for rate_usd_per_gpu_hour)."""
    return (job_options()[name].extra.get("flag") or name).replace("-", "_")


def _job_model(title: str, names: tuple[str, ...]) -> type[BaseModel]:
    """A request model with these JobSpec options, each optional (absent: JobSpec's default)."""
    opts = job_options()
    fields = {request_name(n): (_request_type(n, opts[n]) | None, Field(None, description=opts[n].help))
              for n in names}
    return create_model(title, __doc__=f"JobSpec's options: {title}.", **fields)


ESTIMATE_JOB = {request_name(n): n for n in job_options()}
"""Request field -> JobSpec field of every option `POST /api/estimate` takes."""
PLAN_JOB = {request_name(n): n for n in job_options() if n not in plan_axes()}
"""Request field -> JobSpec field of the options `POST /api/plan` takes (the planner searches the rest)."""
JobOptions = _job_model("JobOptions", tuple(ESTIMATE_JOB.values()))
PlanJobOptions = _job_model("PlanJobOptions", tuple(PLAN_JOB.values()))


class ModelChoice(BaseModel):
    """A model: a catalog name, or a pasted config.json (with an optional display name)."""

    model: Name | None = Field(None, description="catalog name or alias, e.g. Qwen/Qwen2.5-7B",
                               examples=["Qwen/Qwen2.5-7B"])
    config_json: dict[str, Any] | None = Field(
        None, description="a pasted Hugging Face config.json, instead of `model`")
    config_name: Annotated[str, Field(max_length=200)] | None = Field(
        None, description="display name for a pasted config (default: custom-model)")

    @model_validator(mode="after")
    def _one_model(self) -> ModelChoice:
        if self.model is None and self.config_json is None:
            raise ValueError("give `model` (a catalog name) or `config_json` (a pasted config.json)")
        if self.model is not None and self.config_json is not None:
            raise ValueError("give `model` or `config_json`, not both")
        return self


class RunFields(BaseModel):
    """What an estimate and a plan both take besides the job: the price's provider, the interval."""

    provider: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        None, description="take the price from this provider (see /api/options)")
    interval: Annotated[Float, Field(ge=0, lt=1)] | None = Field(
        None, description="interval coverage (default 0.8; 0 for none)")


class EstimateRequest(ModelChoice, JobOptions, RunFields):
    """`POST /api/estimate`: the inputs of `tuneplan estimate`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "model": "Qwen/Qwen2.5-7B", "gpu": "H100-SXM5-80GB", "method": "lora", "gpus": 1,
        "examples": 10000, "tokens_per_example": 512, "epochs": 1}]})

    gpu: Name | None = Field(None, description="catalog GPU name, e.g. H100-SXM5-80GB")
    peak_tflops: Annotated[Float, Field(gt=0, le=1e7)] | None = Field(
        None, description="one-off dense peak TFLOP/s (overrides the catalog GPU's)")
    memory_gib: Annotated[Float, Field(gt=0, le=1e7)] | None = Field(None, description="one-off memory, GiB")
    bandwidth_gbs: Annotated[Float, Field(gt=0, le=1e8)] | None = Field(
        None, description="one-off memory bandwidth, GB/s")
    ckpt_mode: Literal["none", "selective", "full", "offload"] | None = Field(
        None, description="activation checkpointing mode (overrides grad_ckpt): none, selective, full, offload")
    estimator: Literal[ESTIMATORS] = "tuneplan"

    @model_validator(mode="after")
    def _gpu_given(self) -> EstimateRequest:
        missing = [n for n in ("peak_tflops", "memory_gib", "bandwidth_gbs") if getattr(self, n) is None]
        if self.gpu is None and missing:
            raise ValueError("give `gpu` (a catalog name) or all of peak_tflops, memory_gib and "
                             f"bandwidth_gbs for your own GPU (missing: {', '.join(missing)})")
        return self


def _plan_type(o: PlanOption) -> Any:
    """A plan option's type in a request: a bounded list (of its choices, names or positive integers),
    a positive number at most its `upper`, one of its choices, or a switch."""
    if o.kind in ("names", "ints"):
        item = Literal[o.choices] if o.choices else Name if o.kind == "names" else Annotated[int, Field(ge=1, le=o.upper)]
        return Annotated[list[item], Field(max_length=o.most)]
    if o.kind == "int":
        return Annotated[int, Field(ge=1, le=int(o.upper))]
    return {"choice": Literal[o.choices], "bool": bool}.get(o.kind, Annotated[Float, Field(gt=0, le=o.upper)])


PLAN_FIELDS = {o.field: o for o in PLAN_OPTIONS if o.field}
"""Request field -> plan option (plan/options.py) of the search and the question a plan request takes."""
PlanOptions = create_model("PlanOptions", __doc__="The plan's search and question (plan/options.py).", **{
    f: (_plan_type(o) | None if o.default is None else _plan_type(o), Field(o.default, description=o.help))
    for f, o in PLAN_FIELDS.items()})


class PlanRequest(ModelChoice, PlanOptions, PlanJobOptions, RunFields):
    """`POST /api/plan`: the inputs of `tuneplan plan` (a search over GPU type x count x method x batch)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "model": "Qwen/Qwen2.5-7B", "gpus": ["A100-SXM4-80GB", "H100-SXM5-80GB"], "methods": ["lora", "qlora"],
        "max_gpus": 8, "examples": 10000, "tokens_per_example": 512, "epochs": 1, "objective": "cheapest"}]})

    max_candidates: Annotated[int, Field(ge=1, le=5000)] = Field(
        200, description="candidates returned, best first (all are searched; `points` has the best of "
                         "each GPU type x count x method)")


class ModelConfigRequest(BaseModel):
    """`POST /api/model-config`: a pasted config.json to read."""

    model_config = ConfigDict(extra="forbid")
    config_json: dict[str, Any]
    config_name: Annotated[str, Field(max_length=200)] | None = None
