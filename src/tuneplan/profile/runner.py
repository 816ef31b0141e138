"""Measure one configuration for real: build the model from its config with random weights, apply
the method, run warm-up and timed optimizer steps on synthetic token batches, and return a row.

torch, transformers and peft are imported inside the functions (never at module import).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tuneplan.errors import InputError, TuneplanError
from tuneplan.profile.config import (
    ModelSource,
    ProfileConfig,
    apply_overrides,
    load_model_source,
    lora_target_modules,
)
from tuneplan.profile.device import device_name, local_name, resolve_device, sync
from tuneplan.profile.memory import (
    GIB,
    MemoryCap,
    PeakTracker,
    cpu_count,
    hold_freed_memory,
    is_oom,
    release_freed_memory,
)
from tuneplan.profile.rows import FRAMEWORK, SOURCE

# ---------------------------------------------------------------- device and availability


_CUDA_ONLY = (
    ("method", "qlora", ("bitsandbytes",), "bitsandbytes", "--method lora"),
    ("method", "gptq-lora", ("gptqmodel", "auto_gptq"), "a GPTQ backend: gptqmodel or auto-gptq", "--method lora"),
    ("optimizer", "adamw-8bit", ("bitsandbytes",), "bitsandbytes", "--optimizer adamw"),
    ("attn", "flash_attention_2", ("flash_attn",), "the flash-attn package", "--attn sdpa"),
)
"""(option, value, modules one of which it needs besides CUDA, what they are, what to use instead)."""


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_available(cfg: ProfileConfig, device: str, src: ModelSource | None = None) -> None:
    """One-line InputError for anything this device or install cannot do (before any measurement)."""
    cfg.validate()
    from tuneplan.profile.stages import check_stage

    check_stage(cfg)
    cuda = device.startswith("cuda")
    if cfg.is_lora and not _has("peft"):
        raise InputError("method", f"{cfg.method}: needs the peft package; pip install peft")
    for fld, value, modules, what, instead in _CUDA_ONLY:
        if getattr(cfg, fld) == value and not (cuda and any(map(_has, modules))):
            raise InputError(fld, f"{value}: not available on this device (needs CUDA and {what}); use {instead}")
    qc = (src.config.get("quantization_config") or {}) if src else {}
    if cfg.method == "gptq-lora" and str(qc.get("quant_method", "")).lower() != "gptq":
        raise InputError("method", "gptq-lora: needs a GPTQ-quantized checkpoint folder as --model "
                                   "(random weights cannot be GPTQ-quantized without calibration data)")
    if cfg.precision in ("fp16", "amp-fp16") and not cuda:
        raise InputError("precision", f"{cfg.precision}: fp16 training is only profiled on CUDA; "
                                      "use bf16 or fp32 on CPU")
    if cuda:
        import torch

        if torch.cuda.device_count() < cfg.nproc:
            raise InputError("nproc", f"{cfg.nproc} processes need {cfg.nproc} CUDA devices; "
                                      f"{torch.cuda.device_count()} visible")
        if cfg.precision in ("bf16", "amp-bf16") and not torch.cuda.is_bf16_supported():
            raise InputError("precision", "bf16: this CUDA device has no bf16 support; use fp16 or fp32")
    if src is not None:
        check_architecture(src)


def check_architecture(src: ModelSource) -> None:
    """InputError unless this transformers can build the config as a causal LM."""
    import transformers
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    mt = str(src.config.get("model_type", ""))
    remedy = "use a catalog model of a supported architecture or a config.json of one"
    if mt not in CONFIG_MAPPING:
        extra = " (its config needs trust_remote_code, which the profiler does not run)" \
            if src.config.get("auto_map") else ""
        raise InputError("model", f"transformers {transformers.__version__} cannot build architecture "
                                  f"'{mt}' of {src.name}{extra}; {remedy}")
    if mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise InputError("model", f"'{mt}' ({src.name}) is not a causal LM in transformers "
                                  f"{transformers.__version__} (encoder-decoder or other); {remedy}")


# ---------------------------------------------------------------- model


QUANT_OF_METHOD = {"qlora": "nf4", "gptq-lora": "gptq-int4"}
"""The runs `quant` of the methods whose base weights are quantized (others: none)."""


@dataclass
class BuiltModel:
    model: Any
    n_layers_full: int
    layers: int | None
    hidden_size: int | None
    vocab_size: int
    params_built: int
    params_full: float
    trainable: int = 0
    attn_impl: str = ""
    quant: str = "none"
    build_s: float = 0.0


def _torch_dtype(precision: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def _find_layer_list(model: Any, n: int) -> Any:
    """The largest ModuleList of `n` modules (the decoder layers), or None."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()), default=None)


def build_config(src: ModelSource, cfg: ProfileConfig) -> tuple[Any, int]:
    """The transformers config (overrides applied, truncated to cfg.layers) and the full layer count."""
    from transformers import AutoConfig

    d = apply_overrides(src.config, cfg.config_override)
    mt = d.pop("model_type")
    drop = ["architectures", "transformers_version", "torch_dtype", "dtype", "auto_map"]
    if cfg.method != "gptq-lora":  # random weights are built unquantized (QLoRA quantizes them itself)
        drop.append("quantization_config")
    for k in drop:
        d.pop(k, None)
    try:
        config = AutoConfig.for_model(mt, **d)
    except (TypeError, ValueError, KeyError) as exc:
        raise InputError("model", f"cannot build a {mt} config from {src.name}: "
                                  f"{str(exc).splitlines()[0][:200]}") from None
    full = int(getattr(config, "num_hidden_layers", 0) or 0)
    if cfg.layers is not None:
        if full and cfg.layers > full:
            raise InputError("layers", f"{cfg.layers} is more than the {full} layers of {src.name}")
        config.num_hidden_layers = cfg.layers
        types = getattr(config, "layer_types", None)  # per-layer kinds (sliding/full attention, mamba...)
        if isinstance(types, list) and len(types) >= cfg.layers:
            config.layer_types = types[: cfg.layers]
    config.use_cache = False
    return config, full


def build_model(src: ModelSource, cfg: ProfileConfig, device: str) -> BuiltModel:
    """Random-weight model from the config, method applied, on the device."""
    import torch
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    config, full = build_config(src, cfg)
    torch.manual_seed(cfg.seed)
    dtype = _torch_dtype(cfg.precision)
    quant = QUANT_OF_METHOD.get(cfg.method, "none")
    try:
        if cfg.method == "qlora":
            model = _build_qlora_base(config, cfg, device)
        elif cfg.method == "gptq-lora":
            # the checkpoint's real GPTQ weights (truncated to --layers through the config)
            model = AutoModelForCausalLM.from_pretrained(str(Path(src.origin).parent), config=config,
                                                         device_map={"": device}, attn_implementation=cfg.attn,
                                                         dtype=dtype)
        else:
            # on CUDA the random weights are drawn on the GPU (a CPU init of billions of weights
            # takes minutes there); on CPU the context is a no-op
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(config, attn_implementation=cfg.attn, dtype=dtype)
    except (ValueError, ImportError) as exc:
        raise InputError("attn" if "attn" in str(exc).lower() or "attention" in str(exc).lower()
                         else "model", f"cannot build {src.name}: {str(exc).splitlines()[0][:200]}") from None
    n_built = int(getattr(model.config, "num_hidden_layers", 0) or 0) or full
    params_built = sum(p.numel() for p in model.parameters())
    layer_list = _find_layer_list(model, n_built) if n_built else None
    params_full = float(params_built)
    if layer_list is not None and full:
        params_full += sum(p.numel() for p in layer_list.parameters()) / n_built * (full - n_built)
    if quant == "none":
        model.to(device)
    if cfg.grad_ckpt:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = apply_method(model, cfg)
    model.train()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    attn_impl = str(getattr(model.config, "_attn_implementation", cfg.attn) or cfg.attn)
    return BuiltModel(model=model, n_layers_full=full, layers=cfg.layers,
                      hidden_size=getattr(config, "hidden_size", None),
                      vocab_size=int(config.vocab_size), params_built=params_built,
                      params_full=float(params_full), trainable=trainable, attn_impl=attn_impl,
                      quant=quant, build_s=time.perf_counter() - t0)


def _build_qlora_base(config: Any, cfg: ProfileConfig, device: str) -> Any:  # pragma: no cover - CUDA+bnb
    """NF4 base weights for real: save the random model, reload it quantized by bitsandbytes."""
    import tempfile

    import torch
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    dtype = _torch_dtype(cfg.precision if cfg.precision in ("bf16", "fp16") else "bf16")
    with tempfile.TemporaryDirectory(prefix="tuneplan-qlora-") as tmp:
        AutoModelForCausalLM.from_config(config, dtype=dtype).save_pretrained(tmp)
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                 bnb_4bit_compute_dtype=dtype, bnb_4bit_use_double_quant=True)
        model = AutoModelForCausalLM.from_pretrained(tmp, quantization_config=bnb, dtype=dtype,
                                                     device_map={"": device}, attn_implementation=cfg.attn)
    torch.cuda.empty_cache()
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=cfg.grad_ckpt)


def apply_method(model: Any, cfg: ProfileConfig) -> Any:
    """full: every weight trains. LoRA / DoRA (and QLoRA / GPTQ-LoRA on their bases): peft adapters."""
    if not cfg.is_lora:
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    targets = lora_target_modules(cfg.lora_targets)
    lc = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_rank, lora_dropout=0.0,
                    target_modules=targets, use_dora=cfg.method == "dora", task_type="CAUSAL_LM")
    try:
        with warnings.catch_warnings():  # peft still reads the deprecated is_gradient_checkpointing
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(model, lc)
    except ValueError as exc:
        raise InputError("lora-targets", f"{cfg.lora_targets}: {str(exc).splitlines()[0][:200]}") from None


def make_optimizer(cfg: ProfileConfig, params: list[Any]) -> Any:
    import torch

    lr = 1e-5
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if cfg.optimizer == "adafactor":
        if hasattr(torch.optim, "Adafactor"):
            return torch.optim.Adafactor(params, lr=lr)
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=lr, scale_parameter=False, relative_step=False)
    if cfg.optimizer == "adamw-8bit":  # pragma: no cover - CUDA+bnb only
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params, lr=lr)
    raise InputError("optimizer", f"unknown optimizer '{cfg.optimizer}'")


# ---------------------------------------------------------------- the measurement


@dataclass
class DistContext:
    """Set by the torchrun worker (profile.distributed) for data-parallel measurements."""

    rank: int
    wrap: Callable[[Any], Any]
    no_sync: Callable[[Any], contextlib.AbstractContextManager[Any]]
    max_over_ranks: Callable[[list[float]], list[float]]
    allreduce_time: Callable[[int, Any], float]


@dataclass
class Measured:
    step_times: list[float] = field(default_factory=list)
    nosync_times: list[float] = field(default_factory=list)
    peak_bytes: int = 0
    peak_growth_bytes: int = 0
    peak_reserved_bytes: int | None = None
    longest_batch_tokens: int | None = None  # tokens (padded) of the longest training micro-batch run
    allreduce_s: float | None = None
    build: BuiltModel | None = None


def _autocast(cfg: ProfileConfig, device: str) -> contextlib.AbstractContextManager[Any]:
    if not cfg.precision.startswith("amp-"):
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.split(":")[0], dtype=_torch_dtype(cfg.precision[4:]))


class _Steps:
    """The optimizer steps of one measurement; `clear` drops the model, optimizer and batch it holds."""

    def __init__(self, cfg: ProfileConfig, device: str, dist: DistContext | None, cap: MemoryCap, model: Any,
                 opt: Any, batch: Any, scaler: Any) -> None:
        self.cfg, self.device, self.dist, self.cap = cfg, device, dist, cap
        self.model, self.opt, self.batch, self.scaler = model, opt, batch, scaler

    def step(self, no_sync: bool = False) -> None:
        cfg, dist, cap, model, opt, scaler = self.cfg, self.dist, self.cap, self.model, self.opt, self.scaler
        for i in range(cfg.grad_accum):
            last = i == cfg.grad_accum - 1
            ctx = dist.no_sync(model) if (dist is not None and (no_sync or not last)) \
                else contextlib.nullcontext()
            with ctx:
                with _autocast(cfg, self.device):
                    loss = model(input_ids=self.batch, labels=self.batch).loss / cfg.grad_accum
                cap.check("forward")
                scaler.scale(loss).backward()
            cap.check("backward")
        scaler.step(opt)  # a disabled scaler (all but amp-fp16) passes the loss and the step through
        scaler.update()
        opt.zero_grad(set_to_none=True)
        cap.check("optimizer step")

    def timed(self, n: int, no_sync: bool = False) -> list[float]:
        times = []
        for _ in range(n):
            sync(self.device)
            t0 = time.perf_counter()
            self.step(no_sync)
            sync(self.device)
            times.append(time.perf_counter() - t0)
        return times

    def clear(self) -> None:
        self.model = self.opt = self.batch = self.scaler = None


def _run_steps(steps: _Steps, cfg: ProfileConfig, dist: DistContext | None, params: list, out: Measured) -> None:
    """Warm-up, then the timed steps (data parallel: synchronised and no-sync steps interleaved, so
    drift affects both alike, and the all-reduce timed on its own)."""
    import torch

    steps.timed(cfg.warmup)
    if dist is None:
        out.step_times = steps.timed(cfg.steps)
        return
    steps.timed(1, no_sync=True)
    n_nosync = max(2, (cfg.steps + 1) // 2)
    for i in range(cfg.steps):
        out.step_times += steps.timed(1)
        if i < n_nosync:
            out.nosync_times += steps.timed(1, no_sync=True)
    out.nosync_times += steps.timed(max(0, n_nosync - cfg.steps), no_sync=True)
    n_grad = sum(p.numel() for p in params)
    out.allreduce_s = dist.allreduce_time(n_grad, params[0].dtype if params else torch.float32)


def _record_peaks(out: Measured, tracker: PeakTracker, dist: DistContext | None) -> None:
    """The tracker's peaks into `out`; data parallel: step times and peaks of the slowest / largest rank."""
    out.peak_bytes, out.peak_growth_bytes = tracker.peak_bytes(), tracker.growth_bytes()
    out.peak_reserved_bytes = tracker.peak_reserved_bytes()
    if dist is None:
        return
    out.step_times = dist.max_over_ranks(out.step_times)
    out.nosync_times = dist.max_over_ranks(out.nosync_times)
    peaks = dist.max_over_ranks([float(out.peak_bytes), float(out.peak_growth_bytes),
                                 float(out.peak_reserved_bytes or 0)])
    out.peak_bytes, out.peak_growth_bytes = int(peaks[0]), int(peaks[1])
    out.peak_reserved_bytes = int(peaks[2]) if out.peak_reserved_bytes is not None else None


def _measure(cfg: ProfileConfig, src: ModelSource, device: str, dist: DistContext | None,
             out: Measured | None = None) -> Measured:
    """Fill `out` (the caller keeps it, so a failure still knows what was built)."""
    import torch

    tracker = PeakTracker(device)
    out = out if out is not None else Measured()
    release_freed_memory()
    if device == "cpu":
        hold_freed_memory()
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.cuda.empty_cache()
    tracker.reset()
    model = batch = params = steps = None
    try:
        if cfg.stage != "sft" or cfg.trainer == "trl":  # TRL's SFT / DPO / GRPO trainers (profile/stages.py)
            from tuneplan.profile.stages import measure_stage

            out.build = build_model(src, cfg, device)
            out.step_times, out.longest_batch_tokens = measure_stage(cfg, out.build, device)
            _record_peaks(out, tracker, None)
            return out
        with MemoryCap(cfg.max_mem_gib, tracker, collective=dist is not None) as cap:
            built = build_model(src, cfg, device)
            out.build = built
            model = built.model
            cap.check("model build")
            # certain lower bound of the peak: the weights (already counted) plus one fp32 copy of
            # the logits (the loss upcasts them); beyond the cap, no need to run the step to know
            cap.check_predicted("logits", 4 * cfg.micro_batch * cfg.seq_len * built.vocab_size)
            if dist is not None:
                model = dist.wrap(model)
            params = [p for p in model.parameters() if p.requires_grad]
            opt = make_optimizer(cfg, params)
            g = torch.Generator().manual_seed(cfg.seed + 1 + (dist.rank if dist else 0))
            batch = torch.randint(0, built.vocab_size, (cfg.micro_batch, cfg.seq_len), generator=g).to(device)
            out.longest_batch_tokens = int(batch.numel())  # every micro-batch is this one
            scaler = torch.amp.GradScaler("cuda", enabled=cfg.precision == "amp-fp16")
            steps = _Steps(cfg, device, dist, cap, model, opt, batch, scaler)
            opt = scaler = None
            _run_steps(steps, cfg, dist, params, out)
        sync(device)
        _record_peaks(out, tracker, dist)
        return out
    finally:
        tracker.stop()
        if steps is not None:
            steps.clear()
        model = batch = params = steps = None  # drop the references
        if out.build is not None:
            out.build.model = None
        release_freed_memory()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def gpu_column(device: str, override: str | None) -> str:
    """The runs `gpu` value: --gpu-name, else `local-cpu`, else the CUDA device's catalog name."""
    if override or not device.startswith("cuda"):
        return override or local_name(None)
    from tuneplan.specs.gpu import resolve_gpu

    name = device_name(device)
    try:
        return resolve_gpu(name).name
    except (TuneplanError, KeyError):
        return local_name(name)


def versions(modules: tuple[str, ...] = ("torch", "transformers", "peft")) -> dict[str, str]:
    """`<module>_version` of each installed module."""
    out = {}
    for mod in modules:
        with contextlib.suppress(ImportError):
            out[f"{mod}_version"] = str(getattr(importlib.import_module(mod), "__version__", ""))
    return out


def adapter_dtype() -> str:
    """The runs `adapter_dtype` of this install's peft: fp32 from 0.12 on (get_peft_model's
    autocast_adapter_dtype upcasts 16-bit adapters, and each adapted module casts its input to fp32),
    the compute dtype before."""
    try:
        import peft

        major, minor = (int(x) for x in re.findall(r"\d+", peft.__version__)[:2])
    except (ImportError, ValueError):
        return "fp32"
    return "fp32" if (major, minor) >= (0, 12) else "compute"


def config_row(cfg: ProfileConfig, src: ModelSource | None, device: str) -> dict[str, Any]:
    """The configuration part of a row (same for ok, oom and error rows)."""
    import torch

    fused_attn = cfg.attn in ("flash_attention_2", "sdpa")  # no seq x seq score matrix kept
    threads = cfg.threads or torch.get_num_threads()
    row: dict[str, Any] = {
        "source": SOURCE, "source_ref": "tuneplan profile (synthetic random tokens, random weights)",
        "model": cfg.model, "model_hf_id": src.hf_id if src else "", "method": cfg.method,
        "lora_rank": cfg.lora_rank if cfg.is_lora else None,
        "lora_targets": (cfg.lora_targets or "all-linear") if cfg.is_lora else None,
        "adapter_dtype": adapter_dtype() if cfg.is_lora else None,
        # make_optimizer's torch.optim.AdamW takes torch's default path: foreach on CUDA, a loop elsewhere
        "optimizer_impl": (("foreach" if str(device).startswith("cuda") else "for-loop")
                           if cfg.optimizer == "adamw" else None),
        "stage": cfg.stage, "precision": cfg.precision, "quant": QUANT_OF_METHOD.get(cfg.method, "none"),
        "optimizer": cfg.optimizer, "grad_ckpt": cfg.grad_ckpt, "flash_attn": fused_attn, "framework": FRAMEWORK,
        "sharding": {"none": "none", "ddp": "ddp", "fsdp": "fsdp-full"}[cfg.effective_sharding],
        "gpu": gpu_column(device, cfg.gpu_name), "gpus": cfg.nproc, "nodes": 1,
        "micro_batch_size": cfg.micro_batch, "grad_accum": cfg.grad_accum,
        "global_batch_size": cfg.micro_batch * cfg.grad_accum * cfg.nproc,
        "seq_len": cfg.seq_len, "avg_tokens_per_sample": cfg.seq_len, "dataset": "synthetic",
        "mem_kind": "allocated" if device.startswith("cuda") else "rss", "layers": cfg.layers,
        "warmup_steps": cfg.warmup, "nproc": cfg.nproc, "threads": threads, "device": device,
        "device_name": device_name(device), "attn_impl": cfg.attn,
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **versions(),
    }
    notes = [f"attn={cfg.attn}"]
    if cfg.config_override:
        notes.append("config_override=" + ";".join(f"{k}={v}" for k, v in cfg.config_override))
    if cfg.max_mem_gib:
        notes.append(f"max_mem_gib={cfg.max_mem_gib:g}")
    if not device.startswith("cuda"):
        notes.append("peak_mem_gib is the peak RSS of the whole process")
    row["notes"] = "; ".join(notes)
    return row


def _build_cells(b: BuiltModel | None) -> dict[str, Any]:
    if b is None:
        return {}
    return {"params_b": b.params_full / 1e9, "params_b_built": b.params_built / 1e9,
            "trainable_params_m": b.trainable / 1e6, "n_layers_full": b.n_layers_full,
            "hidden_size": b.hidden_size, "attn_impl": b.attn_impl, "build_s": b.build_s}


NOISY_STEP_SPREAD = 0.10
"""Step times whose p90/p10 differ by more than this flag a row `noisy` (calibrate down-weights it)."""


def _is_noisy(times: list[float]) -> bool:
    lo, hi = np.percentile(times, [10, 90])
    return bool(lo > 0 and hi / lo - 1.0 > NOISY_STEP_SPREAD)


def result_row(cfg: ProfileConfig, src: ModelSource | None, device: str, m: Measured) -> dict[str, Any]:
    row = config_row(cfg, src, device)
    row.update(_build_cells(m.build))
    med = statistics.median(m.step_times)
    tokens = cfg.tokens_per_step
    row.update({
        "status": "ok", "step_time_s": med, "step_time_s_p10": float(np.percentile(m.step_times, 10)),
        "step_time_s_p90": float(np.percentile(m.step_times, 90)),
        "step_time_s_std": statistics.pstdev(m.step_times), "noisy": _is_noisy(m.step_times),
        "n_steps": len(m.step_times), "tokens_per_s": tokens / med, "tokens_per_s_per_gpu": tokens / med / cfg.nproc,
        "samples_per_s": cfg.micro_batch * cfg.grad_accum * cfg.nproc / med, "runtime_s": sum(m.step_times),
        "train_tokens_total": tokens * len(m.step_times), "peak_mem_gib": m.peak_bytes / GIB,
        "peak_mem_reserved_gib": m.peak_reserved_bytes / GIB if m.peak_reserved_bytes is not None else None,
        # on CUDA peak_mem_gib is torch's allocated peak; on the CPU it is RSS and no allocator peak exists
        "peak_mem_allocated_gib": m.peak_bytes / GIB if device.startswith("cuda") else None,
        "longest_batch_tokens": m.longest_batch_tokens, "peak_mem_growth_gib": m.peak_growth_bytes / GIB,
    })
    if cfg.stage != "sft" or cfg.trainer == "trl":
        from tuneplan.profile.stages import stage_cells

        cells = stage_cells(cfg, med)
        note = cells.pop("notes_extra", "")
        row.update(cells)
        row["notes"] = "; ".join(x for x in (row.get("notes"), note) if x)
    if m.nosync_times:
        nos = statistics.median(m.nosync_times)
        row["comm_share"] = max(0.0, min(1.0, (med - nos) / med))
        row["step_time_nosync_s"] = nos
    if m.allreduce_s is not None:
        row["allreduce_s"] = m.allreduce_s
    return row


def failure_row(cfg: ProfileConfig, src: ModelSource | None, device: str, exc: BaseException,
                oom: bool, build: BuiltModel | None = None) -> dict[str, Any]:
    row = config_row(cfg, src, device)
    row.update(_build_cells(build))
    text = " ".join(str(exc).split()) or type(exc).__name__
    row.update({"status": "oom" if oom else "error", "error": f"{type(exc).__name__}: {text}"[:300]})
    row["notes"] = (row.get("notes") or "") + ("; out of memory at this size" if oom else "")
    return row


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n or old)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def prepare(cfg: ProfileConfig, src: ModelSource | None = None) -> tuple[ProfileConfig, ModelSource, str]:
    """Resolve the device and default precision; check everything that can be checked up front."""
    device = resolve_device(cfg.device)
    if not cfg.precision:
        cfg = replace(cfg, precision="bf16" if device.startswith("cuda") else "fp32")
    src = src if src is not None else load_model_source(cfg.model)
    check_available(cfg, device, src)
    return replace(cfg, device=device), src, device


_WARMED: set[tuple[Any, ...]] = set()


def _warm_process(cfg: ProfileConfig, src: ModelSource, device: str) -> None:
    """Once per process and kind of run: a throwaway 1-layer step, so the first measured
    configuration does not pay for lazy library initialisation (kernels, allocator pools)."""
    key = (src.config.get("model_type"), device, cfg.precision, cfg.method, cfg.attn, cfg.optimizer,
           cfg.grad_ckpt)
    if key in _WARMED:
        return
    _WARMED.add(key)
    tiny = replace(cfg, layers=1, seq_len=min(cfg.seq_len, 32), micro_batch=1, grad_accum=1, steps=1,
                   warmup=1, max_mem_gib=None)
    with contextlib.suppress(Exception):
        _measure(tiny, src, device, None)


def _run_here(cfg: ProfileConfig, src: ModelSource, device: str) -> dict[str, Any]:
    """Measure in this process: the row (ok, or oom / error for a failure the process survives)."""
    m = Measured()
    try:
        with _threads(cfg.threads):
            _warm_process(cfg, src, device)
            _measure(cfg, src, device, None, m)
            return result_row(cfg, src, device, m)
    except (TuneplanError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - any failure becomes a recorded row, profiling goes on
        row = failure_row(cfg, src, device, exc, is_oom(exc), m.build)
        del exc
        gc.collect()
        return row


def _run_in_child(cfg: ProfileConfig, src: ModelSource, device: str) -> dict[str, Any]:
    """Measure in a child process (profile/isolate.py): a child the OOM killer ends (SIGKILL) is an
    `oom` row, one ended otherwise an `error` row; the profiler goes on with the next configuration."""
    from tuneplan.profile.isolate import ChildDied, run_isolated

    try:
        return run_isolated(_run_here, cfg, src, device)
    except ChildDied as died:
        return failure_row(cfg, src, device, died, died.killed)


def _launch(cfg: ProfileConfig, src: ModelSource, device: str) -> dict[str, Any]:
    """Run one configuration under torchrun (the worker is profile.distributed); returns the row
    written by rank 0 (or a failure row)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tuneplan-dist-") as tmp:
        cfg_path, src_path, res_path = (Path(tmp, name) for name in ("config.json", "model_config.json", "result.json"))
        src_path.write_text(json.dumps(asdict(src)), encoding="utf-8")
        cfg_path.write_text(cfg.to_json(), encoding="utf-8")
        env = dict(os.environ)
        src_dir = str(Path(__file__).resolve().parents[2])  # the workers import this same copy of tuneplan
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_dir, env.get("PYTHONPATH", "")) if p)
        threads = cfg.threads or max(1, cpu_count() // cfg.nproc)
        if not device.startswith("cuda"):
            env["OMP_NUM_THREADS"] = str(threads)
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={cfg.nproc}", "-m", "tuneplan.profile.distributed",
               str(cfg_path), str(src_path), str(res_path)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=cfg.timeout_s)
            rc, log = proc.returncode, (proc.stdout or "") + (proc.stderr or "")
        except subprocess.TimeoutExpired as exc:
            rc, log = -1, f"torchrun timed out after {cfg.timeout_s:g} s " + str(exc.stderr or "")[-500:]
        if res_path.exists():
            return json.loads(res_path.read_text(encoding="utf-8"))
        row = config_row(cfg, src, device)
        lines = [ln for ln in log.splitlines() if ln.strip() and "warn" not in ln.lower()]
        tail = " | ".join(lines[-3:])[-280:]
        row.update({"status": "error", "error": f"torchrun exit {rc}: {tail}"})
        return row


def run_one(cfg: ProfileConfig, src: ModelSource | None = None) -> dict[str, Any]:
    """Measure one configuration; returns its row (status ok, oom or error). InputError for bad input.

    A configuration with nproc > 1 is launched with torchrun (see profile.distributed); with
    `cfg.isolate` a single-process one runs in a child process, so that even its death by the OOM
    killer leaves a row.
    """
    cfg, src, device = prepare(cfg, src)
    t0 = time.perf_counter()
    if cfg.nproc > 1:
        row = _launch(cfg, src, device)
    elif cfg.isolate:
        row = _run_in_child(cfg, src, device)
    else:
        row = _run_here(cfg, src, device)
    row["wall_s"] = time.perf_counter() - t0
    return row
