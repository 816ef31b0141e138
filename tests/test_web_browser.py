"""The web planner in a real browser: Debian's chromium driven by Playwright for Python.

The server runs in-process (uvicorn in a thread, 127.0.0.1, a free port). The page's figures carry
their raw values in `data-value`; they are compared with `tuneplan.estimate(...)` / `tuneplan.plan_run(...)`
for the same inputs, and the text shown is checked against them at display precision. Screenshots go
to `test-artifacts/` (gitignored; CI keeps them as artifacts).

Skipped, with the reason, when /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import threading
import time
from pathlib import Path

import pytest

import tuneplan

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("TUNEPLAN_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
TIMEOUT_MS = 30_000


def _require_browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install playwright)")
    pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def server():
    _require_browser()
    import uvicorn

    from tuneplan.web.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    t0 = time.time()
    while not srv.started:
        if not th.is_alive() or time.time() - t0 > 60:
            pytest.fail("the web server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    th.join(timeout=10)


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    except Exception as exc:  # noqa: BLE001 - a chromium that cannot start is an environment problem
        pw.stop()
        pytest.skip(f"chromium did not start: {str(exc).splitlines()[0]}")
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def idle(pg) -> None:
    """Wait until the last change has been debounced, sent, answered and drawn."""
    pg.wait_for_function("() => window.tuneplanIdle && window.tuneplanIdle()", timeout=TIMEOUT_MS)


def value(pg, sel: str) -> float | None:
    v = pg.get_attribute(sel, "data-value")
    return None if v in (None, "") else float(v)


def shown_seconds(text: str) -> float:
    m = re.match(r"([\d,.]+) (s|min|h|days)$", text.strip())
    assert m, text
    return float(m.group(1).replace(",", "")) * {"s": 1, "min": 60, "h": 3600, "days": 86400}[m.group(2)]


def shown_number(text: str) -> float:
    m = re.search(r"[\d,]*\.?\d+", text)
    assert m, text
    return float(m.group(0).replace(",", ""))


def switch_job(pg, method: str, gpus: int, micro_batch: int):
    """Change the estimate form's method, GPU count and micro-batch (Llama-3.1-8B on A100-SXM4-80GB, 30,000 x 900
    tokens x 3 epochs, as the test filled it) and return the Python API's estimate of the same job."""
    import tuneplan

    pg.select_option("#method", method)
    pg.fill("#gpus", str(gpus))
    pg.fill("#micro_batch", str(micro_batch))
    idle(pg)
    return tuneplan.estimate("meta-llama/Llama-3.1-8B", "A100-SXM4-80GB", method=method, gpus=gpus,
                             micro_batch=micro_batch, examples=30000, tokens_per_example=900, epochs=3)


def choose_model(pg, typed: str, name: str) -> None:
    pg.click("#model-search")
    pg.fill("#model-search", "")
    pg.type("#model-search", typed)
    pg.click(f'#model-list li[data-name="{name}"]')


def shot(pg, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / name), full_page=True)


# ---------------------------------------------------------------------------------------------------


def test_estimate_page_shows_the_python_api_figures(page, server):
    page.goto(server + "/")
    idle(page)
    assert page.get_attribute("#r-wall", "data-value")  # the default inputs are estimated on load

    bodies: list = []  # what the page sends: it states every setting it shows
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.url.endswith("/api/estimate") else None)
    choose_model(page, "llama 3.1 8b", "meta-llama/Llama-3.1-8B")
    page.select_option("#gpu", "A100-SXM4-80GB")
    page.select_option("#method", "qlora")
    page.fill("#gpus", "2")
    page.fill("#micro_batch", "2")
    page.fill("#examples", "30000")
    page.fill("#tokens_per_example", "900")
    page.fill("#epochs", "3")
    idle(page)

    ref = tuneplan.estimate("meta-llama/Llama-3.1-8B", "A100-SXM4-80GB", method="qlora", gpus=2, micro_batch=2,
                            examples=30000, tokens_per_example=900, epochs=3)
    assert value(page, "#r-wall") == pytest.approx(ref.wall_clock_s, rel=1e-9)
    assert value(page, "#r-device-hours") == pytest.approx(ref.device_hours, rel=1e-9)
    assert value(page, "#r-cost") == pytest.approx(ref.cost_usd, rel=1e-9)
    assert value(page, "#r-mem") == pytest.approx(ref.memory_per_gpu_gib, rel=1e-9)
    assert value(page, "#r-tps") == pytest.approx(ref.tokens_per_s, rel=1e-9)
    assert value(page, "#r-energy") == pytest.approx(ref.energy_kwh, rel=1e-9)
    # what a person reads, at display precision
    assert shown_seconds(page.inner_text("#r-wall")) == pytest.approx(ref.wall_clock_s, rel=0.01)
    assert shown_number(page.inner_text("#r-device-hours")) == pytest.approx(ref.device_hours, rel=0.01)
    assert shown_number(page.inner_text("#r-cost")) == pytest.approx(ref.cost_usd, rel=0.01, abs=0.006)
    assert page.get_attribute("#verdict", "data-fits") == str(ref.fits).lower()
    verdict = page.inner_text("#verdict")
    assert verdict.startswith("Fits" if ref.fits else "Does not fit")
    if ref.max_micro_batch:
        assert f"Largest micro-batch that fits: {ref.max_micro_batch}" in verdict
    fit_gib = ref.extra.get("memory_fit_gib", ref.memory_per_gpu_gib) if ref.memory_per_gpu_gib > ref.memory_capacity_gib \
        else ref.memory_per_gpu_gib
    assert shown_number(verdict.split(" of ")[0]) <= ref.memory_capacity_gib or not ref.fits  # never "fits: 105 of 80"
    assert shown_number(verdict.split(" of ")[0]) == pytest.approx(fit_gib, rel=0.01)
    # the interval is as wide as what the estimate leaves to defaults (learn.intervals): the Python API's
    # for the settings the page stated
    from tuneplan.web.schemas import ESTIMATE_JOB, EstimateRequest

    req = EstimateRequest(**bodies[-1])
    stated = tuneplan.estimate(req.model, req.gpu, ckpt_mode=req.ckpt_mode, **{
        f: getattr(req, n) for n, f in ESTIMATE_JOB.items() if n != "rate" and getattr(req, n) is not None})
    assert stated.wall_clock_s == pytest.approx(ref.wall_clock_s, rel=1e-12)
    if stated.interval:
        lo, hi = stated.interval["wall_clock_s_low"], stated.interval["wall_clock_s_high"]
        m = re.search(r"interval (.+) – (.+)$", page.inner_text("#r-wall-interval"))
        assert m and shown_seconds(m.group(1)) == pytest.approx(lo, rel=0.01)
        assert shown_seconds(m.group(2)) == pytest.approx(hi, rel=0.01)
    assert value(page, "#r-maxmb") == ref.max_micro_batch
    assert page.locator("#assumptions li").count() == len(ref.assumptions)
    assert page.locator("#mem-legend li").count() >= 4 and page.locator("#step-legend li").count() >= 3

    # the command line is a valid `tuneplan estimate` for the same inputs
    from tuneplan.cli import build_parser
    from tuneplan.commands.common import job_kwargs

    cmd = page.inner_text("#command")
    args = build_parser("estimate").parse_args(shlex.split(cmd)[1:])
    again = tuneplan.estimate(args.model, args.gpu, **job_kwargs(args))
    assert again.wall_clock_s == pytest.approx(ref.wall_clock_s, rel=1e-12)
    shot(page, "web.png")

    # a peak above the GPU that fits (blocks cached for other batch shapes): the verdict gives the figure it is
    # judged on, never "Fits: 96 GiB of 80 GiB"
    ref3 = switch_job(page, "lora", 1, 4)
    assert ref3.fits and ref3.memory_per_gpu_gib > ref3.memory_capacity_gib
    verdict = page.inner_text("#verdict")
    assert verdict.startswith("Fits") and "with blocks cached for other batch shapes" in verdict
    assert shown_number(verdict.split(" of ")[0]) == pytest.approx(ref3.extra["memory_fit_gib"], rel=0.01)

    # a configuration that does not fit: the verdict turns
    ref2 = switch_job(page, "full", 1, 16)
    assert ref2.fits is False
    assert page.get_attribute("#verdict", "data-fits") == "false"
    assert page.inner_text("#verdict").startswith("Does not fit")
    assert value(page, "#r-mem") == pytest.approx(ref2.memory_per_gpu_gib, rel=1e-9)
    assert value(page, "#r-maxmb") == ref2.max_micro_batch
    assert page.locator("#mem-bar.over").count() == 1
    if ref2.suggestions:
        assert "To make it fit" in page.inner_text("#warnings")
    shot(page, "web-does-not-fit.png")


def test_plan_view_draws_the_pareto_chart(page, server):
    page.goto(server + "/")
    idle(page)
    page.click("#tab-plan")
    idle(page)
    assert "view=plan" in page.url
    page.wait_for_selector("#plan-chart canvas")
    assert int(page.get_attribute("#plan-chart", "data-points")) > 5
    # the page's default question, asked of the Python API
    gpus = page.eval_on_selector_all("#plan-gpus input:checked", "els => els.map(e => e.value)")
    methods = page.eval_on_selector_all("#plan-methods input:checked", "els => els.map(e => e.value)")
    ref = tuneplan.plan_run("Qwen/Qwen2.5-7B", gpus=gpus, methods=methods, max_gpus=8, examples=10000,
                        tokens_per_example=512, epochs=1)
    rec = json.loads(page.get_attribute("#plan-rec", "data-value"))
    assert (rec["gpu"], rec["gpus"], rec["method"]) == (ref.recommended["gpu"], ref.recommended["gpus"],
                                                        ref.recommended["method"])
    assert rec["cost_usd"] == pytest.approx(ref.recommended["cost_usd"], rel=1e-9)
    assert "Recommended" in page.inner_text("#plan-rec")
    assert page.locator("#plan-table tbody tr.recommended").count() == 1
    # the chart's canvas has been drawn on (not blank)
    painted = page.evaluate("""() => { const c = document.querySelector('#plan-chart canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""")
    assert painted > 1000

    # sortable table: by wall clock, then reversed
    page.click('#plan-table th[data-key="wall_clock_s"]')
    col = page.eval_on_selector_all("#plan-table thead th", "els => els.map(e => e.dataset.key)")
    times = [float(v) for v in page.eval_on_selector_all(
        f"#plan-table tbody tr td:nth-child({col.index('wall_clock_s') + 1})", "els => els.map(e => e.dataset.value)")]
    assert times == sorted(times) and len(times) > 5
    page.click('#plan-table th[data-key="wall_clock_s"]')
    times_desc = [float(v) for v in page.eval_on_selector_all(
        f"#plan-table tbody tr td:nth-child({col.index('wall_clock_s') + 1})", "els => els.map(e => e.dataset.value)")]
    assert times_desc == sorted(times_desc, reverse=True)
    assert page.inner_text("#command").startswith("tuneplan plan --model Qwen/Qwen2.5-7B")

    # a deadline changes the question
    page.fill("#deadline_h", "0.02")
    idle(page)
    assert page.locator("#plan-rec").inner_text() != ""
    shot(page, "web-plan.png")


def test_share_url_restores_the_page(page, server, browser):
    page.goto(server + "/")
    idle(page)
    choose_model(page, "qwen3 8b", "Qwen/Qwen3-8B")
    page.select_option("#gpu", "L40S-48GB")
    page.select_option("#provider", index=1)
    page.fill("#examples", "5000")
    page.check("#grad_ckpt")
    idle(page)
    url = page.url
    assert "model=Qwen%2FQwen3-8B" in url and "gpu=L40S-48GB" in url and "grad_ckpt=true" in url
    wall = value(page, "#r-wall")

    other = browser.new_page()
    try:
        other.goto(url)
        idle(other)
        assert other.input_value("#model-search") == "Qwen/Qwen3-8B"
        assert other.input_value("#gpu") == "L40S-48GB"
        assert other.is_checked("#grad_ckpt")
        assert value(other, "#r-wall") == pytest.approx(wall, rel=1e-12)
    finally:
        other.close()


def test_bad_input_shows_the_reason_and_recovers(page, server):
    page.goto(server + "/")
    idle(page)
    page.fill("#examples", "-5")
    idle(page)
    assert page.is_visible("#error")
    assert "examples" in page.inner_text("#error")
    assert page.locator("#examples.invalid").count() == 1
    page.fill("#examples", "5000")
    idle(page)
    assert not page.is_visible("#error")
    assert page.locator(".invalid").count() == 0


def test_pasted_config_json(page, server):
    from conftest import tiny_llama_config
    from tuneplan.specs.architectures import model_from_config

    cfg = tiny_llama_config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, vocab_size=32000)
    page.goto(server + "/")
    idle(page)
    page.click("#config-box summary")
    page.fill("#config_json", json.dumps(cfg))
    page.fill("#config_name", "my-model")
    idle(page)
    ref = tuneplan.estimate(model_from_config(cfg, "my-model"), "H100-SXM5-80GB", method="lora", examples=10000,
                            tokens_per_example=512)
    assert value(page, "#r-wall") == pytest.approx(ref.wall_clock_s, rel=1e-9)
    assert "my-model" in page.inner_text("#model-info")
    assert "--model config.json" in page.inner_text("#command")


def test_phone_layout(browser, server):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                              has_touch=True)
    pg = ctx.new_page()
    try:
        pg.goto(server + "/")
        idle(pg)
        overflow = pg.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1
        assert pg.get_attribute("#verdict", "data-fits") in ("true", "false")
        shot(pg, "web-phone.png")
    finally:
        ctx.close()


def test_master_weights_option_for_full_fine_tuning(page, server):
    page.goto(server + "/")
    idle(page)
    page.click("#method-options summary")
    page.select_option("#method", "lora")
    idle(page)
    assert page.is_visible("#optimizer")
    assert not page.is_visible("#master_weights")  # adapters have no master copy to choose
    page.select_option("#method", "full")
    idle(page)
    assert page.is_visible("#master_weights")
    page.select_option("#master_weights", "fp32")
    idle(page)
    ref = tuneplan.estimate("Qwen/Qwen2.5-7B", "H100-SXM5-80GB", method="full", master_weights="fp32",
                            examples=10000, tokens_per_example=512, epochs=1)
    assert value(page, "#r-mem") == pytest.approx(ref.memory_per_gpu_gib, rel=1e-9)
    page.select_option("#master_weights", "none")
    idle(page)
    assert value(page, "#r-mem") < ref.memory_per_gpu_gib


def test_adapter_dtype_option_for_lora(page, server):
    page.goto(server + "/")
    idle(page)
    page.click("#method-options summary")
    page.select_option("#method", "lora")
    idle(page)
    assert page.is_visible("#adapter_dtype")
    fp32 = value(page, "#r-mem")
    page.select_option("#adapter_dtype", "compute")
    idle(page)
    ref = tuneplan.estimate("Qwen/Qwen2.5-7B", "H100-SXM5-80GB", method="lora", adapter_dtype="compute",
                            examples=10000, tokens_per_example=512, epochs=1)
    assert value(page, "#r-mem") == pytest.approx(ref.memory_per_gpu_gib, rel=1e-9)
    assert value(page, "#r-mem") < fp32  # no fp32 copies of the adapted modules' inputs
    assert "--adapter-dtype compute" in page.inner_text("#command")
    page.select_option("#method", "full")
    idle(page)
    assert not page.is_visible("#adapter_dtype")  # full fine-tuning has no adapters


def test_dataset_upload_fills_the_form(page, server, tmp_path):
    """Your dataset in the Data box: uploaded to /api/data, its examples, tokens per example and longest
    batch fill the fields, and the estimate follows."""
    from sample_data import write_all

    files = write_all(tmp_path / "data")
    page.goto(server + "/")
    idle(page)
    page.set_input_files("#data-tokenizer", str(files["tokenizer"]))
    page.set_input_files("#data-file", str(files["prompt_completion"]))
    page.wait_for_function("() => document.querySelector('#data-report').textContent.includes('examples')")
    idle(page)
    assert page.input_value("#examples") == "3"
    assert float(page.input_value("#tokens_per_example")) == pytest.approx(20 / 3, abs=0.05)
    assert page.input_value("#seq_len") == "8"  # the longest example: prompt + completion + BOS
    assert "padding waste" in page.inner_text("#data-report")
    assert "--examples 3" in page.inner_text("#command")
