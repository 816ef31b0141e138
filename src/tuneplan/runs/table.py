"""A table of measured runs and the problems met while reading it."""

from __future__ import annotations

import hashlib
import io
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

FINGERPRINT_EXCLUDE = ("file", "line")
"""Columns left out of `RunTable.fingerprint` (they depend on where the files lie)."""


@dataclass
class Problem:
    """One problem in a runs file, located by file and physical line (None for the whole file)."""

    path: str
    line: int | None
    message: str
    cells: dict[str, str] | None = field(default=None, repr=False)
    """The row's cells as read, for a row skipped (`tuneplan predict` writes them back with the reason)."""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "message": self.message}


def cell_str(value: Any, float_format: str | None = None) -> str:
    """A cell as text, stable across platforms and pandas versions: '' when empty (None, NaN, pd.NA),
    bools 1/0, whole floats without '.0', other floats as `repr` (or in `float_format`)."""
    if type(value) is str:  # the common case, first
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value) if float_format is None else format(value, float_format)
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalars
        return cell_str(value.item(), float_format)
    import pandas as pd

    return "" if value is pd.NA or value is pd.NaT else str(value)


@dataclass
class RunTable:
    """Rows of measured runs (`df`: every reference column, numbers as float, NaN or '' when empty, the
    `schema.ADDED_COLUMNS` and the files' extra columns) and the problems found while reading."""

    df: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    unresolved: pd.DataFrame | None = None
    """With `read_runs(..., keep_unresolved=True)`: the rows set aside only because a name did not
    resolve, read as `resolve=False` reads them (model_resolved / gpu_resolved '')."""

    def __len__(self) -> int:
        return len(self.df)

    def sources(self) -> list[str]:
        """The sources present, sorted."""
        if "source" not in self.df.columns:
            return []
        return sorted({str(s) for s in self.df["source"] if str(s)})

    def filter(self, **col_values: Any) -> RunTable:
        """Rows whose column equals the value (or is one of the values, given a list/tuple/set):
        `table.filter(source="ms-swift", method=["lora", "qlora"], usable_memory=True)`."""
        df = self.df
        for col, want in col_values.items():
            if col not in self.df.columns:
                raise KeyError(f"no column '{col}' in the runs table")
            m = df[col].isin(list(want)) if isinstance(want, list | tuple | set | frozenset) else df[col] == want
            df = df[m.fillna(False).astype(bool)]
        return RunTable(df=df.reset_index(drop=True), problems=list(self.problems))

    def canonical_csv(self) -> str:
        """The rows as CSV text with sorted columns and rows, fixed number format and '\\n' endings."""
        import csv

        cols = sorted(c for c in self.df.columns if c not in FINGERPRINT_EXCLUDE)
        rows = sorted([cell_str(v, ".12g") for v in rec] for rec in self.df[cols].itertuples(index=False, name=None))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([cols, *rows])
        return buf.getvalue()

    def fingerprint(self) -> str:
        """sha256 (hex) of `canonical_csv()`: identifies the rows a calibration was fitted on."""
        return hashlib.sha256(self.canonical_csv().encode("utf-8")).hexdigest()

    def problem_lines(self) -> list[str]:
        return [str(p) for p in self.problems]


def summarise(table: RunTable) -> dict[str, Any]:
    """Counts per source and overall: rows, usable for throughput / memory, OOM, duplicates,
    estimates, rows without a GPU, and the number of problems (rows skipped or files refused)."""
    df = table.df
    return {"rows": len(df), "problems": len(table.problems), "totals": _counts(df),
            "by_source": {src: _counts(df[df["source"] == src]) for src in table.sources()},
            "problems_by_file": dict(Counter(p.path for p in table.problems))}


COUNTED = {"usable_throughput": "usable_throughput", "usable_memory": "usable_memory", "oom": "is_oom",
           "duplicates": "is_duplicate", "estimates": "is_estimate"}
"""Summary count -> the boolean column it counts."""


def _counts(d: pd.DataFrame) -> dict[str, int]:
    counts = {k: int(d[col].fillna(False).astype(bool).sum()) if col in d.columns else 0 for k, col in COUNTED.items()}
    no_gpu = int((d["gpu_resolved"] == "").sum()) if "gpu_resolved" in d.columns else 0
    return {"rows": len(d), **counts, "no_gpu": no_gpu}


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a fixed-width text table (one line per source, then the total)."""
    keys = ("rows", "usable_throughput", "usable_memory", "oom", "duplicates", "estimates", "no_gpu")
    heads = ("rows", "thr", "mem", "oom", "dup", "est", "no_gpu")
    width = max([len("source"), len("total")] + [len(s) for s in summary["by_source"]])
    rows = [("source", heads), *((src, [c[k] for k in keys]) for src, c in summary["by_source"].items()),
            ("total", [summary["totals"][k] for k in keys])]
    lines = [name.ljust(width) + "".join(str(x).rjust(8) for x in cells) for name, cells in rows]
    return "\n".join([*lines, f"problems: {summary['problems']}"])
