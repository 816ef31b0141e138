"""The web form's stack choices (issue 15): --framework and the checkpointing mode reach the estimate, and
the command line the page offers carries them; the precision select lists the low-precision recipes."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

import tuneplan  # noqa: E402
from tuneplan.specs.framework import framework_names  # noqa: E402
from tuneplan.web.app import STATIC_DIR, create_app  # noqa: E402

BASE = {"model": "Qwen/Qwen2.5-7B", "gpu": "H100-SXM5-80GB", "method": "lora", "examples": 2000,
        "tokens_per_example": 512}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(warm_up=False), raise_server_exceptions=False) as c:
        yield c


def test_options_list_frameworks_checkpointing_modes_and_precisions(client):
    o = client.get("/api/options").json()
    assert o["frameworks"] == list(framework_names())
    assert o["ckpt_modes"] == ["none", "selective", "full", "offload"]
    assert {"fp8", "nvfp4", "mxfp4"} <= set(o["precisions"])
    page = (STATIC_DIR / "index.html").read_text()
    assert 'id="framework"' in page and 'id="ckpt_mode"' in page and 'id="precision"' in page


def test_estimate_takes_framework_and_mode_as_the_python_api_does(client):
    body = {**BASE, "framework": "megatron", "ckpt_mode": "selective", "precision": "fp8"}
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 200, r.text
    j = r.json()
    assert "--framework megatron" in j["command"] and "--grad-ckpt selective" in j["command"]
    assert j["job"]["framework"] == "megatron" and j["job"]["ckpt_mode"] == "selective"
    py = tuneplan.estimate("Qwen/Qwen2.5-7B", "H100-SXM5-80GB", method="lora", examples=2000,
                           tokens_per_example=512, framework="megatron", ckpt_mode="selective", precision="fp8")
    assert j["step_time_s"] == pytest.approx(py.step_time_s, rel=1e-9)
    plain = client.post("/api/estimate", json=BASE).json()
    assert plain["step_time_s"] != pytest.approx(j["step_time_s"])


def test_unknown_framework_is_a_422(client):
    r = client.post("/api/estimate", json={**BASE, "framework": "nope"})
    assert r.status_code == 422
    r = client.post("/api/estimate", json={**BASE, "ckpt_mode": "sometimes"})
    assert r.status_code == 422
