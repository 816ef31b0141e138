"""Profiled rows in the runs schema, and an append-only CSV writer that never loses a row.

Every measured configuration is written (and flushed) as soon as it is measured, so an interrupted
profile keeps all the rows it had. A second profile on the same file appends; if the file's header
differs, the file is rewritten once, atomically, with the union of both headers (old rows keep all
their cells), then appended to.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from tuneplan.errors import InputError, atomic_output, check_output_path
from tuneplan.runs.io import _lock
from tuneplan.runs.schema import REFERENCE_COLUMNS

# The common runs schema (shared/reference/SCHEMA.md), in order: one list, owned by tuneplan.runs.
SCHEMA_COLUMNS: tuple[str, ...] = REFERENCE_COLUMNS

# The profiler's own columns, appended after the schema columns.
EXTRA_COLUMNS: tuple[str, ...] = (
    "adapter_dtype", "optimizer_impl", "stage", "group_size", "completion_len", "prompts_per_step", "status", "error", "step_time_s_p10", "step_time_s_p90", "step_time_s_std", "noisy", "n_steps",
    "warmup_steps", "layers", "n_layers_full", "hidden_size", "params_b_built", "trainable_params_m",
    "peak_mem_reserved_gib", "peak_mem_allocated_gib", "longest_batch_tokens", "peak_mem_growth_gib", "comm_share", "step_time_nosync_s", "allreduce_s", "nproc", "threads", "device",
    "device_name", "attn_impl", "torch_version", "transformers_version", "peft_version",
    "build_s", "wall_s", "timestamp",
)

COLUMNS: tuple[str, ...] = SCHEMA_COLUMNS + EXTRA_COLUMNS

SOURCE = "profile"
FRAMEWORK = "tuneplan-profile"


def format_cell(value: object) -> str:
    """CSV text for a cell: empty for None, 1/0 for booleans, 6 significant digits for floats."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return "" if value != value else f"{value:.6g}"  # NaN: empty
    return str(value)


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """All rows of a runs CSV as dicts of text (empty list for a missing or empty file)."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return []
    with p.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


_ID_RE = re.compile(rf"^{SOURCE}-(\d+)$")


def read_header(path: Path) -> list[str] | None:
    """The header of an existing runs CSV (None for a missing or empty file). InputError for a file that
    is not a runs CSV (a JSON file, a binary, a CSV without an id column): profile rows would destroy it."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        with path.open(newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
    except (UnicodeDecodeError, csv.Error, OSError) as exc:
        raise InputError("out", f"{path} exists and is not a runs CSV ({exc.__class__.__name__}); give a new "
                                "file or a runs CSV to append to") from None
    if "id" not in [h.strip() for h in header]:
        raise InputError("out", f"{path} exists and is not a runs CSV (its first line has no 'id' column); "
                                "give a new file or a runs CSV to append to")
    return header


class RowWriter:
    """Appends rows to a runs CSV, one flushed write per row.

    `columns` is the order wanted for a new file. An existing file keeps its header order; columns
    it lacks are added at its end by an atomic rewrite (temp file in the same folder + os.replace),
    so no row is ever lost. Columns of the existing file unknown to us are kept (empty in our rows).
    """

    def __init__(self, path: str | Path, columns: Iterable[str] = COLUMNS) -> None:
        self.path = Path(path)
        wanted = list(columns)
        if self.path.exists() and self.path.is_dir():
            raise InputError("out", f"{self.path} is a folder; give a CSV file path")
        if not self.path.parent.exists():
            raise InputError("out", f"folder {self.path.parent} does not exist")
        check_output_path(self.path, "out", "runs CSV")  # not a FIFO or device: it is read first
        existing = read_header(self.path)
        if existing is None:
            self.columns = wanted
            self._rewrite_with(wanted)
        else:
            if len(set(existing)) != len(existing) or "" in existing:
                raise InputError("out", f"{self.path} has a malformed header (empty or repeated column "
                                        "names); write to a new file")
            missing = [c for c in wanted if c not in existing]
            self.columns = existing + missing
            if missing:
                self._rewrite_with(self.columns)
        self._next_id = self._max_id() + 1

    def _rewrite_with(self, columns: list[str]) -> None:
        rows = read_rows(self.path)
        with atomic_output(self.path, "out", "runs CSV") as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=columns, restval="", extrasaction="raise")
            w.writeheader()
            # rows longer than the header carry their surplus under the key None: keep them out
            w.writerows({k: v for k, v in r.items() if k is not None} for r in rows)
            f.flush()
            os.fsync(f.fileno())

    def _max_id(self) -> int:
        ids = (_ID_RE.match(r.get("id") or "") for r in read_rows(self.path))
        return max((int(m.group(1)) for m in ids if m), default=0)

    def write(self, row: Mapping[str, object]) -> dict[str, object]:
        """Append one row (filling `id` when empty); returns the row as written. The id is taken under
        an exclusive lock of the file, after the largest id in it, so two profiles writing one file
        never give the same id."""
        out = dict(row)
        unknown = [k for k in out if k not in self.columns]
        if unknown:
            self.columns = self.columns + unknown
            self._rewrite_with(self.columns)
        with self.path.open("a", newline="", encoding="utf-8") as f:
            _lock(f)  # held until the file is closed
            if not out.get("id"):
                self._next_id = max(self._next_id, self._max_id() + 1)
                out["id"] = f"{SOURCE}-{self._next_id}"
            self._next_id += 1
            csv.writer(f).writerow([format_cell(out.get(c)) for c in self.columns])
            f.flush()
            os.fsync(f.fileno())
        return out
