"""Bounded lanes for the web server's work: a heavy request (a plan search) cannot take every worker.

FastAPI runs the endpoints in a thread pool of 40; under the interpreter lock, forty plan searches at
once would each get a fortieth of the CPU and every estimate behind them would wait for all of them.
Each request instead takes a slot of its lane before computing: `plan` searches one at a time
(HEAVY_SLOTS), estimates and config reads a few at a time (LIGHT_SLOTS), so a burst of plans queues
behind itself and estimates keep their own slots. A request that cannot get a slot within
QUEUE_TIMEOUT_S is answered 503 (busy) rather than held open.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

HEAVY_SLOTS = 1
"""Plan searches computed at once (each is up to MAX_PLAN_CONFIGS configurations, ~1 s of CPU)."""
LIGHT_SLOTS = max(2, min(8, os.cpu_count() or 2))
"""Estimates and config reads computed at once: about one per core (more only time-slice the
interpreter lock)."""
QUEUE_TIMEOUT_S = 30.0
"""Longest wait for a slot before a request is answered 503 (busy), s."""


class Busy(Exception):
    """No slot came free within QUEUE_TIMEOUT_S."""


_LANES = {"heavy": threading.BoundedSemaphore(HEAVY_SLOTS), "light": threading.BoundedSemaphore(LIGHT_SLOTS)}


@contextmanager
def lane(kind: str, timeout: float = QUEUE_TIMEOUT_S) -> Iterator[None]:
    """Hold a slot of the `heavy` or `light` lane while computing; Busy if none frees in time."""
    sem = _LANES[kind]
    if not sem.acquire(timeout=timeout):
        raise Busy(f"the server is busy with other {kind} requests; try again")
    try:
        yield
    finally:
        sem.release()


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is refused with 413 as it arrives, with or
    without a Content-Length (a chunked body is counted chunk by chunk, never buffered past the limit)."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    from starlette.exceptions import HTTPException

                    raise HTTPException(status_code=413, detail=[{
                        "loc": ["body"], "msg": f"request body over {self.max_bytes // (1024 * 1024)} MiB",
                        "type": "too_large"}])
            return message

        await self.app(scope, limited, send)
