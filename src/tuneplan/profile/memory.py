"""Peak memory of one measured configuration, and the simulated memory cap (`--max-mem-gib`).

CPU: the peak resident set size of the process. On Linux the kernel's high-water mark (VmHWM) is
reset before each configuration by writing 5 to /proc/self/clear_refs, so each row gets its own
peak; elsewhere a sampling thread polls the RSS with psutil.
CUDA: torch's max allocated / max reserved, reset per configuration.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

GIB = float(1 << 30)


class ProfileOOM(RuntimeError):
    """Raised by the simulated cap: the message says 'out of memory' like torch's own."""


def is_oom(exc: BaseException) -> bool:
    """An out-of-memory failure (torch's, the allocator's, the OS's, or our simulated cap)."""
    if isinstance(exc, (MemoryError, ProfileOOM)):
        return True
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return any(s in text for s in ("out of memory", "cannot allocate", "can't allocate",
                                       "failed to allocate", "not enough memory"))
    return False


def _status_kib(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_rss_bytes() -> int:
    kib = _status_kib("VmRSS")
    if kib is not None:
        return kib * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


class PeakTracker:
    """Peak memory since `reset()`: process RSS on CPU, torch allocator stats on CUDA."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.baseline = self._poll_peak = 0
        self._clear_refs = Path("/proc/self/clear_refs")
        self._poll_stop: threading.Event | None = None
        self._poll_thread: threading.Thread | None = None
        self.use_hwm = False

    def reset(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.baseline = torch.cuda.memory_allocated()
            return
        try:
            self._clear_refs.write_text("5")
            self.use_hwm = _status_kib("VmHWM") is not None
        except OSError:
            self.use_hwm = False
        self.baseline = current_rss_bytes()
        if not self.use_hwm:
            self._start_polling()

    def _start_polling(self) -> None:
        self.stop()
        self._poll_peak = current_rss_bytes()
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(0.002):
                self._poll_peak = max(self._poll_peak, current_rss_bytes())

        self._poll_stop = stop
        self._poll_thread = threading.Thread(target=poll, daemon=True)
        self._poll_thread.start()

    def stop(self) -> None:
        if self._poll_stop is not None and self._poll_thread is not None:
            self._poll_stop.set()
            self._poll_thread.join(timeout=1)
        self._poll_stop = self._poll_thread = None

    def peak_bytes(self) -> int:
        """Peak allocated (CUDA) or peak RSS of the whole process (CPU)."""
        if self.cuda:
            import torch

            return int(torch.cuda.max_memory_allocated())
        if self.use_hwm:
            kib = _status_kib("VmHWM")
            if kib is not None:
                return kib * 1024
        return max(self._poll_peak, current_rss_bytes())

    def peak_reserved_bytes(self) -> int | None:
        if not self.cuda:
            return None
        import torch

        return int(torch.cuda.max_memory_reserved())

    def growth_bytes(self) -> int:
        return max(0, self.peak_bytes() - self.baseline)


class MemoryCap:
    """`--max-mem-gib`: a simulated device memory size.

    CUDA: torch.cuda.set_per_process_memory_fraction, so the allocator raises a real OOM.
    CPU: `check()` raises ProfileOOM once the peak RSS growth since the configuration started exceeds
    the cap (checked after the model is built, after each backward and each optimizer step). In a
    data-parallel run the check is collective (max over ranks), so every rank stops together.
    """

    def __init__(self, cap_gib: float | None, tracker: PeakTracker, collective: bool = False) -> None:
        self.cap_gib, self.tracker, self.collective = cap_gib, tracker, collective
        self._cuda_set = False

    def __enter__(self) -> MemoryCap:
        if self.cap_gib and self.tracker.cuda:
            import torch

            dev = torch.device(self.tracker.device)
            total = torch.cuda.get_device_properties(dev).total_memory
            frac = min(1.0, self.cap_gib * GIB / total)
            torch.cuda.set_per_process_memory_fraction(frac, dev)
            self._cuda_set = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda_set:
            import torch

            torch.cuda.set_per_process_memory_fraction(1.0, torch.device(self.tracker.device))
            self._cuda_set = False

    def check_predicted(self, what: str, extra_bytes: float) -> None:
        """Out of memory if the growth so far plus `extra_bytes` that must still be allocated (a
        lower bound) exceeds the cap: a configuration that cannot fit is not run at all."""
        if not self.cap_gib or self.tracker.cuda:
            return
        need = float(self.tracker.growth_bytes()) + extra_bytes
        if need > self.cap_gib * GIB:
            raise ProfileOOM(f"out of memory (predicted): at least {need / GIB:.3g} GiB with the {what} "
                             f"> --max-mem-gib {self.cap_gib:g}")

    def check(self, where: str) -> None:
        if not self.cap_gib or self.tracker.cuda:
            return
        growth = float(self.tracker.growth_bytes())
        if self.collective:
            import torch
            import torch.distributed as dist

            t = torch.tensor([growth], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            growth = float(t.item())
        if growth > self.cap_gib * GIB:
            raise ProfileOOM(
                f"out of memory ({where}): peak RSS grew by {growth / GIB:.3g} GiB > --max-mem-gib "
                f"{self.cap_gib:g}")


def release_freed_memory() -> None:
    """Collect the previous configuration's objects and give the freed memory back to the OS (glibc
    keeps it resident otherwise, and the next configuration's RSS would not show its own allocations).

    The first call freezes everything alive (the imported libraries: millions of objects) out of the
    garbage collector's scans, so later full collections take milliseconds instead of seconds.
    """
    import gc

    gc.collect()
    if not gc.get_freeze_count():
        gc.freeze()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
"""glibc mallopt parameters (malloc.h)."""


def hold_freed_memory() -> bool:
    """Keep memory freed during the timed steps inside the process, as CUDA's caching allocator does
    on a GPU: no mmap for large blocks and no trimming at every free. Without it glibc maps and unmaps
    every tensor above 32 MiB (the logits, the loss's fp32 copies) at every step, and each step pays
    for zeroing fresh pages, a cost that no GPU run has and that grows faster than the work.
    `release_freed_memory` still gives everything back between configurations. False where the C
    library is not glibc."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        return False


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
