"""Plan every job of a workload file at once (`tuneplan plan --runs jobs.csv --out plans.csv`): a CSV with
one job per row, columns named as the `plan` flags (docs/planning.md lists them); one output row per job."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

from tuneplan.errors import DataFileError, InputError, TuneplanError, atomic_output, read_user_text, shown
from tuneplan.plan.options import plan_options, plan_values

COLUMNS = {o.name: o for o in plan_options().values() if o.column}
"""The plan options a workload file takes as columns (plan/options.py), named as their flags."""
ALIASES = {"avg_tokens_per_sample": "tokens_per_example"} | {
    f.removeprefix("--").replace("-", "_"): n for n, o in COLUMNS.items() for f in (*o.flags[1:], *o.hidden)}
NUMBER_FIELDS = ("examples", "tokens_per_example", "tokens", "epochs", "rate", "grid_gco2_kwh")
INT_FIELDS = ("seq_len", "lora_rank")
TEXT_FIELDS = ("provider", "precision", "quant", "optimizer", "lora_targets")
"""The job's columns (JobSpec's options, and the price's provider)."""
OUT_COLUMNS = ("id", "model", "status", "message", "objective", "gpu", "gpus", "nodes", "method", "micro_batch",
               "grad_accum", "global_batch", "sharding", "grad_ckpt", "time_s", "time_h", "time_low_s",
               "time_high_s", "cost_usd", "cost_low_usd", "cost_high_usd", "energy_kwh", "co2_kg",
               "tokens_per_s", "memory_per_gpu_gib", "runner_up", "why", "infeasible", "n_evaluated")


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and math.isnan(v))


def _num(v: str, field: str, integer: bool = False) -> float | int:
    try:
        x = float(v)
    except ValueError:
        raise InputError(field, f"'{v}' is not a number") from None
    if not math.isfinite(x):
        raise InputError(field, f"'{shown(v)}' is not a finite number")
    if integer:
        if x != int(x):
            raise InputError(field, f"'{v}' is not an integer")
        return int(x)
    return x


def _names(cell: str) -> list[str]:
    """A cell's list of names, separated by ';', ',' or '|'."""
    return [x.strip() for x in re.split(r"[;,|]", cell) if x.strip()]


def row_kwargs(row: dict[str, str], defaults: dict[str, Any]) -> dict[str, Any]:
    """`plan_run(...)` keyword arguments for one workload row, on top of the command line's `defaults`."""
    kw = dict(defaults)
    cells = {ALIASES.get(_key(k), _key(k)): v for k, v in row.items() if k is not None and not _blank(v)}
    model = cells.get("model") or cells.get("model_hf_id")
    if model:
        kw["model"] = model.strip()
    for f in NUMBER_FIELDS + INT_FIELDS:
        if f in cells:
            kw[f] = _num(cells[f], f.replace("_", "-"), integer=f in INT_FIELDS)
    for f in TEXT_FIELDS:
        if f in cells:
            kw[f] = cells[f].strip()
    if "packing" in cells:
        kw["packing"] = cells["packing"].strip().lower() in ("1", "true", "yes", "y", "on")
    if "gpus" in cells:  # GPU types, or a GPU count: the largest searched
        try:
            _num(cells["gpus"], "gpus", integer=True)
            cells["max_gpus"] = cells.pop("gpus")
        except InputError:
            pass
    elif "gpu" in cells:
        cells["gpus"] = cells["gpu"]
    if "deadline" in cells:
        cells.pop("deadline_h", None)
    kw |= plan_values({n: _cell(o, cells[n]) for n, o in COLUMNS.items() if n in cells})
    return kw


def _cell(o: Any, cell: str) -> Any:
    """A plan option's value in a cell (a PlanOption of COLUMNS): a list of names, a number, or text."""
    if o.kind == "names":
        return _names(cell)
    if o.kind in ("int", "hours"):
        return _num(cell, o.flag.removeprefix("--"), integer=o.kind == "int")
    return cell.strip()


def read_workload(path: str | Path) -> list[tuple[int, dict[str, str]]]:
    """(line, row) for each job of a workload CSV."""
    p = Path(path)
    if not p.is_file():
        raise DataFileError(str(p), None, "no such workload file" if not p.exists() else "not a regular file")
    text = read_user_text(p, "runs", "workload CSV")
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames:
        raise DataFileError(str(p), 1, "empty workload file: expected a header with at least 'model'")
    keys = {ALIASES.get(_key(k), _key(k)) for k in reader.fieldnames if k}
    if not keys & {"model", "model_hf_id"}:
        raise DataFileError(str(p), 1, "a workload file needs a 'model' column "
                            f"(found: {', '.join(k for k in reader.fieldnames if k)})")
    return [(reader.line_num, rec) for rec in reader if not all(_blank(v) for v in rec.values())]


def plan_workload(path: str | Path, defaults: dict[str, Any], out: str | Path | None = None,
                  on_row: Any = None) -> list[dict[str, Any]]:
    """Plan each job of a workload file; write the results to `out` (CSV) when given. Bad input in a
    row is reported in that row (status `error`, message with file and line), not raised."""
    from tuneplan.plan.search import plan_run

    rows = []
    for line, rec in read_workload(path):
        ident = (rec.get("id") or "").strip() or f"line-{line}"
        res_row: dict[str, Any] = {"id": ident, "model": (rec.get("model") or rec.get("model_hf_id") or "").strip()}
        try:
            kw = row_kwargs(rec, defaults)
            if not kw.get("model"):
                raise InputError("model", "is empty")
            model = kw.pop("model")
            res = plan_run(model, **kw)
        except TuneplanError as exc:
            res_row.update(status="error", message=f"{path}:{line}: {exc}")
        else:
            res_row.update(model=res.model, objective=res.objective, n_evaluated=res.n_evaluated,
                           infeasible="; ".join(f"{x['choice']}: {x['reason']}" for x in res.infeasible))
            if res.ok:
                r = res.recommended
                res_row.update(status="planned", message="", why=res.why,
                               runner_up=res.runner_up["description"] if res.runner_up else "")
                res_row |= {c: r[c] for c in OUT_COLUMNS if c in r and c not in ("id", "model")}
            else:
                res_row.update(status="no-plan", message=res.message)
        rows.append(res_row)
        if on_row is not None:
            on_row(res_row)
    if out is not None:
        write_rows(rows, out)
    return rows


def write_rows(rows: list[dict[str, Any]], out: str | Path) -> None:
    """The plans as CSV, written all at once (a crash leaves an existing file as it was)."""
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(p, "out", "CSV file") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(OUT_COLUMNS), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if _blank(r.get(k)) else r.get(k)) for k in OUT_COLUMNS})
