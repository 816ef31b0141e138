"""`TuneplanCallback`: record a real training run (transformers `Trainer`, TRL's `SFTTrainer` and the
other TRL trainers) as one row of the runs schema, and log tuneplan's prediction next to it.

    from tuneplan.integrations.transformers import TuneplanCallback
    trainer = SFTTrainer(..., callbacks=[TuneplanCallback()])

What it measures on the main process (step time, tokens per step from the batches, peak memory, the
longest batch, the configuration) and where the row goes: docs/configs.md, "Recording your own runs".
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tuneplan.profile.device import sync
from tuneplan.profile.memory import GIB

DEFAULT_WARMUP_STEPS = 2
"""Optimizer steps left out of the timing at the start (CUDA context, allocator growth, autotuning)."""
SOURCE = "callback"
"""`source` column of recorded rows."""

log = logging.getLogger("tuneplan")


@dataclass
class _Step:
    seconds: float
    padded: int
    real: int
    samples: int


@dataclass
class _Counts:
    padded: int = 0
    real: int = 0
    samples: int = 0
    max_len: int = 0
    max_tokens: int = 0  # tokens (padded) of the longest micro-batch
    lengths: set[int] = field(default_factory=set)


class TuneplanCallback(TrainerCallback):
    """Record the run as a runs-schema row in `out` and log predicted against measured at the end.

    `gpu`: the catalog GPU (or a GPUSpec) to predict for (default: the CUDA device's catalog name;
    no prediction on CPU unless given). `predict=False` skips the prediction."""

    def __init__(self, out: str | os.PathLike | None = None, warmup_steps: int = DEFAULT_WARMUP_STEPS,
                 gpu: Any = None, predict: bool = True, model_name: str | None = None) -> None:
        from tuneplan.runs.home import recorded_runs_path

        self.out = Path(out) if out is not None else recorded_runs_path()
        self.warmup_steps = max(0, int(warmup_steps))
        self.gpu, self.predict, self.model_name = gpu, predict, model_name
        self.steps: list[_Step] = []
        self.row: dict[str, Any] | None = None
        self.prediction: dict[str, Any] | None = None
        self._cur, self._all = _Counts(), _Counts()
        self._t0: float | None = None
        self._hook = self._model = None
        self._device = "cpu"
        self._train_t0 = 0.0

    # ---- events ---------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        import torch

        self._model = model
        self._device = "cuda" if torch.cuda.is_available() and str(getattr(args, "device", "cuda")).startswith(
            "cuda") else "cpu"
        if self._device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if model is not None:
            self._hook = model.register_forward_pre_hook(self._on_forward, with_kwargs=True)
        self._train_t0 = time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        sync(self._device)
        self._cur = _Counts()
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is None:
            return
        sync(self._device)
        c = self._cur
        self.steps.append(_Step(time.perf_counter() - self._t0, c.padded, c.real, c.samples))
        self._t0 = None

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if not self.steps:
            log.warning("tuneplan: no optimizer step was timed; nothing recorded")
            return
        self.row = self._build_row(args, state, model or self._model)
        if getattr(state, "is_world_process_zero", True):
            from tuneplan.runs import write_runs

            self.out.parent.mkdir(parents=True, exist_ok=True)
            write_runs([_fit_header(self.row, self.out)], self.out)
            log.warning("tuneplan: run recorded in %s", self.out)
            if self.predict:
                self._log_prediction(model or self._model)

    # ---- measuring ------------------------------------------------------------------------------
    def _on_forward(self, module, args, kwargs):
        if not getattr(module, "training", False):
            return None
        ids, embeds = kwargs.get("input_ids", args[0] if args else None), kwargs.get("inputs_embeds")
        if ids is None and embeds is None:
            return None
        shape = tuple(ids.shape) if ids is not None else tuple(embeds.shape[:-1])
        n = math.prod(int(s) for s in shape)
        mask = kwargs.get("attention_mask")
        real = int(mask.sum().item()) if mask is not None and getattr(mask, "dim", lambda: 0)() == 2 else n
        for c in (self._cur, self._all):
            c.padded += n
            c.real += real
            c.samples += int(shape[0]) if len(shape) > 1 else 1
            c.max_len = max(c.max_len, int(shape[-1]))
            c.max_tokens = max(c.max_tokens, n)
            c.lengths.add(int(shape[-1]))
        return None

    def _memory(self) -> dict[str, Any]:
        if self._device == "cuda":
            import torch

            alloc = torch.cuda.max_memory_allocated() / GIB
            reserved = torch.cuda.max_memory_reserved() / GIB
            return {"peak_mem_gib": reserved, "mem_kind": "reserved", "peak_mem_reserved_gib": reserved,
                    "peak_mem_allocated_gib": alloc}
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rss_bytes = rss if sys.platform == "darwin" else rss * 1024
        return {"peak_mem_gib": rss_bytes / GIB, "mem_kind": "rss"}

    # ---- the row --------------------------------------------------------------------------------
    def _build_row(self, args, state, model) -> dict[str, Any]:
        from tuneplan.integrations.describe import describe_run

        skipped = self.warmup_steps if len(self.steps) > self.warmup_steps else 0
        warm = self.steps[skipped:]
        times = sorted(s.seconds for s in warm)
        med = statistics.median(times)
        padded = statistics.median(s.padded for s in warm)
        real = statistics.median(s.real for s in warm)
        samples = statistics.median(s.samples for s in warm)
        world = int(getattr(args, "world_size", 1) or 1)
        row = describe_run(model, args, world, self._device, self.model_name)
        row.update(self._memory())
        row.update({
            "source": SOURCE, "step_time_s": med, "step_time_s_p10": times[int(0.1 * (len(times) - 1))],
            "step_time_s_p90": times[int(round(0.9 * (len(times) - 1)))], "n_steps": len(warm),
            "warmup_steps": skipped, "tokens_per_s": padded * world / med, "tokens_per_s_per_gpu": padded / med,
            "samples_per_s": samples * world / med, "runtime_s": time.perf_counter() - self._train_t0,
            "train_tokens_total": self._all.padded * world, "epochs": float(getattr(state, "epoch", 0) or 0) or None,
            "seq_len": self._all.max_len,
            "avg_tokens_per_sample": self._all.real / self._all.samples if self._all.samples else None,
            "padding": "longest" if len(self._all.lengths) > 1 else "max", "tokens_per_step_padded": padded * world,
            "tokens_per_step_real": real * world, "longest_batch_tokens": self._all.max_tokens or None,
        })
        notes = [f"recorded by tuneplan's TuneplanCallback; step time = median of {len(warm)} optimizer steps "
                 f"after {skipped} warm-up step(s), compute only (data loading, logging, eval and saves excluded)",
                 "tokens_per_s counts padded tokens; real (unpadded) tokens per step in tokens_per_step_real"]
        if skipped == 0 and self.warmup_steps:
            notes.append(f"only {len(self.steps)} step(s): warm-up not excluded")
        if row["mem_kind"] == "rss":
            notes.append("peak_mem_gib is the peak RSS of the whole process")
        row["notes"] = "; ".join(notes + ([row["notes"]] if row.get("notes") else []))
        return row

    def _log_prediction(self, model) -> None:
        from tuneplan.integrations.describe import predict_row

        try:
            self.prediction = predict_row(self.row, model, self.gpu)
        except Exception as exc:  # noqa: BLE001 - a prediction problem must never fail the user's training
            log.warning("tuneplan: no prediction for this run (%s)", str(exc).splitlines()[0] if str(exc) else
                        type(exc).__name__)
            return
        if self.prediction is None:
            log.warning("tuneplan: no prediction for this run (no catalog GPU for %s: pass gpu=...)",
                        self.row.get("device_name"))
            return
        p, r = self.prediction, self.row
        log.warning("tuneplan: predicted vs measured on %s: step time %.4g s vs %.4g s (%+.0f%%), peak memory "
                    "%.2f GiB vs %.2f GiB (%s)", p["gpu"], p["step_time_s"], r["step_time_s"],
                    100 * (p["step_time_s"] / r["step_time_s"] - 1), p["memory_per_gpu_gib"], r["peak_mem_gib"],
                    r["mem_kind"])


def _fit_header(row: dict[str, Any], path: Path) -> dict[str, Any]:
    """The row restricted to an existing file's header (`write_runs` refuses new columns); what does not
    fit goes into notes as JSON so nothing is lost."""
    if not path.is_file() or path.stat().st_size == 0:
        return row
    import csv

    with path.open(newline="", encoding="utf-8-sig") as f:
        header = [h.strip() for h in next(csv.reader(f), [])]
    if not header:
        return row
    kept = {k: v for k, v in row.items() if k in header}
    extra = {k: v for k, v in row.items() if k not in header and v not in (None, "")}
    if extra and "notes" in header:
        kept["notes"] = (str(kept.get("notes") or "") + "; extra: " + json.dumps(extra, default=str)).strip("; ")
    return kept
