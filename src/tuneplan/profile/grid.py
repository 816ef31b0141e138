"""Profile a grid of configurations (every combination of the lists), or a smart sample of it
within a time budget, writing each row to the runs CSV as soon as it is measured."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tuneplan.errors import InputError, atomic_output
from tuneplan.profile.config import (
    ModelSource,
    ProfileConfig,
    apply_overrides,
    expand_grid,
    load_model_source,
    parse_overrides,
)
from tuneplan.profile.rows import RowWriter
from tuneplan.profile.sampling import Choice, CurvePoint, Measurement, SamplingResult, smart_sample

CURVE_COLUMNS = ("id", "session", "run", "phase", "config", "status", "step_time_s", "run_cost_s",
                 "spent_s", "budget_s", "loo_error", "score", "spread", "pred_cost_s", "row_id")


def _overrides(value: Any) -> tuple[tuple[str, Any], ...]:
    if not value:
        return ()
    if isinstance(value, str):
        return parse_overrides(value)
    if isinstance(value, dict):
        return tuple(value.items())
    return tuple(tuple(kv) for kv in value)  # type: ignore[misc]


def _as_list(value: Any, default: Sequence[Any]) -> list[Any]:
    if value is None:
        return list(default)
    if isinstance(value, (str, int, float, bool)):
        return [value]
    return list(value) or list(default)


_SCALAR_OPTS = ("lora_targets", "lora_alpha", "sharding", "device", "threads", "max_mem_gib", "seed", "gpu_name",
                "timeout_s", "stage", "trainer", "group_size", "completion_len", "isolate")
"""profile_grid's single-value options: ProfileConfig fields (None or empty: the field's default)."""
_LIST_OPTS = {"grad_accums": "grad_accum", "lora_ranks": "lora_rank", "precisions": "precision",
              "grad_ckpts": "grad_ckpt", "attns": "attn", "optimizers": "optimizer", "nprocs": "nproc"}
"""profile_grid's list options -> the ProfileConfig field each varies (none given: the field's default)."""


def build_configs(model: str, methods: Iterable[str] = ("full",), seq_lens: Iterable[int] = (512,),
                  micro_batches: Iterable[int] = (1,), layers: Iterable[int | None] = (None,),
                  steps: int = 8, warmup: int = 2, **opts: Any) -> list[ProfileConfig]:
    """The ProfileConfigs of a grid (see profile_grid for the options)."""
    base = ProfileConfig(model=model, steps=steps, warmup=warmup, config_override=_overrides(opts.get("config_override")),
                         **{k: opts[k] for k in _SCALAR_OPTS if opts.get(k) not in (None, "")})
    given = {"method": methods, "seq_len": seq_lens, "micro_batch": micro_batches, "layers": layers,
             **{field: opts.get(name) for name, field in _LIST_OPTS.items()}}
    lists = {k: _as_list(v, [getattr(base, k)]) for k, v in given.items()}
    base = replace(base, lora_rank=lists["lora_rank"][0])  # the rank of the rows of full fine-tuning
    return [replace(c, sharding="ddp") if c.nproc > 1 and c.sharding == "none" else c
            for c in expand_grid(base, **lists)]


def preflight(configs: Sequence[ProfileConfig], src: ModelSource) -> list[ProfileConfig]:
    """Check every distinct kind of configuration before measuring anything (one-line InputErrors);
    returns the configs with device and precision resolved."""
    from tuneplan.profile.runner import build_config, prepare

    out = []
    checked: dict[tuple[Any, ...], ProfileConfig] = {}
    layers_ok: set[int | None] = set()
    for c in configs:
        key = (c.method, c.precision, c.optimizer, c.attn, c.nproc, c.device, c.lora_targets)
        if key not in checked:
            checked[key] = prepare(c, src)[0]
        c = replace(c, device=checked[key].device, precision=checked[key].precision)
        if c.layers not in layers_ok:
            build_config(src, c)
            layers_ok.add(c.layers)
        out.append(c)
    return out


@contextlib.contextmanager
def _progress(enabled: bool, total: float, budget: bool) -> Iterator[tuple[Any, Any]]:
    """(rich progress bar on stderr, its task); with a budget the bar shows the time left."""
    from rich import progress as rp
    from rich.console import Console

    cols: list[Any] = [rp.SpinnerColumn(), rp.TextColumn("[bold]{task.description}"), rp.BarColumn()]
    cols += [rp.TextColumn("{task.fields[left]}")] if budget else [rp.MofNCompleteColumn(), rp.TimeRemainingColumn()]
    with rp.Progress(*cols, rp.TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled) as progress:
        yield progress, progress.add_task("profiling", total=total, left="")


def _fmt_s(s: float) -> str:
    s = max(0.0, s)
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{s:.0f}s"


def _summary(row: dict[str, Any]) -> str:
    status = row.get("status")
    if status != "ok":
        return f"{status}: {row.get('error', '')}"[:160]
    parts = [f"{row['step_time_s']:.3g} s/step", f"{row['tokens_per_s']:.4g} tok/s",
             f"peak {row['peak_mem_gib']:.3g} GiB ({row['mem_kind']})"]
    if row.get("comm_share") is not None:
        parts.append(f"comm {100 * row['comm_share']:.0f}%")
    return ", ".join(parts)


def effective_config_path(out: str | Path, src: ModelSource, cfg: ProfileConfig) -> Path:
    """Write the measured architecture (the model's config with --config-override applied, all its
    layers) next to the runs file, so calibrate/predict resolve exactly what was measured."""
    import hashlib
    import json
    import re

    text = json.dumps(apply_overrides(src.config, cfg.config_override), indent=1, sort_keys=True)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(src.name).stem if src.origin != "catalog" else src.name)
    folder = Path(out).resolve().parent / (Path(out).stem + ".configs")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug}-{digest}.json"
    if not path.exists():  # written whole or not at all: a half file would never be rewritten
        with atomic_output(path, "out", "architecture config") as tmp:
            Path(tmp).write_text(text + "\n", encoding="utf-8")
    return path


def _measure_row(cfg: ProfileConfig, src: ModelSource, out: str | Path | None, writer: RowWriter | None,
                 echo: Any) -> dict[str, Any]:
    """Measure one configuration, append its row to the runs file and echo its summary line. The row's
    model_hf_id resolves from anywhere: the effective config file when the config was overridden, the
    absolute config path for a path model."""
    from tuneplan.profile.runner import run_one

    row = run_one(cfg, src)
    if cfg.config_override and out:
        row["model_hf_id"] = str(effective_config_path(out, src, cfg))
        row["notes"] = (row.get("notes") or "") + "; model_hf_id is the measured config (overrides applied)"
    elif src.origin not in ("catalog", "hub") and row.get("model_hf_id") == src.name:
        row["model_hf_id"] = str(Path(src.origin).resolve())
    if writer:
        row = writer.write(row)
    if echo:
        echo(f"{cfg.label()}: {_summary(row)}")
    return row


def _configs(model: str, methods: Iterable[str], seq_lens: Iterable[int], micro_batches: Iterable[int],
             layers: Iterable[int | None], steps: int, warmup: int, opts: dict[str, Any]
             ) -> tuple[ModelSource, list[ProfileConfig]]:
    """The model's source and the grid's configurations, checked (preflight)."""
    src = load_model_source(model)
    configs = build_configs(model, methods, seq_lens, micro_batches, layers, steps, warmup, **opts)
    return src, preflight(configs, src)


def profile_grid(model: str, methods: Iterable[str] = ("full",), seq_lens: Iterable[int] = (512,),
                 micro_batches: Iterable[int] = (1,), layers: Iterable[int | None] = (None,),
                 steps: int = 8, warmup: int = 2, out: str | Path | None = None,
                 **opts: Any) -> list[dict[str, Any]]:
    """Measure every combination of the lists; returns the rows (also appended to `out` if given).

    Options (lists unless said): lora_ranks, precisions ("fp32", "bf16", "amp-bf16"...; default fp32
    on CPU, bf16 on CUDA), grad_ckpts (bools), attns, optimizers, grad_accums, nprocs; and single
    values: lora_targets, lora_alpha, sharding ("ddp"/"fsdp"), device ("auto"/"cpu"/"cuda"), threads,
    max_mem_gib, config_override ("k=v,..." or dict), seed, gpu_name, timeout_s, progress (bool),
    echo (callable printing one line per row), stage (sft/dpo/grpo), trainer (loop/trl), group_size,
    completion_len (grpo).
    InputError before anything is measured for bad input; out-of-memory and other failures of one
    configuration become rows with status oom / error and profiling goes on.
    """
    src, configs = _configs(model, methods, seq_lens, micro_batches, layers, steps, warmup, opts)
    writer = RowWriter(out) if out else None
    rows: list[dict[str, Any]] = []
    with _progress(bool(opts.get("progress")), len(configs), budget=False) as bar:
        for cfg in configs:
            bar[0].update(bar[1], description=cfg.label())
            rows.append(_measure_row(cfg, src, out, writer, opts.get("echo")))
            bar[0].advance(bar[1])
    return rows


# ---------------------------------------------------------------- smart sampling over real runs


def _feature_dict(cfg: ProfileConfig, n_layers_full: int) -> dict[str, Any]:
    """The settings the sampler's scaling law reads, in the order of its features."""
    return {"method": cfg.method, "micro_batch": cfg.micro_batch, "seq_len": cfg.seq_len, "grad_accum": cfg.grad_accum,
            "layers": cfg.layers or n_layers_full or None, "lora_rank": cfg.lora_rank if cfg.is_lora else None,
            "precision": cfg.precision, "grad_ckpt": "on" if cfg.grad_ckpt else "off", "attn": cfg.attn,
            "optimizer": cfg.optimizer, "nproc": cfg.nproc}


def curve_path(out: str | Path) -> Path:
    """`runs.csv` -> `runs.curve.csv` (the learning curve of a smart-sampling session)."""
    p = Path(out)
    return p.with_name(p.stem + ".curve.csv") if p.suffix else p.with_name(p.name + ".curve.csv")


def profile_auto(model: str, budget_s: float, target_error: float = 0.05,
                 methods: Iterable[str] = ("full",), seq_lens: Iterable[int] = (128, 256, 512, 1024),
                 micro_batches: Iterable[int] = (1, 2, 4, 8), layers: Iterable[int | None] = (None,),
                 steps: int = 8, warmup: int = 2, out: str | Path | None = None,
                 **opts: Any) -> tuple[list[dict[str, Any]], SamplingResult]:
    """Smart sampling of the grid within `budget_s` seconds of wall time (see profile.sampling).

    Rows go to `out` as measured; the learning curve to `<out stem>.curve.csv`.
    """
    from tuneplan.profile.runner import build_config

    if budget_s <= 0:
        raise InputError("budget", "must be > 0; give e.g. --budget 10m")
    if not 0 < target_error < 1:
        raise InputError("target-error", "must be between 0 and 1 (e.g. 0.05 for 5%)")
    src, configs = _configs(model, methods, seq_lens, micro_batches, layers, steps, warmup, opts)
    _, full = build_config(src, configs[0])
    by_key: dict[tuple[Any, ...], ProfileConfig] = {}
    for c in configs:  # one config per feature set: e.g. --layers 24,full on a 24-layer model
        by_key.setdefault(tuple(_feature_dict(c, full).items()), c)
    configs, feats = list(by_key.values()), [dict(k) for k in by_key]
    writer = RowWriter(out) if out else None
    curve_writer = RowWriter(curve_path(out), CURVE_COLUMNS) if out else None
    session = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    rows: list[dict[str, Any]] = []
    echo = opts.get("echo")
    t_start = time.perf_counter()
    dp_steps = max(2, (steps + 1) // 2) + 1 if any(c.nproc > 1 for c in configs) else 0
    steps_per_run = warmup + steps + dp_steps

    with _progress(bool(opts.get("progress")), budget_s, budget=True) as bar:
        def measure(feat: dict[str, Any]) -> dict[str, Any]:  # the row: read by sampling.as_measurement
            cfg = by_key[tuple(feat.items())]
            spent = time.perf_counter() - t_start
            bar[0].update(bar[1], description=cfg.label(), completed=min(spent, budget_s),
                          left=f"{_fmt_s(budget_s - spent)} left")
            rows.append(_measure_row(cfg, src, out, writer, echo))
            return rows[-1]

        def on_result(i: int, m: Measurement, point: CurvePoint, ch: Choice) -> None:
            bar[0].update(bar[1], completed=min(point.cost_s, budget_s),
                          left=f"{_fmt_s(budget_s - point.cost_s)} left")
            if curve_writer:
                curve_writer.write({
                    "id": f"{session}-{point.n_runs}", "session": session, "run": point.n_runs,
                    "phase": ch.phase, "config": configs[i].label(), "status": m.status,
                    "step_time_s": m.step_time_s, "run_cost_s": m.cost_s, "spent_s": point.cost_s,
                    "budget_s": budget_s, "loo_error": point.loo_error, "score": ch.score,
                    "spread": ch.spread, "pred_cost_s": ch.pred_cost_s, "row_id": (m.row or {}).get("id"),
                })

        res = smart_sample(feats, measure, budget_s, target_error, steps_per_run=steps_per_run,
                           seed=int(opts.get("seed") or 0), on_result=on_result)
    return rows, res
