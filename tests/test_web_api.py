"""The web planner's JSON API (httpx through FastAPI's TestClient): every endpoint, its figures against
the Python API, the command lines it offers against the real CLI parser, and the 422 paths (never a
500 for bad input)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tuneplan  # noqa: E402
from conftest import tiny_llama_config  # noqa: E402
from tuneplan.web.app import MAX_PLAN_CONFIGS, STATIC_DIR, create_app  # noqa: E402

MODEL = "Qwen/Qwen2.5-7B"
GPU = "H100-SXM5-80GB"
BASE = {"model": MODEL, "gpu": GPU, "method": "lora", "examples": 20000, "tokens_per_example": 700, "epochs": 2}
PLAN = {"model": MODEL, "gpus": ["A100-SXM4-80GB", "H100-SXM5-80GB", "L40S-48GB"], "methods": ["lora", "qlora"],
        "max_gpus": 4, "examples": 20000, "tokens_per_example": 700, "epochs": 2}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(warm_up=False), raise_server_exceptions=False) as c:
        yield c


def detail(r) -> list[dict]:
    assert r.status_code == 422, (r.status_code, r.text)
    d = r.json()["detail"]
    assert isinstance(d, list) and d
    for e in d:
        assert isinstance(e["loc"], list) and e["msg"]
    return d


def locs(r) -> list[list]:
    return [e["loc"] for e in detail(r)]


# ---------------------------------------------------------------------------------------------------
# pages, health, docs


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "version": tuneplan.__version__}


def test_page_and_static_files(client):
    r = client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    html = r.text
    for ref in re.findall(r'(?:src|href)="(/static/[^"]+)"', html):
        s = client.get(ref)
        assert s.status_code == 200, ref
    assert "uPlot.iife.min.js" in html and "app.js" in html
    assert client.get("/static/nope.js").status_code == 404


def test_page_works_offline():
    """No CDN: every script and stylesheet the page loads is served by the app itself."""
    for name in ("index.html", "app.js", "style.css"):
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)\s*=\s*["']https?://""", text), name
        assert "fetch(\"http" not in text and "import(" not in text
    head = (STATIC_DIR / "uPlot.iife.min.js").read_text(encoding="utf-8")[:400]
    assert "uPlot 1.6.32" in head and "MIT" in head


def test_openapi_documents_every_endpoint(client):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for p in ("/healthz", "/api/options", "/api/models", "/api/gpus", "/api/model-config", "/api/estimate",
              "/api/plan"):
        assert p in paths, p
    assert "EstimateRequest" in spec["components"]["schemas"]
    assert client.get("/docs").status_code == 200


# ---------------------------------------------------------------------------------------------------
# catalogs


def test_options(client):
    d = client.get("/api/options").json()
    assert "lora" in d["methods"] and "bf16" in d["precisions"] and "ddp" in d["shardings"]
    assert d["defaults"]["micro_batch"] == 4 and d["defaults"]["method"] == "lora"
    assert d["providers"] and d["plan_available"] is True
    assert set(d["objectives"]) == {"cheapest", "fastest", "energy", "balanced"}


def test_models_search(client):
    all_models = client.get("/api/models").json()
    assert len(all_models) > 50
    names = [m["name"] for m in all_models]
    assert MODEL in names
    hit = client.get("/api/models", params={"q": "qwen2.5 7b"}).json()
    assert [m["name"] for m in hit] == [MODEL, "Qwen/Qwen2.5-Coder-7B", "Qwen/Qwen2.5-VL-7B-Instruct"]
    assert hit[0]["params_total_b"] == pytest.approx(7.6, abs=0.1)
    assert len(client.get("/api/models", params={"limit": 3}).json()) == 3
    assert client.get("/api/models", params={"q": "zzzz-no-such"}).json() == []
    assert locs(client.get("/api/models", params={"limit": 0})) == [["query", "limit"]]
    assert locs(client.get("/api/models", params={"limit": "many"})) == [["query", "limit"]]


def test_gpus(client):
    g = {x["name"]: x for x in client.get("/api/gpus").json()}
    assert g[GPU]["memory_gib"] == 80 and g[GPU]["usd_per_gpu_hour"] > 0
    assert g[GPU]["peak_tflops"]["bf16"] > 500


def test_model_config(client):
    r = client.post("/api/model-config", json={"config_json": tiny_llama_config(), "config_name": "tiny"})
    assert r.status_code == 200
    d = r.json()
    assert d["name"] == "tiny" and d["n_layers"] == 2 and d["params_total"] > 0
    assert locs(client.post("/api/model-config", json={"config_json": {"foo": 1}}))[0][:2] == ["body",
                                                                                              "config_json"]
    assert locs(client.post("/api/model-config", json={"config_json": "not an object"})) == [
        ["body", "config_json"]]
    assert locs(client.post("/api/model-config", json={})) == [["body", "config_json"]]


# ---------------------------------------------------------------------------------------------------
# estimate


def test_estimate_equals_python_api(client):
    r = client.post("/api/estimate", json={**BASE, "gpus": 2, "micro_batch": 8, "grad_ckpt": True,
                                           "provider": "Lambda"})
    assert r.status_code == 200, r.text
    d = r.json()
    ref = tuneplan.estimate(MODEL, GPU, method="lora", gpus=2, micro_batch=8, grad_ckpt=True, examples=20000,
                            tokens_per_example=700, epochs=2, provider="Lambda").to_dict()
    for k in ("wall_clock_s", "device_hours", "cost_usd", "energy_kwh", "tokens_per_s", "memory_per_gpu_gib",
              "step_time_s", "co2_kg"):
        assert d[k] == pytest.approx(ref[k], rel=1e-12), k
    assert d["fits"] == ref["fits"] and d["max_micro_batch"] == ref["max_micro_batch"]
    assert d["step_breakdown_s"] == pytest.approx(ref["step_breakdown_s"])
    assert d["memory_breakdown_gib"] == pytest.approx(ref["memory_breakdown_gib"])
    assert d["assumptions"] == ref["assumptions"]
    assert d["model_info"]["name"] == MODEL
    assert ("interval" in d) == ("interval" in ref)


def test_estimate_master_weights(client):
    body = {**BASE, "method": "full"}
    amp = client.post("/api/estimate", json={**body, "master_weights": "fp32"}).json()
    in_place = client.post("/api/estimate", json={**body, "master_weights": "none"}).json()
    assert amp["memory_breakdown_gib"]["master_weights"] > 0
    assert in_place["memory_breakdown_gib"]["master_weights"] == 0.0
    assert in_place["memory_per_gpu_gib"] < amp["memory_per_gpu_gib"]
    assert client.post("/api/estimate", json={**body, "master_weights": "fp64"}).status_code == 422


def _cli_args(command: str, sub: str):
    from tuneplan.cli import build_parser

    argv = shlex.split(command)
    assert argv[:2] == ["tuneplan", sub]
    return build_parser(sub).parse_args(argv[1:])


@pytest.mark.parametrize("extra", [
    {},
    {"gpus": 4, "nodes": 1, "sharding": "fsdp", "micro_batch": 2, "grad_accum": 8, "grad_ckpt": True},
    {"method": "qlora", "lora_rank": 64, "lora_targets": "q,v", "flash_attn": False, "rate": 3.5},
    {"method": "full", "precision": "fp16", "optimizer": "adamw-8bit", "seq_len": 1024, "packing": True,
     "estimator": "kavier", "interval": 0},
    {"method": "freeze", "trainable_layers": 4, "epochs": 1.5, "grid_gco2_kwh": 100, "save_every": 50},
])
def test_estimate_command_line_reproduces_the_figures(client, extra):
    """The page's "copy the command line" is a valid `tuneplan estimate` giving the same numbers."""
    from tuneplan.commands.common import job_kwargs

    body = {**BASE, **extra}
    d = client.post("/api/estimate", json=body).json()
    args = _cli_args(d["command"], "estimate")
    assert args.model == MODEL and args.gpu == GPU
    r = tuneplan.estimate(args.model, args.gpu, estimator=args.estimator, provider=args.provider,
                          interval=args.interval or None, **job_kwargs(args))
    assert r.wall_clock_s == pytest.approx(d["wall_clock_s"], rel=1e-12)
    assert r.memory_per_gpu_gib == pytest.approx(d["memory_per_gpu_gib"], rel=1e-12)
    assert r.cost_usd == pytest.approx(d["cost_usd"], rel=1e-12)
    assert d["command_note"] == ""


def test_estimate_from_pasted_config(client):
    from tuneplan.specs.architectures import model_from_config

    cfg = tiny_llama_config(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, vocab_size=32000)
    r = client.post("/api/estimate", json={"config_json": cfg, "config_name": "my-tiny", "gpu": "L4-24GB",
                                           "examples": 1000, "tokens_per_example": 256})
    assert r.status_code == 200, r.text
    d = r.json()
    ref = tuneplan.estimate(model_from_config(cfg, "my-tiny"), "L4-24GB", examples=1000, tokens_per_example=256)
    assert d["wall_clock_s"] == pytest.approx(ref.wall_clock_s, rel=1e-12)
    assert d["model"] == "my-tiny"
    assert "--model config.json" in d["command"] and "config.json" in d["command_note"]


def test_estimate_custom_gpu(client):
    body = {**BASE, "gpu": None, "peak_tflops": 300, "memory_gib": 48, "bandwidth_gbs": 900, "rate": 1.2}
    d = client.post("/api/estimate", json=body).json()
    ref = tuneplan.estimate(MODEL, None, peak_tflops=300, memory_gib=48, bandwidth_gbs=900, rate=1.2,
                            method="lora", examples=20000, tokens_per_example=700, epochs=2)
    assert d["wall_clock_s"] == pytest.approx(ref.wall_clock_s, rel=1e-12)
    assert d["memory_capacity_gib"] == 48
    assert "--peak-tflops 300 --memory-gib 48 --bandwidth-gbs 900" in d["command"]


def test_estimate_does_not_fit(client):
    d = client.post("/api/estimate", json={"model": "Qwen/Qwen2.5-72B", "gpu": "A10G-24GB", "method": "full",
                                           "examples": 1000, "tokens_per_example": 512}).json()
    assert d["fits"] is False and d["max_micro_batch"] == 0
    assert any("does not fit" in w for w in d["warnings"]) and d["suggestions"]


ESTIMATE_422 = [
    ({"model": "no-such-model-xyz"}, ["body", "model"]),
    ({"model": ""}, ["body", "model"]),
    ({"model": "x" * 400}, ["body", "model"]),
    ({"model": "/etc/passwd"}, ["body", "model"]),
    ({"model": "../secrets/config.json"}, ["body", "model"]),
    ({"model": "Qwen"}, ["body", "model"]),  # ambiguous
    ({"gpu": "RTX 6000"}, ["body", "gpu"]),  # ambiguous: no family default
    ({"gpu": "Z9000"}, ["body", "gpu"]),
    ({"method": "magic"}, ["body", "method"]),
    ({"precision": "int3"}, ["body", "precision"]),
    ({"examples": -5}, ["body", "examples"]),
    ({"examples": 0}, ["body", "examples"]),
    ({"examples": 1e300}, ["body", "examples"]),
    ({"examples": "many"}, ["body", "examples"]),
    ({"examples": None, "tokens_per_example": None, "tokens": None}, ["body", "seq_len"]),
    ({"tokens_per_example": 1e30}, ["body", "tokens_per_example"]),
    ({"epochs": 0}, ["body", "epochs"]),
    ({"gpus": 0}, ["body", "gpus"]),
    ({"gpus": 10**12}, ["body", "gpus"]),
    ({"gpus": 2.5}, ["body", "gpus"]),
    ({"gpus": 3, "nodes": 2}, ["body"]),
    ({"gpus": 2, "tp": 4}, ["body"]),
    ({"micro_batch": -1}, ["body", "micro_batch"]),
    ({"micro_batch": 10**9}, ["body", "micro_batch"]),
    ({"seq_len": 10**12}, ["body", "seq_len"]),
    ({"lora_rank": 0}, ["body", "lora_rank"]),
    ({"lora_targets": "q;rm -rf /"}, ["body", "lora_targets"]),
    ({"lora_targets": "nonsense"}, None),
    ({"method": "qlora", "precision": "fp32"}, ["body"]),
    ({"method": "full", "quant": "nf4"}, ["body"]),
    ({"provider": "NoSuchCloud"}, ["body", "provider"]),
    ({"rate": -1}, ["body", "rate"]),
    ({"interval": 1.5}, ["body", "interval"]),
    ({"gpu": None}, ["body"]),
    ({"gpu": None, "peak_tflops": 100}, ["body"]),
    ({"peak_tflops": -3}, ["body", "peak_tflops"]),
    ({"estimator": "oracle"}, ["body", "estimator"]),
    ({"estimator": "slst"}, ["body", "estimator"]),
    ({"unknown_field": 1}, ["body", "unknown_field"]),
    ({"model": None, "config_json": {"hidden_size": "big"}}, ["body", "config_json"]),
    ({"config_json": tiny_llama_config()}, ["body"]),  # both model and config_json
    ({"grad_ckpt": "perhaps"}, ["body", "grad_ckpt"]),
]


@pytest.mark.parametrize("change,loc", ESTIMATE_422)
def test_estimate_422(client, change, loc):
    r = client.post("/api/estimate", json={**BASE, **change})
    got = locs(r)
    if loc is not None:
        assert any(g[:len(loc)] == loc for g in got), got


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"text"', b"42", b'{"model": NaN}',
                                 b'{"model": "Qwen/Qwen2.5-7B", "gpu": "H100-SXM5-80GB", "examples": Infinity, '
                                 b'"tokens_per_example": 5}'])
def test_estimate_malformed_json_is_422(client, raw):
    r = client.post("/api/estimate", content=raw, headers={"content-type": "application/json"})
    detail(r)


def test_body_too_large_is_413(client):
    r = client.post("/api/estimate", content=b"{" + b" " * (3 * 1024 * 1024) + b"}",
                    headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["detail"][0]["type"] == "too_large"


def test_unknown_names_list_close_matches(client):
    d = detail(client.post("/api/estimate", json={**BASE, "gpu": "H100-SXM5-800GB"}))
    e = d[0]
    assert e["loc"] == ["body", "gpu"]
    assert e["type"] == "unknown_name" and GPU in e["closest"]
    d = detail(client.post("/api/estimate", json={**BASE, "method": "lroa"}))
    assert "lora" in d[0]["allowed"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**20, max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["model", "gpu", "method", "gpus", "nodes", "micro_batch", "grad_accum", "seq_len", "examples",
          "tokens_per_example", "epochs", "tokens", "lora_rank", "precision", "sharding", "tp", "pp", "rate",
          "provider", "peak_tflops", "memory_gib", "bandwidth_gbs", "interval", "packing", "quant"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, min_size=1, max_size=4))
def test_estimate_never_500(client, changes):
    r = client.post("/api/estimate", json={**BASE, **changes})
    assert r.status_code in (200, 422), (changes, r.status_code, r.text[:300])
    if r.status_code == 422:
        detail(r)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.integers(1, 4096), micro_batch=st.integers(1, 65536), seq_len=st.integers(1, 10_000_000),
       examples=st.floats(1, 1e13), method=st.sampled_from(["full", "lora", "qlora", "freeze", "dora"]))
def test_estimate_extreme_but_valid_numbers_never_500(client, gpus, micro_batch, seq_len, examples, method):
    body = {"model": MODEL, "gpu": GPU, "method": method, "gpus": gpus, "micro_batch": micro_batch,
            "seq_len": seq_len, "examples": examples, "tokens_per_example": 100}
    r = client.post("/api/estimate", json=body)
    assert r.status_code in (200, 422), (body, r.status_code, r.text[:300])


# ---------------------------------------------------------------------------------------------------
# plan


def test_plan_equals_python_api(client):
    r = client.post("/api/plan", json={**PLAN, "deadline_h": 3})
    assert r.status_code == 200, r.text
    d = r.json()
    ref = tuneplan.plan_run(MODEL, gpus=PLAN["gpus"], methods=PLAN["methods"], max_gpus=4, examples=20000,
                        tokens_per_example=700, epochs=2, deadline_s=3 * 3600)
    assert d["ok"] is True
    for k in ("gpu", "gpus", "method", "micro_batch", "grad_accum", "sharding"):
        assert d["recommended"][k] == ref.recommended[k], k
    assert d["recommended"]["time_s"] == pytest.approx(ref.recommended["time_s"], rel=1e-12)
    assert d["recommended"]["cost_usd"] == pytest.approx(ref.recommended["cost_usd"], rel=1e-12)
    assert d["why"] == ref.why
    assert len(d["pareto"]) == len(ref.pareto) >= 1
    assert d["n_candidates"] == len(ref.candidates)
    assert len(d["candidates"]) == min(200, len(ref.candidates))
    # points: one best row per GPU type x count x method, plus the Pareto rows
    keys = {(p["gpu"], p["gpus"], p["method"]) for p in d["points"]}
    assert keys == {(r["gpu"], r["gpus"], r["method"]) for r in ref.candidates.to_dict("records")}
    assert sum(p["pareto"] for p in d["points"]) == len(ref.pareto)


def test_plan_command_line_reproduces_the_plan(client):
    from tuneplan.commands.plan import plan_kwargs

    body = {**PLAN, "deadline_h": 2.5, "budget_usd": 400, "objective": "fastest", "micro_batches": [1, 4, 16],
            "shardings": ["ddp"], "grad_ckpt": True, "precision": "bf16", "lora_rank": 32, "seq_len": 1024,
            "provider": "Lambda"}
    d = client.post("/api/plan", json=body).json()
    args = _cli_args(d["command"], "plan")
    res = tuneplan.plan_run(args.model, **plan_kwargs(args))
    assert res.ok == d["ok"]
    if res.ok:
        assert res.recommended["time_s"] == pytest.approx(d["recommended"]["time_s"], rel=1e-12)
        assert res.recommended["cost_usd"] == pytest.approx(d["recommended"]["cost_usd"], rel=1e-12)
    assert res.n_evaluated == d["n_evaluated"]


def test_plan_without_answer_says_why(client):
    d = client.post("/api/plan", json={"model": "Qwen/Qwen2.5-72B", "gpus": ["A10G-24GB"], "methods": ["full"],
                                       "examples": 1000, "tokens_per_example": 512}).json()
    assert d["ok"] is False and d["recommended"] is None
    assert "fits in memory" in d["message"] and d["infeasible"][0]["kind"] == "memory"


def test_plan_refuses_absurd_space(client):
    t = time.perf_counter()
    r = client.post("/api/plan", json={**PLAN, "micro_batches": list(range(1, 10_001)),
                                       "grad_accums": list(range(1, 10_001)), "max_gpus": 1_000_000})
    e = detail(r)[0]
    assert e["type"] == "search_too_large" and e["configurations"] > 10**9 and e["limit"] == MAX_PLAN_CONFIGS
    assert "configurations" in e["msg"]
    assert time.perf_counter() - t < 2.0  # refused up front, not searched


def test_plan_default_space_is_allowed(client):
    """Every priced GPU, every method, up to 8 GPUs: the biggest question the page can ask by ticking boxes."""
    from tuneplan.specs.job import METHODS
    from tuneplan.web.app import PlanRequest, plan_space_size

    req = PlanRequest(model=MODEL, methods=list(METHODS), max_gpus=8, examples=1, tokens_per_example=1)
    assert plan_space_size(req) <= MAX_PLAN_CONFIGS


PLAN_422 = [
    ({"gpus": ["NoSuchGPU"]}, ["body", "gpus"]),
    ({"gpus": []}, None),
    ({"methods": ["magic"]}, ["body", "methods", 0]),
    ({"max_gpus": 0}, ["body", "max_gpus"]),
    ({"max_gpus": 10**12}, ["body", "max_gpus"]),
    ({"deadline_h": -1}, ["body", "deadline_h"]),
    ({"budget_usd": 0}, ["body", "budget_usd"]),
    ({"objective": "prettiest"}, ["body", "objective"]),
    ({"examples": None, "tokens_per_example": None}, None),
    ({"micro_batches": [0, 2]}, ["body", "micro_batches", 0]),
    ({"gpus": "H100-SXM5-80GB"}, ["body", "gpus"]),
    ({"provider": "Nope"}, ["body", "provider"]),
    ({"model": "no-such-model-xyz"}, ["body", "model"]),
    ({"max_candidates": 10**6}, ["body", "max_candidates"]),
    ({"gpu_counts": [3], "gpus_per_node": 2}, None),
]


@pytest.mark.parametrize("change,loc", PLAN_422)
def test_plan_422(client, change, loc):
    r = client.post("/api/plan", json={**PLAN, **change})
    if change == {"gpus": []}:  # an empty list means the default GPU list
        assert r.status_code == 200
        return
    got = locs(r)
    if loc is not None:
        assert loc in got, got


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(["gpus", "methods", "max_gpus", "deadline_h", "budget_usd",
                                                "objective", "examples", "rate", "micro_batches"]),
                               JSON_VALUES, min_size=1, max_size=3))
def test_plan_never_500(client, changes):
    r = client.post("/api/plan", json={**PLAN, **changes})
    assert r.status_code in (200, 422), (changes, r.status_code, r.text[:300])


# ---------------------------------------------------------------------------------------------------
# `tuneplan serve`


def test_serve_help_and_defaults():
    from tuneplan.cli import build_parser

    args = build_parser("serve").parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.hub is False


def test_serve_busy_port_is_one_line_error():
    from tuneplan.errors import InputError
    from tuneplan.web.commands import _bind

    sock = _bind("127.0.0.1", 0)
    try:
        with pytest.raises(InputError, match="cannot listen"):
            _bind("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()


def test_serve_prints_address_and_answers_healthz(tmp_path):
    """`tuneplan serve --port 0` binds 127.0.0.1, prints the address, and answers /healthz."""
    import httpx

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tuneplan.cli", "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m, line
        url = m.group(0)
        deadline = time.time() + 30
        while True:
            try:
                r = httpx.get(url + "healthz", timeout=2)
                break
            except httpx.TransportError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        assert r.json()["status"] == "ok"
        assert httpx.get(url, timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
