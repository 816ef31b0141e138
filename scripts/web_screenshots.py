"""Screenshots of the real web planner for docs/web.md: the page served by `tuneplan.web.app`, driven by
Playwright in Chromium (/usr/bin/chromium, or $TUNEPLAN_CHROMIUM), at desktop and phone width.

    python scripts/web_screenshots.py            # writes docs/img/web-desktop.png, web-phone.png, web-plan.png

Needs the `web` and `test` extras (fastapi, uvicorn, playwright) and a Chromium binary.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
CHROMIUM = os.environ.get("TUNEPLAN_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
DESKTOP = {"width": 1280, "height": 1000}
PHONE = {"width": 390, "height": 844}
QUESTION = "?model=meta-llama%2FLlama-3.1-8B&method=lora&seq_len=2048&micro_batch=2&grad_ckpt=true"
"""The page's first question in the docs: does a Llama-3.1-8B LoRA run fit one H100 at 2048 tokens?"""
PLAN = "?view=plan&model=meta-llama%2FLlama-3.1-8B&deadline_h=3&budget_usd=40"


def serve() -> tuple[str, object, threading.Thread]:
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
        if time.time() - t0 > 60:
            raise SystemExit("the web server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", srv, th


def idle(pg) -> None:
    pg.wait_for_function("() => window.tuneplanIdle && window.tuneplanIdle()", timeout=60_000)


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    url, srv, th = serve()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        ctx = b.new_context(viewport=DESKTOP)
        pg = ctx.new_page()
        pg.goto(url + "/" + QUESTION)
        idle(pg)
        pg.screenshot(path=str(OUT / "web-desktop.png"))
        pg.goto(url + "/" + PLAN)
        idle(pg)
        pg.wait_for_selector("#plan-chart canvas")
        pg.screenshot(path=str(OUT / "web-plan.png"))
        ctx.close()
        ctx = b.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
        pg = ctx.new_page()
        pg.goto(url + "/" + PLAN)
        idle(pg)
        pg.wait_for_selector("#plan-table tbody tr")
        pg.locator("#plan-rec").scroll_into_view_if_needed()
        pg.evaluate("() => document.querySelector('#plan-rec').scrollIntoView({block: 'start'})")
        pg.screenshot(path=str(OUT / "web-phone.png"))
        ctx.close()
        b.close()
    srv.should_exit = True
    th.join(timeout=10)
    for name in ("web-desktop.png", "web-plan.png", "web-phone.png"):
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
