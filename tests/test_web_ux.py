"""Issue 20, the page: stale figures under an error, the unknown-model error, a pasted config's name, the
plan chart's deadline and budget lines, the plan table on a phone, the memory legend's sum. In Chromium
(Playwright), with the fixtures of test_web_browser.py."""

from __future__ import annotations

import json
import re

import pytest

from test_web_browser import browser, idle, page, server, shot  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.browser


def test_stale_figures_dimmed_under_an_error(page, server):  # noqa: F811
    page.goto(server + "/")
    idle(page)
    assert page.get_attribute("#out", "data-stale") in (None, "false")
    from datetime import date

    from tuneplan.specs.prices import price_for

    p = price_for("H100-SXM5-80GB")  # the page's default GPU: an old price is a warning, with its date
    if (date.today() - date.fromisoformat(p.date_seen[:7] + "-01")).days > 400:
        assert "old" in page.inner_text("#warnings") and p.date_seen in page.inner_text("#warnings")
    page.fill("#examples", "-5")
    idle(page)
    assert page.is_visible("#error")
    assert page.get_attribute("#out", "data-stale") == "true"
    opacity = page.evaluate("() => getComputedStyle(document.querySelector('#view-estimate')).opacity")
    assert float(opacity) < 0.5
    page.fill("#examples", "5000")
    idle(page)
    assert page.get_attribute("#out", "data-stale") == "false"
    assert float(page.evaluate("() => getComputedStyle(document.querySelector('#view-estimate')).opacity")) == 1


def test_unknown_model_error_offers_the_paste_box(page, server):  # noqa: F811
    page.goto(server + "/")
    idle(page)
    page.click("#model-search")
    page.fill("#model-search", "meta-llama/Llama-9-8B")
    page.press("#model-search", "Enter")
    idle(page)
    text = page.inner_text("#error")
    assert "unknown model" in text
    assert text.count("meta-llama/Llama-3.1-8B") == 1  # the closest names once, not twice
    assert "path/to/config.json" not in text and "--model" not in text
    assert not page.evaluate("() => document.querySelector('#config-box').open")
    page.click("#error [data-action=paste-config]")
    assert page.evaluate("() => document.querySelector('#config-box').open")


def test_pasted_config_names_the_model_box(page, server):  # noqa: F811
    from conftest import tiny_llama_config

    cfg = tiny_llama_config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, vocab_size=32000)
    page.goto(server + "/")
    idle(page)
    page.click("#config-box summary")
    page.fill("#config_name", "my-model")
    page.fill("#config_json", json.dumps(cfg))
    idle(page)
    page.wait_for_function("() => document.querySelector('#model-search').value === 'my-model'")
    assert page.input_value("#model-search") == "my-model"


def test_memory_legend_adds_up_to_the_total(page, server):  # noqa: F811
    page.goto(server + "/")
    idle(page)
    for method in ("lora", "full", "qlora"):
        page.select_option("#method", method)
        idle(page)
        total = float(page.get_attribute("#mem-legend", "data-total"))
        assert float(page.get_attribute("#mem-legend", "data-sum")) == pytest.approx(total, rel=1e-6)
        shown = [float(x.replace(",", "")) for x in re.findall(r"([\d,.]+) GiB", page.inner_text("#mem-legend"))]
        n = len(shown)
        assert sum(shown) == pytest.approx(total, abs=0.05 * n + 0.05), (method, shown, total)


def test_plan_chart_lines_and_phone_columns(page, server, browser):  # noqa: F811
    page.goto(server + "/?view=plan&deadline_h=3&budget_usd=40")
    idle(page)
    page.wait_for_selector("#plan-chart canvas")
    assert float(page.get_attribute("#plan-chart", "data-deadline-h")) == 3
    assert float(page.get_attribute("#plan-chart", "data-budget-usd")) == 40
    # the dashed red lines are drawn: red pixels on the canvas
    red = page.evaluate("""() => { const c = document.querySelector('#plan-chart canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] > 180 && d[i + 1] < 90 && d[i + 2] < 90 && d[i + 3] > 200) n++;
        return n; }""")
    assert red > 100
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                              has_touch=True)
    pg = ctx.new_page()
    try:
        pg.goto(server + "/?view=plan&deadline_h=3&budget_usd=40")
        idle(pg)
        pg.wait_for_selector("#plan-table tbody tr")
        pg.locator("#plan-table").scroll_into_view_if_needed()
        width = pg.evaluate("() => window.innerWidth")
        for key in ("wall_clock_s", "cost_usd"):
            box = pg.locator(f'#plan-table th[data-key="{key}"]').bounding_box()
            assert box and box["width"] > 0 and box["x"] + box["width"] <= width, (key, box, width)
        assert not pg.locator('#plan-table th[data-key="grad_accum"]').is_visible()
        shot(pg, "web-plan-phone.png")
    finally:
        ctx.close()


def test_page_without_a_data_size_answers_the_fit(page, server):  # noqa: F811
    page.goto(server + "/")
    idle(page)
    page.fill("#examples", "")
    idle(page)
    assert not page.is_visible("#error")
    assert page.inner_text("#r-wall") == "needs a data size"
    assert page.get_attribute("#r-wall", "data-value") == ""
    assert page.get_attribute("#verdict", "data-fits") in ("true", "false")
    assert float(page.get_attribute("#r-mem", "data-value")) > 1
    assert "needs a data size" in page.inner_text("#r-cost-s")


def test_full_fine_tuning_says_its_master_weights_in_the_verdict(page, server):  # noqa: F811
    page.goto(server + "/?method=full&gpu=B200-180GB")
    idle(page)
    text = page.inner_text("#verdict")
    assert "fp32 master" in text and "16 bytes/param" in text
