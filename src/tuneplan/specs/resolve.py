"""Turning what a user names into specs: a model (catalog name, Hugging Face id, config path or a
ModelSpec), a GPU (catalog name, GPU file, one-off flags, or a GPUSpec) and the $/GPU-hour rate."""

from __future__ import annotations

from tuneplan.errors import InputError, UnknownNameError
from tuneplan.specs.gpu import GPUSpec, gpu_from_dict, load_gpu_file, resolve_gpu
from tuneplan.specs.model import ModelSpec


def resolve_model_arg(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    from tuneplan.specs.catalog import resolve_model

    return resolve_model(model)


def resolve_gpu_arg(gpu: str | GPUSpec | None = None, gpu_file: str | None = None,
                    peak_tflops: float | None = None, memory_gib: float | None = None,
                    bandwidth_gbs: float | None = None, strict: bool = False) -> GPUSpec:
    """A catalog GPU, a user's GPU file, or a one-off from flags (flags override the others' figures).
    `strict`: refuse a family name (A100-80GB) instead of reading it as the catalog's default variant."""
    if isinstance(gpu, GPUSpec):
        base = gpu
    elif gpu_file:
        base = load_gpu_file(gpu_file)
    elif gpu:
        try:
            base = resolve_gpu(gpu, strict=strict)
        except UnknownNameError:
            if None in (peak_tflops, memory_gib, bandwidth_gbs):
                raise
            base = None  # all three figures given: a one-off GPU under the user's name
    else:
        base = None
    missing = [n for n, v in (("peak-tflops", peak_tflops), ("memory-gib", memory_gib),
                              ("bandwidth-gbs", bandwidth_gbs)) if v is None]
    if len(missing) == 3:
        if base is None:
            raise InputError("gpu", "give a catalog name (--gpu), a --gpu-file, or --peak-tflops, "
                             "--memory-gib and --bandwidth-gbs")
        return base
    if base is None and missing:
        raise InputError(missing[0], "is needed for a one-off GPU (with --peak-tflops, --memory-gib, "
                         "--bandwidth-gbs), or name a catalog --gpu to start from")
    d = base.to_dict() if base else {"name": gpu if isinstance(gpu, str) and gpu else "custom-gpu"}
    if peak_tflops is not None:
        d["peak_tflops"] = dict.fromkeys(("bf16", "fp16", "fp8", "fp32", "tf32"), peak_tflops)
        d["name"] = f"{d['name']} (custom peak)" if base else d["name"]
    for key, v in (("memory_gib", memory_gib), ("memory_bandwidth_gbs", bandwidth_gbs)):
        if v is not None:
            d[key] = v
    return gpu_from_dict(d, source="command-line flags")


def resolve_rate(gpu: GPUSpec, rate: float | None, provider: str | None,
                 prices: str | None = None) -> tuple[float | None, str]:
    if rate is not None:
        return rate, "--rate"
    from tuneplan.specs.prices import price_for

    p = price_for(gpu.name, provider=provider, path=prices)
    if p is None:
        return None, f"no price for {gpu.name} in the price file: pass --rate"
    return p.usd_per_gpu_hour, p.describe()
