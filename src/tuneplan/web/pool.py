"""Bounded lanes for the web server's work: a heavy request (a plan search) cannot take every worker.

FastAPI runs the endpoints in a thread pool of 40; under the interpreter lock, forty plan searches at
once would each get a fortieth of the CPU and every estimate behind them would wait for all of them.
Each request instead takes a slot of its lane before computing: `plan` searches one at a time
(HEAVY_SLOTS), in a worker process of their own (`plan_in_worker`: their CPU never holds this
process's interpreter lock), estimates and config reads in up to LIGHT_SLOTS threads, so a burst of
plans queues behind itself and estimates keep answering. A request that cannot get a slot within
QUEUE_TIMEOUT_S is answered 503 (busy) rather than held open.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tuneplan.errors import InputError, TuneplanError

HEAVY_SLOTS = 1
"""Plan searches computed at once (each is up to MAX_PLAN_CONFIGS configurations, ~1 s of CPU)."""
LIGHT_SLOTS = 32
"""Estimates and config reads computed at once (FastAPI's pool has 40 threads: the rest stay free
for the page, the catalogs and the plans' waits)."""
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

    def __init__(self, app, max_bytes: int, paths: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.paths = paths or {}  # a larger limit for the upload routes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        seen = 0
        limit = self.paths.get(scope.get("path", ""), self.max_bytes)

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    from starlette.exceptions import HTTPException

                    raise HTTPException(status_code=413, detail=[{
                        "loc": ["body"], "msg": f"request body over {limit // (1024 * 1024)} MiB",
                        "type": "too_large"}])
            return message

        await self.app(scope, limited, send)


PLAN_PROCESSES = 1
"""Worker processes for plan searches: a plan computes outside the server's process, so its CPU time
never holds the interpreter lock the estimates need (one at a time, with HEAVY_SLOTS)."""
PLAN_TIMEOUT_S = 300.0
"""Longest a plan search may compute in its worker before the request is answered 503, s."""

_EXECUTOR = None
_EXECUTOR_LOCK = threading.Lock()


def _executor():
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            _EXECUTOR = ProcessPoolExecutor(max_workers=PLAN_PROCESSES,
                                            mp_context=multiprocessing.get_context("spawn"))
            _register_exit()
        return _EXECUTOR


WORKER_EXIT_S = 2.0
"""How long a worker gets to leave on its own at shutdown before it is terminated, s."""

_EXIT_REGISTERED = False


def _register_exit() -> None:
    """Shut the pool down however this process ends: the server's lifespan end, interpreter exit, or
    SIGTERM (uvicorn handles it while serving; before and after, the default handler would exit without
    running atexit, so SIGTERM becomes a normal exit where no handler is installed)."""
    global _EXIT_REGISTERED
    if _EXIT_REGISTERED:
        return
    import atexit
    import signal

    atexit.register(shutdown)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
            signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, lambda signum, frame: (shutdown(), _exit_on_signal(signum)))
    _EXIT_REGISTERED = True


def _exit_on_signal(signum: int) -> None:
    raise SystemExit(128 + signum)


def shutdown() -> None:
    """Stop the plan worker and wait for it to leave (at the server's shutdown, and on every other exit
    path: `_register_exit`): an idle worker takes the executor's sentinel and exits; one still computing
    a plan is terminated after WORKER_EXIT_S. Once the workers are gone, multiprocessing's resource
    tracker exits with this process (the workers held its pipe open)."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        ex, _EXECUTOR = _EXECUTOR, None
    if ex is None:
        return
    procs = list((getattr(ex, "_processes", None) or {}).values())
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.join(timeout=WORKER_EXIT_S)
        for stop in (p.terminate, p.kill):  # still there: terminated, then killed
            if p.is_alive():
                stop()
                p.join(timeout=WORKER_EXIT_S)
    ex.shutdown(wait=True)  # the workers are gone: the executor's thread closes its queues and leaves


def _plan_job(spec, kwargs: dict):
    """In the worker: the plan, or the user's error as plain data (errors with their own constructors
    do not survive pickling)."""
    from tuneplan.plan.search import plan_run as plan

    try:
        return ("ok", plan(spec, **kwargs))
    except InputError as exc:
        return ("input", exc.field, str(exc).removeprefix(f"{exc.field}: "))
    except TuneplanError as exc:
        return ("tuneplan", "", str(exc))


def warm() -> None:
    """Start the plan worker and load its imports, so the first plan does not pay for them."""
    _executor().submit(_import_planner)


def _import_planner() -> None:
    import tuneplan.plan.search  # noqa: F401


def plan_in_worker(spec, kwargs: dict):
    """`plan(spec, **kwargs)` computed in the worker process; its errors raised here as they were.
    Falls back to this process if the worker cannot be used (it died, or the result cannot travel)."""
    from concurrent.futures import TimeoutError as FutureTimeout
    from concurrent.futures.process import BrokenProcessPool

    try:
        kind, *rest = _executor().submit(_plan_job, spec, kwargs).result(timeout=PLAN_TIMEOUT_S)
    except FutureTimeout:
        shutdown()
        raise Busy(f"the plan search took over {PLAN_TIMEOUT_S:.0f} s; choose a smaller search") from None
    except (BrokenProcessPool, OSError, RuntimeError):
        shutdown()
        from tuneplan.plan.search import plan_run as plan

        return plan(spec, **kwargs)
    if kind == "ok":
        return rest[0]
    field, text = rest
    raise InputError(field, text) if kind == "input" else TuneplanError(text)
