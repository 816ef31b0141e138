"""One configuration in a child process, so that its death is recorded instead of ending the run.

The kernel's out-of-memory killer ends a process with SIGKILL: no Python exception, no `finally`,
nothing the measurement itself can write. `run_isolated` runs a function in a child process and
returns its result; a child that dies without one raises `ChildDied` with its exit code (negative:
the signal), which the profiler records as an `oom` row (SIGKILL) or an `error` row.

The child comes from a fork server that has imported torch but never run it: a child forked from a
parent whose torch has run (a `probe` or an earlier configuration) hangs in its first parallel op (GNU
OpenMP is not fork-safe), and cannot use CUDA once the parent initialised it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from tuneplan.errors import TuneplanError

SERVER_PRELOAD = ["torch", "transformers", "peft", "tuneplan.profile.runner"]
"""Modules the fork server imports once, so each CUDA child starts without re-importing them."""


class ChildDied(TuneplanError):
    """The child ended without a result (killed by a signal, or exited)."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        self.signal = -exitcode if exitcode is not None and exitcode < 0 else None
        super().__init__(describe_exit(exitcode))

    @property
    def killed(self) -> bool:
        """Killed with SIGKILL: what the kernel's OOM killer sends."""
        return self.signal == signal.SIGKILL


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "the measuring process did not finish"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            return (f"the measuring process was killed by {name} (the kernel's out-of-memory killer sends "
                    "it; no Python exception)")
        return f"the measuring process was killed by {name}"
    return f"the measuring process exited with code {exitcode} without a result"


def _sendable(exc: BaseException) -> tuple:
    """The exception as (class, args, attributes): rebuilt in the parent without calling its
    __init__ (InputError's takes other arguments than it stores); a TuneplanError with its text when
    the parts do not pickle."""
    parts = (type(exc), exc.args, dict(vars(exc)))
    try:
        pickle.loads(pickle.dumps(parts))
        return parts
    except Exception:  # noqa: BLE001 - any exception type that cannot cross the pipe
        return (TuneplanError, (str(exc) or type(exc).__name__,), {})


def _rebuilt(parts: tuple) -> BaseException:
    cls, args, attrs = parts
    exc = cls.__new__(cls)
    exc.args = args
    vars(exc).update(attrs)
    return exc


def _child(conn, fn: Callable[..., Any], args: tuple) -> None:
    try:
        result = ("ok", fn(*args))
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which re-raises it
        result = ("raise", _sendable(exc))
    try:
        conn.send(result)
    finally:
        conn.close()


START_METHOD = "forkserver"
"""How children start (multiprocessing's start method); tests that patch the measuring function in this
process set "fork" so that the child sees the patch."""


def run_isolated(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a child process: its return value, or the exception it raised (re-raised here);
    ChildDied when the child ends without either. `fn` and `args` must be picklable."""
    ctx = mp.get_context(START_METHOD)  # a fork server, CPU or CUDA (module docstring)
    if START_METHOD == "forkserver":
        ctx.set_forkserver_preload(SERVER_PRELOAD)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args), daemon=True)
    proc.start()
    send.close()
    got = None
    try:
        wait([recv, proc.sentinel])  # a result to read, or the child gone
        with contextlib.suppress(EOFError):  # the child closed the pipe without sending: it died
            got = recv.recv() if recv.poll() else None
        proc.join()
    except BaseException:
        if proc.is_alive():
            proc.kill()
        proc.join()
        raise
    finally:
        recv.close()
    if got is None:
        raise ChildDied(proc.exitcode)
    kind, value = got
    if kind == "raise":
        raise _rebuilt(value)
    return value
