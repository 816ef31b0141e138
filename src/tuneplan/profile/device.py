"""`tuneplan probe`: this device's achievable matmul TFLOP/s per precision and memory bandwidth,
saved as a GPU-catalog entry (YAML) that the estimators read like any catalog GPU.

Figures are measured, not datasheet peaks: the best of a few square matmul sizes (2 n^3 FLOPs each)
and of a few large tensor copies (read + write = 2 x bytes moved).
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tuneplan.errors import InputError

CPU_SIZES = (256, 512, 1024, 2048)
CUDA_SIZES = (2048, 4096, 8192)
ROUNDS = 3
"""Each figure is measured in this many rounds; the best round is kept, their spread checked."""
MAX_SPREAD = 0.10
"""Rounds whose best/worst differ by more than this are re-measured once, then warned about: a busy
machine (another process on the cores or the GPU) is not a slow device."""
CPU_TFLOPS_PER_THREAD_MIN = 0.002
"""Below 2 GFLOP/s per thread of fp32 matmul a CPU is not computing but waiting (a 2010 core with SSE2
does ~8 GFLOP/s per thread; a current AVX-512 core 50-100): the probe warns that the machine is busy."""
GPU_PEAK_SHARE = (0.2, 1.1)
"""A GPU's measured bf16/fp16 matmul outside this share of its catalog dense peak is implausible
(cuBLAS reaches 0.6-0.9 of peak on large square GEMMs; under 0.2 the GPU was shared or throttled)."""


def resolve_device(name: str | None) -> str:
    """`auto` -> cuda when present else cpu; checks that a named device exists."""
    import torch

    n = (name or "auto").strip().lower()
    if n == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if n == "cpu":
        return "cpu"
    m = re.fullmatch(r"cuda(?::(\d+))?", n)
    if not m:
        raise InputError("device", f"unknown device '{name}'", ["auto", "cpu", "cuda", "cuda:N"])
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no CUDA device visible"
        raise InputError("device", f"{name}: CUDA is not available here (torch {torch.__version__}, "
                                   f"{build}); use --device cpu")
    idx, count = int(m.group(1) or 0), torch.cuda.device_count()
    if idx >= count:
        raise InputError("device", f"{name}: only {count} CUDA device(s) here; use cuda:0..cuda:{count - 1}")
    return f"cuda:{idx}"


def sync(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that a timer sees it done."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _cpuinfo() -> dict[str, str]:
    """The first value of each key of /proc/cpuinfo (`model name`, `vendor_id`...); empty elsewhere."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            out.setdefault(key.strip().lower(), value.strip())
    return out


def device_name(device: str) -> str:
    """The CUDA device's name, or the CPU's model name."""
    if device.startswith("cuda"):
        import torch

        return str(torch.cuda.get_device_name(torch.device(device)))
    return _cpuinfo().get("model name") or platform.processor() or platform.machine() or "cpu"


def local_name(cuda_name: str | None) -> str:
    """The GPU entry name of a device that is no catalog GPU: `local-cpu`, or `local-<cuda device name>`."""
    return "local-" + re.sub(r"[^a-z0-9]+", "-", cuda_name.lower()).strip("-") if cuda_name else "local-cpu"


def _time_op(fn: Any, device: str, min_time: float, max_reps: int = 50) -> float:
    """Best seconds per call: one warm-up call, then calls until min_time has passed."""
    fn()
    sync(device)
    times: list[float] = []
    while len(times) < max_reps and (sum(times) < min_time or len(times) < 2):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def best_of_rounds(measure: Any, rounds: int = ROUNDS, max_spread: float = MAX_SPREAD) -> tuple[float, float]:
    """(best, spread) of a figure (higher is better) measured in rounds; re-measured once when the
    rounds' spread (best / worst - 1) is over max_spread, keeping the better of the two attempts."""
    best, spread = 0.0, float("inf")
    for _attempt in range(2):
        vals = [float(measure()) for _ in range(rounds)]
        hi, lo = max(vals), min(vals)
        spread = min(spread, hi / lo - 1.0 if lo > 0 else float("inf"))
        best = max(best, hi)
        if spread <= max_spread:
            break
    return best, spread


def plausibility_warnings(entry: dict[str, Any], cuda: bool, threads: int, catalog_peak_tflops: float | None
                          ) -> list[str]:
    """What in a probe's figures no healthy device of its kind gives."""
    out = []
    peaks = entry.get("peak_tflops", {})
    if not cuda:
        fp32 = peaks.get("fp32", 0.0)
        if fp32 < CPU_TFLOPS_PER_THREAD_MIN * max(threads, 1):
            out.append(f"fp32 matmul {fp32 * 1e3:.1f} GFLOP/s on {threads} threads is below "
                       f"{CPU_TFLOPS_PER_THREAD_MIN * 1e3:.0f} GFLOP/s per thread: the machine is busy; "
                       "re-run `tuneplan probe` when it is idle")
    elif catalog_peak_tflops:
        got = max(peaks.get("bf16", 0.0), peaks.get("fp16", 0.0))
        lo, hi = GPU_PEAK_SHARE
        if got and not lo * catalog_peak_tflops <= got <= hi * catalog_peak_tflops:
            out.append(f"16-bit matmul {got:.0f} TFLOP/s is {got / catalog_peak_tflops:.0%} of the catalog's "
                       f"dense peak {catalog_peak_tflops:.0f}: outside {lo:.0%}-{hi:.0%}; the GPU is shared, "
                       "throttled or misidentified")
    for what, spread in entry.get("_spreads", {}).items():
        if spread > MAX_SPREAD:
            out.append(f"{what}: measurements spread {spread:.0%} (over {MAX_SPREAD:.0%}) even when re-measured: "
                       "the machine is busy; the best round is kept")
    return out


def matmul_tflops(device: str, precision: str, sizes: Sequence[int], min_time: float = 0.2,
                  max_call_s: float = 1.0) -> float:
    """Best dense matmul TFLOP/s over the sizes; stops growing sizes once one call takes > max_call_s."""
    import torch

    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
             "fp16": torch.float16}[precision]
    cuda = device.startswith("cuda")
    old_tf32 = torch.backends.cuda.matmul.allow_tf32 if cuda else None
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    best = 0.0
    try:
        for n in sizes:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            t = _time_op(lambda a=a, b=b: torch.mm(a, b), device, min_time)
            best = max(best, 2.0 * n ** 3 / t / 1e12)
            del a, b
            if t > max_call_s:
                break
    finally:
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = bool(old_tf32)
    return best


def memory_bandwidth_gbs(device: str, mib: int, min_time: float = 0.2) -> float:
    """Best copy bandwidth in GB/s (1e9 bytes/s), counting the read and the write."""
    import torch

    n = mib * (1 << 20) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    t = _time_op(lambda: dst.copy_(src), device, min_time)
    return 2.0 * n * 4 / t / 1e9


def probe(device: str = "auto", name: str | None = None, quick: bool = False,
          threads: int | None = None) -> dict[str, Any]:
    """Measure this device; returns the GPU entry (keys of GPUSpec.to_dict)."""
    import torch

    dev = resolve_device(device)
    if threads:
        torch.set_num_threads(threads)
    cuda = dev.startswith("cuda")
    min_time = 0.05 if quick else 0.3
    sizes: Sequence[int] = ((512, 1024) if quick else CUDA_SIZES) if cuda else ((128, 256) if quick else CPU_SIZES)
    peaks: dict[str, float] = {}
    spreads: dict[str, float] = {}
    for p in ["fp32", "tf32", "bf16", "fp16"] if cuda else ["fp32", "bf16"]:
        if p == "bf16" and cuda and not torch.cuda.is_bf16_supported():
            continue
        try:
            v, spreads[f"{p} matmul"] = best_of_rounds(lambda p=p: matmul_tflops(dev, p, sizes, min_time=min_time))
        except RuntimeError:  # a precision this device's kernels do not support
            continue
        if v > 0:
            peaks[p] = round(v, 4 if v < 1 else 2)
    mib = 16 if quick else (1024 if cuda else 256)
    bw, spreads["copy bandwidth"] = best_of_rounds(lambda: memory_bandwidth_gbs(dev, mib, min_time=min_time))
    if cuda:
        props = torch.cuda.get_device_properties(dev)
        mem_gib = props.total_memory / 2 ** 30
        vendor = "AMD" if getattr(torch.version, "hip", None) else "NVIDIA"
        arch = f"sm_{props.major}{props.minor}"
        threads_note = ""
    else:
        import psutil

        mem_gib = psutil.virtual_memory().total / 2 ** 30
        vendor = _cpuinfo().get("vendor_id", "")
        vendor = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(vendor, vendor)
        arch = platform.machine()
        threads_note = f"; threads={torch.get_num_threads()}"
    dev_name = device_name(dev)
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    entry = {
        "name": name or local_name(dev_name if cuda else None),
        "memory_gib": round(mem_gib, 2),
        "memory_bandwidth_gbs": round(bw, 2),
        "peak_tflops": peaks,
        "tdp_w": 0,
        "matmul_efficiency": 1.0,  # the peaks above are the measured ones
        "intra_node_gbs": 0, "inter_node_gbps": 0, "vendor": vendor, "architecture": arch,
        "source": f"tuneplan probe {when} (torch {torch.__version__}) on {dev_name}",
        "notes": ("measured achievable figures, not datasheet peaks: best square matmul over sizes "
                  f"{','.join(map(str, sizes))}, tensor copy bandwidth (read+write); "
                  f"memory_gib = {'device memory' if cuda else 'system RAM'}{threads_note}"
                  + ("; quick probe" if quick else "")
                  + f"; best of {ROUNDS} rounds, spreads "
                  + ", ".join(f"{k} {v:.0%}" for k, v in spreads.items())),
        "_spreads": spreads,
    }
    entry["_warnings"] = plausibility_warnings(entry, cuda, torch.get_num_threads(),
                                               _catalog_peak(dev_name) if cuda else None)
    return entry


def _catalog_peak(device_name: str) -> float | None:
    """The catalog's dense 16-bit peak of the GPU this name resolves to (None when it resolves to none)."""
    from tuneplan.errors import TuneplanError
    from tuneplan.specs.gpu import resolve_gpu

    try:
        gpu = resolve_gpu(device_name)
    except (TuneplanError, KeyError, ValueError):
        return None
    return float(gpu.peak_tflops.get("bf16") or gpu.peak_tflops.get("fp16") or 0.0) or None


def save_entry(entry: dict[str, Any], out: str | Path | None = None) -> Path:
    """Validate the entry as a GPU spec and write it as YAML (default: user_gpu_dir()/<name>.yaml)."""
    import yaml

    from tuneplan.errors import write_user_text
    from tuneplan.specs.gpu import gpu_from_dict, user_gpu_dir

    gpu_from_dict(entry)
    fname = re.sub(r"[^\w.-]+", "_", str(entry["name"])) + ".yaml"
    if out is None:
        path = user_gpu_dir() / fname
    else:
        p = Path(out).expanduser()
        path = p / fname if (p.is_dir() or not p.suffix) else p
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise InputError("out", f"{path}: give a .yaml, .yml or .json file, or a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    json_file = path.suffix.lower() == ".json"
    text = json.dumps(entry, indent=2) + "\n" if json_file else yaml.safe_dump(entry, sort_keys=False)
    write_user_text(path, text, "out", "GPU file (YAML or JSON)")  # all at once: an earlier entry stays whole
    return path
