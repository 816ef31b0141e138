"""The web planner's FastAPI app: the page at `/`, its static files, and the JSON API it calls.

Endpoints (all documented by FastAPI at `/docs` and `/openapi.json`):

- `GET /healthz` — liveness.
- `GET /api/options` — the closed sets and defaults the form offers (methods, precisions, providers...).
- `GET /api/models?q=&limit=` — the model catalog (search by substring).
- `GET /api/gpus` — the GPU catalog with the cheapest on-demand price of each.
- `POST /api/model-config` — read a pasted config.json: parameter counts, shapes.
- `POST /api/estimate` — one run: `tuneplan.estimate(...).to_dict()` plus the equivalent command line.
- `POST /api/plan` — the planner's search: `tuneplan.plan_run(...).to_dict()` plus the command line.

Every bad input answers 422 with `{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`: pydantic's own
checks on the request bodies, tuneplan's `InputError` (field, reason, allowed values) from deeper down,
and arithmetic that a valid-looking but absurd configuration breaks. A search over an absurd space is
refused before it starts. The page itself (`static/`) needs no network: its chart library is vendored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import shlex
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tuneplan import __version__
from tuneplan.errors import InputError, TuneplanError, UnknownNameError
from tuneplan.plan.objectives import OBJECTIVES
from tuneplan.specs.job import (
    ADAPTER_DTYPES,
    LORA_FAMILY,
    MASTER_WEIGHTS,
    METHODS,
    MOE_MODES,
    OPTIMIZERS,
    PADDINGS,
    PRECISIONS,
    QUANTS,
    ROLLOUT_ENGINES,
    SHARDINGS,
    STAGES,
    JobSpec,
    Method,
    Optimizer,
    Precision,
    Sharding,
)

log = logging.getLogger("tuneplan.web")

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_BODY_BYTES = 2 * 1024 * 1024
"""Largest request body accepted (a pasted config.json is a few KiB; 2 MiB leaves room)."""
MAX_PLAN_CONFIGS = 100_000
"""Most configurations one plan request may enumerate (GPU types x counts x methods x micro-batches x
gradient accumulations x shardings x checkpointing): about 3 s and 200 MB on a 2-core machine (the
planner's cost grows faster than linearly beyond: 300,000 took minutes and 2 GB). Every priced GPU x
all seven methods x up to 8 GPUs is about 18,000; up to 1024 GPUs about 50,000."""
ESTIMATORS = ("tuneplan", "kavier", "xia", "planner")
DEFAULT_INTERVAL = 0.8
"""Interval coverage when a request gives none (the CLI's default)."""

# ----------------------------------------------------------------------------------------------------
# request bodies

Float = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=100_000)]
Degree = Annotated[int, Field(ge=1, le=4096)]
NonNegInt = Annotated[int, Field(ge=0, le=10**12)]
Name = Annotated[str, Field(min_length=1, max_length=300)]
Quant = Literal["none", "int8", "nf4", "gptq-int4", "awq-int4"]

METHOD_FIELDS = ("lora_rank", "lora_targets", "adapter_dtype", "trainable_layers", "precision", "quant", "optimizer",
                 "master_weights", "flash_attn", "moe_mode")
WORK_FIELDS = ("examples", "tokens_per_example", "tokens", "epochs", "seq_len", "packing", "padding", "eval_every",
               "eval_examples", "save_every", "load_time_s", "disk_gbs", "grid_gco2_kwh")
JOB_FIELDS = ("method", "lora_rank", "lora_targets", "adapter_dtype", "trainable_layers", "precision", "quant", "optimizer",
              "master_weights", "grad_ckpt", "flash_attn", "moe_mode", "gpus", "nodes", "sharding", "tp", "pp", "cp", "ep",
              "micro_batch", "grad_accum", "examples", "tokens_per_example", "tokens", "epochs", "seq_len",
              "packing", "padding", "eval_every", "eval_examples", "save_every", "load_time_s", "disk_gbs",
              "grid_gco2_kwh")
"""Request fields passed to JobSpec under the same name (`rate` goes as `rate`, the API's keyword)."""
STAGE_FIELDS = ("stage", "precompute_ref", "group_size", "completion_len", "prompts_per_step", "reward_model",
                "kl_beta", "ppo_epochs")
"""Preference / RL stage fields (docs/stages.md), estimate and plan alike."""
ROLLOUT_FIELDS = ("rollout_engine", "rollout_gpus")
"""RL rollout placement: estimate only (the planner enumerates it)."""
JOB_FIELDS = JOB_FIELDS + STAGE_FIELDS + ROLLOUT_FIELDS


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


class MethodOptions(BaseModel):
    """Options of the method (JobSpec's fields; absent ones take tuneplan's defaults)."""

    lora_rank: Annotated[int, Field(ge=1, le=65_536)] | None = Field(None, description="LoRA rank r (default 16)")
    lora_targets: Annotated[str, Field(min_length=1, max_length=400,
                                       pattern=r"^[A-Za-z0-9_,\- ]+$")] | None = Field(
        None, description="comma-separated modules (q,k,v,o,gate,up,down) or all-linear")
    adapter_dtype: Literal["fp32", "compute"] | None = Field(
        None, description="LoRA-family adapters in fp32 (peft >= 0.12, default: each adapted module keeps an "
                          "fp32 copy of its input) or in the compute dtype")
    trainable_layers: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        None, description="freeze: last N blocks trained (default 2)")
    precision: Precision | None = Field(None, description="compute precision (default bf16)")
    quant: Quant | None = Field(None, description="base weight storage (default: as the method implies)")
    optimizer: Optimizer | None = Field(None, description="default adamw")
    master_weights: Literal["auto", "fp32", "none"] | None = Field(
        None, description="16-bit full fine-tuning: fp32 master copy, weights trained in place, or auto "
                          "(fp32 under DeepSpeed ZeRO, tensor parallelism and fp8)")
    flash_attn: bool | None = Field(None, description="FlashAttention / SDPA (default on)")
    moe_mode: Literal["sparse", "dense"] | None = Field(None, description="MoE: top-k experts or all")


class WorkFields(BaseModel):
    """The work: dataset size, epochs, sequence length, evaluation and checkpoints."""

    examples: Annotated[Float, Field(gt=0, le=1e13)] | None = Field(None, description="training examples")
    tokens_per_example: Annotated[Float, Field(gt=0, le=1e8)] | None = Field(
        None, description="mean tokens per example, after templating")
    tokens: Annotated[Float, Field(gt=0, le=1e16)] | None = Field(
        None, description="total tokens per epoch (instead of examples)")
    epochs: Annotated[Float, Field(gt=0, le=1e5)] | None = Field(None, description="default 1")
    seq_len: Annotated[int, Field(ge=1, le=10_000_000)] | None = Field(
        None, description="padded/packed length (default: tokens per example)")
    packing: bool | None = Field(None, description="pack examples into seq_len samples")
    padding: Literal["max", "longest"] | None = Field(
        None, description="unpacked examples padded to seq_len (max) or each batch to its longest example (longest)")
    eval_every: NonNegInt | None = None
    eval_examples: NonNegInt | None = None
    save_every: NonNegInt | None = None
    load_time_s: Annotated[Float, Field(ge=0, le=1e9)] | None = None
    disk_gbs: Annotated[Float, Field(gt=0, le=1e6)] | None = None
    grid_gco2_kwh: Annotated[Float, Field(ge=0, le=1e5)] | None = Field(
        None, description="grid carbon intensity, g/kWh (default 480)")


class StageFields(BaseModel):
    """The training stage (absent: sft); RL options apply to grpo, ppo and rloo only."""

    stage: Literal["sft", "dpo", "orpo", "kto", "simpo", "cpo", "grpo", "ppo", "rloo"] | None = Field(
        None, description="sft (default), preference dpo/orpo/kto/simpo/cpo, or RL grpo/ppo/rloo")
    precompute_ref: bool | None = Field(None, description="dpo/kto: reference log-probs computed before training")
    group_size: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="RL: completions per prompt (TRL: grpo 8, rloo 2)")
    completion_len: Annotated[int, Field(ge=1, le=10_000_000)] | None = Field(
        None, description="RL: new tokens per completion (TRL: 512)")
    prompts_per_step: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        None, description="RL: prompts per optimizer step")
    reward_model: Name | None = Field(None, description="RL: reward model (default: a rule)")
    kl_beta: Annotated[Float, Field(ge=0, le=1e6)] | None = Field(None, description="RL: KL coefficient")
    ppo_epochs: Annotated[int, Field(ge=1, le=10_000)] | None = Field(None, description="PPO: update epochs")


class RolloutFields(StageFields):
    rollout_engine: Literal["hf", "vllm"] | None = Field(None, description="RL: HF generate (default) or vLLM")
    rollout_gpus: Annotated[int, Field(ge=0, le=1_048_576)] | None = Field(
        None, description="RL with vllm: GPUs of `gpus` serving vLLM (0: colocated)")


class JobFields(MethodOptions, WorkFields):
    """What is trained and how, on how many GPUs, in what batches."""

    method: Method | None = Field(None, description="fine-tuning method (default lora)")
    grad_ckpt: bool | None = Field(None, description="gradient checkpointing (default off)")
    nodes: Annotated[int, Field(ge=1, le=10_000)] | None = None
    sharding: Sharding | None = Field(None, description="default ddp")
    tp: Degree | None = None
    pp: Degree | None = None
    cp: Degree | None = None
    ep: Degree | None = None
    micro_batch: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="samples per GPU per micro-step (default 4)")
    grad_accum: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="gradient-accumulation steps (default 1)")


class PriceFields(BaseModel):
    provider: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        None, description="take the price from this provider (see /api/options)")
    rate: Annotated[Float, Field(ge=0, le=1e6)] | None = Field(
        None, description="$ per GPU-hour (default: cheapest on-demand price)")


class EstimateRequest(ModelChoice, JobFields, PriceFields, RolloutFields):
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
    gpus: Count | None = Field(None, description="total GPUs (default 1)")
    estimator: Literal["tuneplan", "kavier", "xia", "planner"] = "tuneplan"
    interval: Annotated[Float, Field(ge=0, lt=1)] | None = Field(
        None, description="interval coverage (default 0.8; 0 for none)")

    @model_validator(mode="after")
    def _gpu_given(self) -> EstimateRequest:
        figures = (self.peak_tflops, self.memory_gib, self.bandwidth_gbs)
        if self.gpu is None and any(v is None for v in figures):
            missing = [n for n, v in zip(("peak_tflops", "memory_gib", "bandwidth_gbs"), figures,
                                         strict=True) if v is None]
            raise ValueError("give `gpu` (a catalog name) or all of peak_tflops, memory_gib and "
                             f"bandwidth_gbs for your own GPU (missing: {', '.join(missing)})")
        return self


PosIntList = list[Annotated[int, Field(ge=1, le=1_048_576)]]


class PlanRequest(ModelChoice, MethodOptions, WorkFields, PriceFields, StageFields):
    """`POST /api/plan`: the inputs of `tuneplan plan` (a search over GPU type x count x method x batch)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "model": "Qwen/Qwen2.5-7B", "gpus": ["A100-SXM4-80GB", "H100-SXM5-80GB"], "methods": ["lora", "qlora"],
        "max_gpus": 8, "examples": 10000, "tokens_per_example": 512, "epochs": 1, "objective": "cheapest"}]})

    gpus: list[Name] | None = Field(None, max_length=256,
                                    description="GPU types to consider (default: every priced catalog GPU)")
    methods: list[Method] | None = Field(None, max_length=64, description="methods (default full, lora, qlora)")
    max_gpus: Annotated[int, Field(ge=1, le=1_048_576)] = Field(
        8, description="largest GPU count (powers of two up to it)")
    gpu_counts: PosIntList | None = Field(None, max_length=10_000,
                                          description="GPU counts to try instead of powers of two")
    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] | None = Field(None, description="default 8")
    micro_batches: PosIntList | None = Field(None, max_length=10_000,
                                             description="micro-batches to try (default 1,2,4,...,64)")
    global_batch: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        None, description="samples per optimizer step kept by gradient accumulation (default 32)")
    grad_accums: PosIntList | None = Field(None, max_length=10_000,
                                           description="gradient accumulations to try instead of global_batch")
    shardings: list[Sharding] | None = Field(None, max_length=64, description="default ddp, fsdp")
    grad_ckpt: bool | None = Field(None, description="pin gradient checkpointing (default: try both)")
    deadline_h: Annotated[Float, Field(gt=0, le=1e6)] | None = Field(None, description="wall-clock limit, hours")
    budget_usd: Annotated[Float, Field(gt=0, le=1e12)] | None = Field(None, description="cost limit, $")
    objective: Literal["cheapest", "fastest", "energy", "balanced"] = "cheapest"
    interval: Annotated[Float, Field(ge=0, lt=1)] | None = Field(
        None, description="interval coverage (default 0.8; 0 for none)")
    max_candidates: Annotated[int, Field(ge=1, le=5000)] = Field(
        200, description="candidates returned, best first (all are searched; `points` has the best of "
                         "each GPU type x count x method)")


class ModelConfigRequest(BaseModel):
    """`POST /api/model-config`: a pasted config.json to read."""

    model_config = ConfigDict(extra="forbid")
    config_json: dict[str, Any]
    config_name: Annotated[str, Field(max_length=200)] | None = None


# ----------------------------------------------------------------------------------------------------
# helpers


class RequestError(Exception):
    """A 422 located at one body field (or the whole body)."""

    def __init__(self, loc: Iterable[str | int], msg: str, kind: str = "value_error", **extra: Any) -> None:
        super().__init__(msg)
        self.loc = ["body", *loc]
        self.msg = msg
        self.kind = kind
        self.extra = extra

    def detail(self) -> dict[str, Any]:
        return {"loc": self.loc, "msg": self.msg, "type": self.kind, **self.extra}


def _field_of(err: InputError) -> list[str]:
    """Body location of an InputError's field (`tokens-per-example` -> tokens_per_example)."""
    f = (err.field or "").replace("-", "_")
    f = {"rate_usd_per_gpu_hour": "rate", "job": "", "gpu_file": "gpu", "interval": "interval"}.get(f, f)
    return [f] if f else []


_CLI_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def _input_error_detail(err: InputError) -> dict[str, Any]:
    text = str(err)
    prefix = f"{err.field}: "
    msg = text[len(prefix):] if text.startswith(prefix) else text
    msg = _CLI_FLAG.sub(lambda m: m.group(1).replace("-", "_"), msg)  # the page's field names, not flags
    d: dict[str, Any] = {"loc": ["body", *_field_of(err)], "msg": msg, "type": "value_error"}
    if err.allowed:
        d["allowed"] = list(err.allowed)
    if isinstance(err, UnknownNameError):
        d["type"] = "unknown_name"
        d["closest"] = list(getattr(err, "close", []) or [])
    elif type(err).__name__ == "AmbiguousNameError":
        d["type"] = "ambiguous_name"
        d["candidates"] = list(getattr(err, "candidates", []) or [])
    return d


def jsonable(obj: Any) -> Any:
    """Plain JSON values: non-finite floats become null, numpy scalars and tuples plain Python."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str | int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        try:
            return jsonable(obj.item())
        except (TypeError, ValueError):
            pass
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    if hasattr(obj, "model_dump"):
        return jsonable(obj.model_dump())
    return str(obj)


def _looks_like_path(name: str) -> bool:
    """A model name that would make the server read a file or folder (not served over the web)."""
    n = name.strip()
    if (n.startswith(("/", "~", ".", "\\")) or "\\" in n or ".." in n or n.lower().endswith(".json")
            or (len(n) > 1 and n[1] == ":")):
        return True
    try:
        return Path(n).exists()
    except (OSError, ValueError):
        return True


class _ConfigCache:
    """Model specs of pasted configs, by content (a page re-sends the same config on every change)."""

    def __init__(self, size: int = 32) -> None:
        self._d: OrderedDict[str, Any] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, config: dict[str, Any], name: str) -> Any:
        from tuneplan.specs.model_config import model_from_config

        key = hashlib.sha256((name + "\0" + json.dumps(config, sort_keys=True, default=str)).encode()).hexdigest()
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        try:
            spec = model_from_config(dict(config), name, "pasted config.json")
        except InputError as exc:
            d = _input_error_detail(exc)
            raise RequestError(["config_json", *d["loc"][1:]], d["msg"]) from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError,
                OverflowError) as exc:
            raise RequestError(["config_json"], f"cannot read this config.json: {type(exc).__name__}: {exc}"
                               ) from None
        if spec.params_total <= 0 or spec.n_layers <= 0 or spec.hidden_size <= 0:
            raise RequestError(["config_json"], "this config.json describes no layers / parameters")
        with self._lock:
            self._d[key] = spec
            while len(self._d) > self._size:
                self._d.popitem(last=False)
        return spec


def _model_summary(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "model_type": spec.model_type, "params_total": spec.params_total,
            "params_active": spec.params_active, "params_total_b": spec.params_total / 1e9,
            "params_active_b": spec.params_active / 1e9, "is_moe": spec.is_moe, "n_layers": spec.n_layers,
            "hidden_size": spec.hidden_size, "max_position_embeddings": spec.max_position_embeddings,
            "quant": spec.quant, "source": spec.source}


def _num_arg(v: float | int) -> str:
    """A number as the CLI reads it (30000.0 -> 30000, 0.5 -> 0.5)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)


_JOB_DEFAULTS = {n: f.default for n, f in JobSpec.model_fields.items()}


def _is_default(name: str, value: Any) -> bool:
    d = _JOB_DEFAULTS.get(name, object())
    if name == "lora_targets" and isinstance(value, str):
        return tuple(t.strip() for t in value.split(",") if t.strip()) == tuple(d)
    if isinstance(d, float) and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) == d
    return value == d


def _job_flags(req: Any, names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        v = getattr(req, name, None)
        if v is None or _is_default(name, v):
            continue
        flag = "--" + name.replace("_", "-")
        if name in ("grad_ckpt", "flash_attn"):
            out.append(flag if v else "--no-" + name.replace("_", "-"))
        elif name in ("packing", "precompute_ref"):
            if v:
                out.append(flag)
        elif isinstance(v, int | float):
            out += [flag, _num_arg(v)]
        else:
            out += [flag, str(v)]
    return out


def _model_flags(req: ModelChoice) -> tuple[list[str], str]:
    if req.config_json is not None:
        return ["--model", "config.json"], "save the pasted config as config.json in the current folder first"
    return ["--model", str(req.model)], ""


def _price_flags(req: PriceFields) -> list[str]:
    out: list[str] = []
    if req.rate is not None:
        out += ["--rate", _num_arg(req.rate)]
    if req.provider:
        out += ["--provider", req.provider]
    return out


def estimate_command(req: EstimateRequest) -> tuple[str, str]:
    """The `tuneplan estimate ...` command line for a request, and a note when it needs a file."""
    args, note = _model_flags(req)
    if req.gpu:
        args += ["--gpu", req.gpu]
    for name in ("peak_tflops", "memory_gib", "bandwidth_gbs"):
        v = getattr(req, name)
        if v is not None:
            args += ["--" + name.replace("_", "-"), _num_arg(v)]
    if req.estimator != "tuneplan":
        args += ["--estimator", req.estimator]
    if req.interval is not None and req.interval != DEFAULT_INTERVAL:
        args += ["--interval", _num_arg(req.interval)]
    args += _job_flags(req, JOB_FIELDS)
    args += _price_flags(req)
    return shlex.join(["tuneplan", "estimate", *args]), note


def plan_command(req: PlanRequest) -> tuple[str, str]:
    """The `tuneplan plan ...` command line for a request."""
    args, note = _model_flags(req)
    for name in ("gpus", "methods", "gpu_counts", "micro_batches", "grad_accums", "shardings"):
        v = getattr(req, name)
        if v:
            args += ["--" + name.replace("_", "-"), ",".join(str(x) for x in v)]
    if req.max_gpus != 8:
        args += ["--max-gpus", str(req.max_gpus)]
    for name in ("gpus_per_node", "global_batch"):
        v = getattr(req, name)
        if v is not None:
            args += ["--" + name.replace("_", "-"), str(v)]
    if req.grad_ckpt is not None:
        args.append("--grad-ckpt" if req.grad_ckpt else "--no-grad-ckpt")
    if req.deadline_h is not None:
        args += ["--deadline-h", _num_arg(req.deadline_h)]
    if req.budget_usd is not None:
        args += ["--budget", _num_arg(req.budget_usd)]
    if req.objective != "cheapest":
        args += ["--objective", req.objective]
    if req.interval is not None and req.interval != DEFAULT_INTERVAL:
        args += ["--interval", _num_arg(req.interval)]
    args += _job_flags(req, WORK_FIELDS + METHOD_FIELDS + STAGE_FIELDS)
    args += _price_flags(req)
    return shlex.join(["tuneplan", "plan", *args]), note


def plan_kwargs(req: PlanRequest) -> dict[str, Any]:
    """`tuneplan.plan.search.plan` keyword arguments for a request (the model apart)."""
    kw: dict[str, Any] = {"max_gpus": req.max_gpus, "objective": req.objective,
                          "interval": DEFAULT_INTERVAL if req.interval is None else (req.interval or None)}
    for name, key in (("gpus", "gpus"), ("methods", "methods"), ("gpu_counts", "gpu_counts_"),
                      ("micro_batches", "micro_batches"), ("grad_accums", "grad_accums"),
                      ("shardings", "shardings")):
        v = getattr(req, name)
        if v:
            kw[key] = list(v)
    for name in ("gpus_per_node", "global_batch", "budget_usd", "provider", "rate", *WORK_FIELDS,
                 *METHOD_FIELDS, *STAGE_FIELDS):
        v = getattr(req, name)
        if v is not None:
            kw[name] = v
    if req.grad_ckpt is not None:
        kw["grad_ckpt"] = (req.grad_ckpt,)
    if req.deadline_h is not None:
        kw["deadline_s"] = req.deadline_h * 3600.0
    if req.rate is not None:
        kw.pop("provider", None)
    return kw


def plan_space_size(req: PlanRequest) -> int:
    """How many configurations the planner would enumerate for a request (before it drops the invalid
    ones): GPU types x counts x methods x micro-batches x gradient accumulations x shardings x
    checkpointing, as `tuneplan.plan.space.enumerate_grid` lays them out."""
    from tuneplan.plan.search import DEFAULT_METHODS, default_gpus
    from tuneplan.plan.space import DEFAULT_MICRO_BATCHES, DEFAULT_SHARDINGS, GPUS_PER_NODE, gpu_counts

    n_types = len(set(req.gpus)) if req.gpus else len(default_gpus())
    n_counts = (len(set(req.gpu_counts)) if req.gpu_counts
                else len(gpu_counts(req.max_gpus, req.gpus_per_node or GPUS_PER_NODE)))
    n_methods = len(set(req.methods)) if req.methods else len(DEFAULT_METHODS)
    n_mb = len(set(req.micro_batches)) if req.micro_batches else len(DEFAULT_MICRO_BATCHES)
    n_ga = len(set(req.grad_accums)) if req.grad_accums else 1
    n_shard = len(set(req.shardings)) if req.shardings else len(DEFAULT_SHARDINGS)
    n_ck = 1 if req.grad_ckpt is not None else 2
    return n_types * n_counts * n_methods * n_mb * n_ga * n_shard * n_ck


# ----------------------------------------------------------------------------------------------------
# the app


def create_app(*, allow_hub: bool = False, warm_up: bool = True) -> FastAPI:
    """The web planner app. `allow_hub`: resolve model ids outside the catalog on the Hugging Face Hub
    (off by default: a page typing names would otherwise fire a network look-up per keystroke).
    `warm_up`: load the catalogs and estimators at startup so the first estimate answers fast."""
    configs = _ConfigCache()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if warm_up:
            _warm()
        yield

    app = FastAPI(
        title="tuneplan web planner",
        version=__version__,
        description="The JSON API behind the page at `/`: fine-tuning time, memory and cost estimates "
                    "(`/api/estimate`) and the planner's search (`/api/plan`). Bad input answers 422 with "
                    "the field and the reason.",
        lifespan=lifespan,
    )
    app.add_middleware(GZipMiddleware, minimum_size=2048)

    # -- errors -------------------------------------------------------------------------------------
    @app.middleware("http")
    async def limit_body(request: Request, call_next: Callable):
        length = request.headers.get("content-length")
        if length is not None:
            try:
                too_big = int(length) > MAX_BODY_BYTES
            except ValueError:
                too_big = True
            if too_big:
                return JSONResponse(status_code=413, content={"detail": [{
                    "loc": ["body"], "msg": f"request body over {MAX_BODY_BYTES // (1024 * 1024)} MiB",
                    "type": "too_large"}]})
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = []
        for e in exc.errors():
            d: dict[str, Any] = {"loc": [x if isinstance(x, int) else str(x) for x in e.get("loc", ())],
                                 "msg": str(e.get("msg", "invalid")).removeprefix("Value error, "),
                                 "type": str(e.get("type", "value_error"))}
            if e.get("type") == "literal_error" and isinstance(e.get("ctx"), dict):
                d["allowed"] = str(e["ctx"].get("expected", ""))
            detail.append(d)
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(InputError)
    async def on_input_error(request: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": [_input_error_detail(exc)]})

    @app.exception_handler(TuneplanError)
    async def on_tuneplan_error(request: Request, exc: TuneplanError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": [{"loc": ["body"], "msg": str(exc),
                                                                  "type": "value_error"}]})

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return JSONResponse(status_code=500, content={"detail": [{
            "loc": [], "msg": f"internal error ({type(exc).__name__}): please report it", "type": "internal"}]})

    @app.exception_handler(RequestError)
    async def on_request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": [exc.detail()]})

    # -- pages --------------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/healthz", tags=["meta"], summary="liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    # -- catalogs -----------------------------------------------------------------------------------
    @app.get("/api/options", tags=["catalogs"], summary="the form's closed sets and defaults")
    def options() -> dict[str, Any]:
        from tuneplan.specs.prices import providers

        return {
            "methods": list(METHODS), "lora_family": list(LORA_FAMILY), "precisions": list(PRECISIONS),
            "optimizers": list(OPTIMIZERS), "master_weights": list(MASTER_WEIGHTS), "shardings": list(SHARDINGS), "quants": list(QUANTS),
            "moe_modes": list(MOE_MODES), "paddings": list(PADDINGS), "adapter_dtypes": list(ADAPTER_DTYPES), "estimators": list(ESTIMATORS), "objectives": list(OBJECTIVES),
            "stages": list(STAGES), "rollout_engines": list(ROLLOUT_ENGINES),
            "providers": providers(), "defaults": jsonable(_JOB_DEFAULTS),
            "default_interval": DEFAULT_INTERVAL, "plan_available": _plan_fn() is not None,
            "limits": {"max_plan_configs": MAX_PLAN_CONFIGS, "max_body_bytes": MAX_BODY_BYTES},
        }

    @app.get("/api/models", tags=["catalogs"], summary="the model catalog, optionally filtered")
    def models(q: Annotated[str, Query(max_length=200, description="words every name must contain")] = "",
               limit: Annotated[int, Query(ge=1, le=1000)] = 1000) -> list[dict[str, Any]]:
        from tuneplan.specs.catalog import list_models

        words = [w for w in q.lower().replace("/", " ").split() if w]
        out = []
        for m in list_models():
            low = m.name.lower()
            if all(w in low for w in words):
                out.append(_model_summary(m))
        return jsonable(out[:limit])

    @app.get("/api/gpus", tags=["catalogs"], summary="the GPU catalog with prices")
    def gpus() -> list[dict[str, Any]]:
        from tuneplan.specs.gpu import gpu_catalog
        from tuneplan.specs.prices import price_for

        out = []
        for g in gpu_catalog().values():
            d = g.to_dict()
            p = price_for(g.name)
            d["usd_per_gpu_hour"] = p.usd_per_gpu_hour if p else None
            d["price_source"] = p.describe() if p else None
            out.append(d)
        return jsonable(out)

    @app.post("/api/model-config", tags=["catalogs"], summary="read a pasted config.json")
    def model_config(req: ModelConfigRequest) -> dict[str, Any]:
        spec = configs.get(req.config_json, req.config_name or "custom-model")
        return jsonable(_model_summary(spec))

    from tuneplan.web.from_config import register as register_from_config

    register_from_config(app)

    # -- estimate and plan --------------------------------------------------------------------------
    def model_spec(req: ModelChoice) -> Any:
        if req.config_json is not None:
            return configs.get(req.config_json, req.config_name or "custom-model")
        name = str(req.model)
        if _looks_like_path(name):
            raise RequestError(["model"], "file paths are not read over the web: paste the config.json "
                                          "instead (config_json)")
        if allow_hub:
            from tuneplan.specs.catalog import resolve_model

            return resolve_model(name)
        from tuneplan.specs.catalog import resolve_run_model

        return resolve_run_model(name, name)

    @app.post("/api/estimate", tags=["estimate"], summary="time, memory, cost and energy of one run")
    def estimate_endpoint(req: EstimateRequest) -> dict[str, Any]:
        from tuneplan.api import estimate

        spec = model_spec(req)
        job = {n: getattr(req, n) for n in JOB_FIELDS if getattr(req, n) is not None}
        res = _compute(lambda: estimate(
            spec, req.gpu, estimator=req.estimator, peak_tflops=req.peak_tflops, memory_gib=req.memory_gib,
            bandwidth_gbs=req.bandwidth_gbs, provider=req.provider, rate=req.rate,
            interval=DEFAULT_INTERVAL if req.interval is None else (req.interval or None), **job))
        out = jsonable(res.to_dict())
        out["model_info"] = jsonable(_model_summary(spec))
        out["command"], out["command_note"] = estimate_command(req)
        return out

    @app.post("/api/plan", tags=["plan"], summary="search GPU type x count x method x batch")
    def plan_endpoint(req: PlanRequest) -> dict[str, Any]:
        plan = _plan_fn()
        if plan is None:
            raise RequestError([], "the planner is not installed in this version", kind="unavailable")
        size = plan_space_size(req)
        if size > MAX_PLAN_CONFIGS:
            raise RequestError([], f"this search would enumerate {size:,} configurations, over the limit of "
                                   f"{MAX_PLAN_CONFIGS:,}: choose fewer GPU types, methods, GPU counts, "
                                   "micro-batches or gradient accumulations", kind="search_too_large",
                               configurations=size, limit=MAX_PLAN_CONFIGS)
        spec = model_spec(req)
        kwargs = plan_kwargs(req)
        res = _compute(lambda: plan(spec, **kwargs), rename={"gpu": "gpus"})
        out = jsonable(res.to_dict(max_candidates=req.max_candidates))
        out["n_candidates"] = int(len(res.candidates))
        out["points"] = _plan_points(res)
        out["model_info"] = jsonable(_model_summary(spec))
        out["command"], out["command_note"] = plan_command(req)
        return out

    return app


def _compute(fn: Callable[[], Any], rename: dict[str, str] | None = None) -> Any:
    """Run an estimate / a plan; arithmetic that an absurd (but well-typed) input breaks is a 422.
    `rename`: body field names for InputError fields that differ (the planner's `gpu` is `gpus`)."""
    try:
        return fn()
    except InputError as exc:
        d = _input_error_detail(exc)
        field = d["loc"][1] if len(d["loc"]) > 1 else ""
        if rename and field in rename:
            extra = {k: v for k, v in d.items() if k not in ("loc", "msg", "type")}
            raise RequestError([rename[field]], d["msg"], d["type"], **extra) from None
        raise
    except (TuneplanError, RequestError):
        raise
    except (ZeroDivisionError, OverflowError, FloatingPointError, ValueError, MemoryError) as exc:
        log.info("rejected input: %s: %s", type(exc).__name__, exc)
        raise RequestError([], f"cannot compute this configuration: {exc}", kind="value_error") from None


def _plan_fn() -> Callable[..., Any] | None:
    try:
        from tuneplan.plan.search import plan_run
    except ImportError:
        return None
    return plan_run


def _plan_points(res: Any) -> list[dict[str, Any]]:
    """The best candidate (for the objective) of each GPU type x count x method, plus every Pareto
    candidate: what the page's chart and table show (all candidates can be tens of thousands)."""
    from tuneplan.plan.search import records

    df = res.candidates
    if not len(df):
        return []
    best = df.drop_duplicates(subset=["gpu", "gpus", "method"], keep="first")
    front = df[df["pareto"]]
    import pandas as pd

    both = pd.concat([best, front[~front.index.isin(best.index)]])
    return jsonable(records(both))


def _warm() -> None:
    try:
        from tuneplan.api import estimate
        from tuneplan.specs.catalog import list_models, model_catalog
        from tuneplan.specs.gpu import gpu_catalog

        list_models()
        gpu = next(iter(gpu_catalog()))
        model = next(iter(model_catalog()))
        estimate(model, gpu, examples=100, tokens_per_example=128)
        plan = _plan_fn()
        if plan is not None:
            plan(model, gpus=[gpu], methods=["lora"], max_gpus=2, examples=100, tokens_per_example=128, rate=1.0)
    except Exception as exc:  # noqa: BLE001 - warm-up is best effort; requests report their own errors
        log.warning("warm-up failed: %s", exc)
