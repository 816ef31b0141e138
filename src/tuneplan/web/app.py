"""The web planner's FastAPI app: the page at `/`, its static files, and the JSON API it calls.

The endpoints are listed in docs/web.md and documented by FastAPI at `/docs` and `/openapi.json`.

Every bad input answers 422 with `{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`: pydantic's own
checks on the request bodies, tuneplan's `InputError` (field, reason, allowed values) from deeper down,
and arithmetic that a valid-looking but absurd configuration breaks. A search over an absurd space is
refused before it starts. The page itself (`static/`) needs no network: its chart library is vendored.
"""

from __future__ import annotations

import functools
import json
import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from tuneplan import __version__
from tuneplan.errors import InputError, TuneplanError
from tuneplan.plan.objectives import OBJECTIVES
from tuneplan.specs import job as jobspec
from tuneplan.web.command_line import (
    JOB_DEFAULTS,
    estimate_command,
    plan_command,
    plan_kwargs,
    plan_space_size,
)
from tuneplan.web.pool import BodyLimit, plan_in_worker
from tuneplan.web.respond import RequestError, compute, input_error_detail, jsonable
from tuneplan.web.schemas import (
    DEFAULT_INTERVAL,
    ESTIMATE_JOB,
    ESTIMATORS,
    EstimateRequest,
    ModelChoice,
    ModelConfigRequest,
    PlanRequest,
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


def config_spec(config: dict[str, Any], name: str) -> Any:
    """The model spec of a pasted config.json (cached by content: a page re-sends the same config on
    every change); a config that cannot be read is a 422 at `config_json`."""
    return _config_spec(json.dumps(config, sort_keys=True, default=str), name)


@functools.lru_cache(maxsize=32)
def _config_spec(config_text: str, name: str) -> Any:
    from tuneplan.specs.architectures import model_from_config

    try:
        spec = model_from_config(json.loads(config_text), name, "pasted config.json")
    except InputError as exc:
        d = input_error_detail(exc)
        raise RequestError(["config_json", *d["loc"][1:]], d["msg"]) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError,
            OverflowError) as exc:
        raise RequestError(["config_json"], f"cannot read this config.json: {type(exc).__name__}: {exc}"
                           ) from None
    if spec.params_total <= 0 or spec.n_layers <= 0 or spec.hidden_size <= 0:
        raise RequestError(["config_json"], "this config.json describes no layers / parameters")
    return spec


def _model_summary(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "model_type": spec.model_type, "params_total": spec.params_total,
            "params_active": spec.params_active, "params_total_b": spec.params_total / 1e9,
            "params_active_b": spec.params_active / 1e9, "is_moe": spec.is_moe, "n_layers": spec.n_layers,
            "hidden_size": spec.hidden_size, "max_position_embeddings": spec.max_position_embeddings,
            "quant": spec.quant, "source": spec.source}



def create_app(*, allow_hub: bool = False, warm_up: bool = True) -> FastAPI:
    """The web planner app. `allow_hub`: resolve model ids outside the catalog on the Hugging Face Hub
    (off by default: a page typing names would otherwise fire a network look-up per keystroke).
    `warm_up`: load the catalogs and estimators at startup so the first estimate answers fast."""
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from tuneplan.web import pool

        if warm_up:
            _warm()
            pool.warm()
        yield
        pool.shutdown()

    app = FastAPI(
        title="tuneplan web planner",
        version=__version__,
        description="The JSON API behind the page at `/`: fine-tuning time, memory and cost estimates "
                    "(`/api/estimate`) and the planner's search (`/api/plan`). Bad input answers 422 with "
                    "the field and the reason.",
        lifespan=lifespan,
    )
    app.add_middleware(GZipMiddleware, minimum_size=2048)
    from tuneplan.web.data_upload import UPLOAD_LIMITS

    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES, paths=UPLOAD_LIMITS)  # chunked bodies too

    _add_error_handlers(app)
    _add_catalog_routes(app)
    _add_run_routes(app, allow_hub)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every failure as a JSON `detail` list: the body size limit, pydantic's checks, InputError and
    the other tuneplan errors (422), anything unexpected (500, logged)."""
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

    async def on_user_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, RequestError):
            return JSONResponse(status_code=503 if exc.kind == "busy" else 422, content={"detail": [exc.detail()]})
        d = (input_error_detail(exc) if isinstance(exc, InputError)
             else {"loc": ["body"], "msg": str(exc), "type": "value_error"})
        return JSONResponse(status_code=422, content={"detail": [d]})

    for cls in (RequestError, InputError, TuneplanError):
        app.add_exception_handler(cls, on_user_error)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return JSONResponse(status_code=500, content={"detail": [{
            "loc": [], "msg": f"internal error ({type(exc).__name__}): please report it", "type": "internal"}]})


def _add_catalog_routes(app: FastAPI) -> None:
    """The page, liveness, and the catalogs the form offers."""
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/healthz", tags=["meta"], summary="liveness")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/api/options", tags=["catalogs"], summary="the form's closed sets and defaults")
    def options() -> dict[str, Any]:
        from tuneplan.specs.framework import framework_names
        from tuneplan.specs.prices import providers

        return {
            "methods": list(jobspec.METHODS), "lora_family": list(jobspec.LORA_FAMILY), "precisions": list(jobspec.PRECISIONS),
            "optimizers": list(jobspec.OPTIMIZERS), "master_weights": list(jobspec.MASTER_WEIGHTS), "shardings": list(jobspec.SHARDINGS), "quants": list(jobspec.QUANTS),
            "moe_modes": list(jobspec.MOE_MODES), "moe_experts": list(jobspec.MOE_EXPERT_LAYOUTS), "optimizer_impls": list(jobspec.OPTIMIZER_IMPLS), "grad_accum_syncs": list(jobspec.GRAD_ACCUM_SYNCS), "fsdp_adapter_wraps": list(jobspec.FSDP_ADAPTER_WRAPS), "paddings": list(jobspec.PADDINGS), "adapter_dtypes": list(jobspec.ADAPTER_DTYPES), "estimators": list(ESTIMATORS), "objectives": list(OBJECTIVES),
            "stages": list(jobspec.STAGES), "rollout_engines": list(jobspec.ROLLOUT_ENGINES),
            "frameworks": list(framework_names()), "ckpt_modes": ["none", "selective", "full", "offload"],
            "providers": providers(), "defaults": jsonable(JOB_DEFAULTS),
            "default_interval": DEFAULT_INTERVAL, "plan_available": True,
            "limits": {"max_plan_configs": MAX_PLAN_CONFIGS, "max_body_bytes": MAX_BODY_BYTES},
        }

    @app.get("/api/models", tags=["catalogs"], summary="the model catalog, optionally filtered")
    def models(q: Annotated[str, Query(max_length=200, description="words every name must contain")] = "",
               limit: Annotated[int, Query(ge=1, le=1000)] = 1000) -> list[dict[str, Any]]:
        from tuneplan.specs.catalog import list_models

        words = [w for w in q.lower().replace("/", " ").split() if w]
        found = [m for m in list_models() if all(w in m.name.lower() for w in words)]
        return jsonable([_model_summary(m) for m in found[:limit]])

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
        spec = config_spec(req.config_json, req.config_name or "custom-model")
        return jsonable(_model_summary(spec))

    from tuneplan.web.from_config import register as register_from_config

    register_from_config(app)
    from tuneplan.web.data_upload import register as register_data

    register_data(app)


def _add_run_routes(app: FastAPI, allow_hub: bool) -> None:
    """`POST /api/estimate` and `POST /api/plan`."""
    def model_spec(req: ModelChoice) -> Any:
        if req.config_json is not None:
            return config_spec(req.config_json, req.config_name or "custom-model")
        name = str(req.model)
        if _looks_like_path(name):
            raise RequestError(["model"], "file paths are not read over the web: paste the config.json "
                                          "instead (config_json)")
        from tuneplan.specs.catalog import resolve_model, resolve_run_model

        return resolve_model(name) if allow_hub else resolve_run_model(name, name)

    @app.post("/api/estimate", tags=["estimate"], summary="time, memory, cost and energy of one run")
    def estimate_endpoint(req: EstimateRequest) -> dict[str, Any]:
        from tuneplan.api import estimate

        spec = model_spec(req)
        job = {f: getattr(req, n) for n, f in ESTIMATE_JOB.items() if n != "rate" and getattr(req, n) is not None}
        if req.ckpt_mode is not None:
            job["ckpt_mode"] = req.ckpt_mode
        res = compute(lambda: estimate(
            spec, req.gpu, estimator=req.estimator, peak_tflops=req.peak_tflops, memory_gib=req.memory_gib,
            bandwidth_gbs=req.bandwidth_gbs, provider=req.provider, rate=req.rate,
            interval=DEFAULT_INTERVAL if req.interval is None else (req.interval or None), **job))
        out = jsonable(res.to_dict())
        out["model_info"] = jsonable(_model_summary(spec))
        out["command"], out["command_note"] = estimate_command(req)
        return out

    @app.post("/api/plan", tags=["plan"], summary="search GPU type x count x method x batch")
    def plan_endpoint(req: PlanRequest) -> dict[str, Any]:
        size = plan_space_size(req)
        if size > MAX_PLAN_CONFIGS:
            raise RequestError([], f"this search would enumerate {size:,} configurations, over the limit of "
                                   f"{MAX_PLAN_CONFIGS:,}: choose fewer GPU types, methods, GPU counts, "
                                   "micro-batches or gradient accumulations", kind="search_too_large",
                               configurations=size, limit=MAX_PLAN_CONFIGS)
        spec = model_spec(req)
        kwargs = plan_kwargs(req)
        res = compute(lambda: plan_in_worker(spec, kwargs), rename={"gpu": "gpus"}, kind="heavy")
        out = jsonable(res.to_dict(max_candidates=req.max_candidates))
        out |= {"n_candidates": int(len(res.candidates)), "points": _plan_points(res),
                "model_info": jsonable(_model_summary(spec))}
        out["command"], out["command_note"] = plan_command(req)
        return out


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
        from tuneplan.plan.search import plan_run

        plan_run(model, gpus=[gpu], methods=["lora"], max_gpus=2, examples=100, tokens_per_example=128, rate=1.0)
    except Exception as exc:  # noqa: BLE001 - warm-up is best effort; requests report their own errors
        log.warning("warm-up failed: %s", exc)
