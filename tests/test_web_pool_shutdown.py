"""The web server's plan worker leaves with the server on every exit path (issue 34 point 6): after
SIGTERM no multiprocessing worker or resource tracker is left behind with parent 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for an init that may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        left = [p for p in pids if _running(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


CHILD = """
import sys, time
from multiprocessing import resource_tracker
from tuneplan.web import pool
ex = pool._executor()
ex.submit(int, 1).result(timeout=60)  # the worker is up
resource_tracker.ensure_running()
print(*ex._processes, resource_tracker._resource_tracker._pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_sigterm_leaves_no_worker_or_tracker():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stdout.readline()
        pids = [int(x) for x in line.split()]
        assert len(pids) == 2 and all(_running(p) for p in pids), (line, proc.stderr.read() if not line else "")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert _wait_gone(pids) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_shutdown_joins_the_worker():
    from tuneplan.web import pool

    ex = pool._executor()
    ex.submit(int, 1).result(timeout=60)
    workers = list(ex._processes.values())
    assert workers and all(p.is_alive() for p in workers)
    pool.shutdown()
    assert pool._EXECUTOR is None
    # gone, not left running (read from /proc: the executor's own thread may have reaped a worker first,
    # and multiprocessing's is_alive() reads a child another thread reaped as still running)
    assert _wait_gone([p.pid for p in workers], timeout=5.0) == []
    pool.shutdown()  # again: nothing to do
