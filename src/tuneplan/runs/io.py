"""Reading and writing runs files (CSV, Parquet): reference schema, LLMFineTuningBench, profiler output."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tuneplan.errors import RUNS_SUFFIXES, DataFileError, InputError, TuneplanError, check_output_path
from tuneplan.runs.defaults import Defaults, load_defaults
from tuneplan.runs.normalise import (
    DUPLICATE_NOTE,
    ESTIMATE_NOTE,
    LLMFT_NUMERIC,
    RowError,
    RowState,
    _catalog_model,
    apply_defaults,
    apply_flags,
    check_values,
    derive,
    fill_from_catalog,
    finish_llmftbench,
    map_llmftbench,
    memory_unit,
    outcome,
    parse_numbers,
    resolve_gpu_name,
)
from tuneplan.runs.schema import (
    ADDED_COLUMNS,
    BOOL_ADDED,
    EXTRA_NUMERIC_COLUMNS,
    LLMFTBENCH_RENAMES,
    NUMERIC_COLUMNS,
    REFERENCE_COLUMNS,
    SETTING_COLUMNS,
    THROUGHPUT_COLUMNS,
    detect_schema,
    missing_required,
)
from tuneplan.runs.table import Problem, RunTable, cell_str

REFERENCE_DIR_ENV = "TUNEPLAN_REFERENCE_DIR"
"""Environment variable naming the shared reference runs folder (or the reference folder holding runs/)."""

PARQUET_SUFFIXES = (".parquet", ".pq")

_LLMFT_SPECIAL_TARGETS = {"gpu_memory_utilization_peak": "peak_mem_gib", "train_steps_per_second": "step_time_s",
                          "is_valid": "status", "batch_size": "global_batch_size", "torch_dtype": "precision"}


# --- reading ------------------------------------------------------------------------------------

MAX_CELL_CHARS = 65_536
"""Characters in one cell of a runs file: the longest notes of the reference runs are under 2,000; a
larger cell is a broken row (an unclosed quote, a pasted log), reported and skipped on its own."""
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def _csv_records(path: Path) -> tuple[list[str], list[tuple[int, list[str]]], str]:
    """Header, (first physical line, cells) of each record, and the delimiter of a CSV file (';' for a
    spreadsheet's export where the comma is the decimal point). Bytes that are not UTF-8 are kept as
    surrogates and reported on their row (`cell_problem`)."""
    csv.field_size_limit(2**31 - 1)  # a longer cell is reported on its row (MAX_CELL_CHARS), not fatal
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        first = f.readline()
        if not first.strip():
            return [], [], ","
        delimiter = ";" if first.count(";") > first.count(",") else ","
        f.seek(0)
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader)
        records = []
        start = reader.line_num + 1
        for cells in reader:
            records.append((start, cells))
            start = reader.line_num + 1
    return header, records, delimiter


def cell_problem(cells: list[str]) -> str | None:
    """Why a record's cells cannot be a run: bytes that are not UTF-8, or a cell over MAX_CELL_CHARS."""
    for c in cells:
        if len(c) > MAX_CELL_CHARS:
            return f"a cell of {len(c):,} characters (at most {MAX_CELL_CHARS:,}); row skipped"
        if bad := _NOT_UTF8.search(c):
            text = c.encode("utf-8", "surrogateescape").decode("latin-1")
            shown = text if len(text) <= 40 else text[:40] + "..."
            return f"not UTF-8 text (byte 0x{ord(bad.group(0)) - 0xDC00:02x} in '{shown}'); row skipped"
    return None


def _parquet_records(path: Path) -> tuple[list[str], list[tuple[int, list[str]]], str]:
    """Header, (1-based row number, cells as text) of each row and no delimiter, of a Parquet file."""
    import pandas as pd  # with pyarrow, a dependency

    df = pd.read_parquet(path)

    def text(x: Any) -> str:
        if isinstance(x, bool):
            return "true" if x else "false"
        if x is None or (not isinstance(x, str) and pd.api.types.is_scalar(x) and pd.isna(x)):
            return ""
        return repr(x) if isinstance(x, float) else str(x)

    rows = df.itertuples(index=False, name=None)
    return [str(c) for c in df.columns], [(i, [text(x) for x in r]) for i, r in enumerate(rows, start=1)], ""


class _Reader:
    def __init__(self, strict: bool, resolve: bool, defaults: Defaults, strict_names: bool = False,
                 keep_unresolved: bool = False) -> None:
        self.strict, self.resolve, self.defaults, self.strict_names = strict, resolve, defaults, strict_names
        self.keep_unresolved = keep_unresolved and resolve
        self.unresolved: list[dict[str, Any]] = []
        self.problems: list[Problem] = []
        self.rows: list[dict[str, Any]] = []
        self.extra_columns: list[str] = []
        self.seen_ids: dict[str, str] = {}
        self.seen_rows: dict[tuple[tuple[str, str], ...], str] = {}  # by `row_key`
        self.model_cache: dict[tuple[str, str], Any] = {}
        self.gpu_cache: dict[tuple[str, str], Any] = {}

    def report(self, path: str, line: int | None, message: str, cells: dict[str, str] | None = None) -> None:
        if self.strict:
            raise DataFileError(path, line, message)
        self.problems.append(Problem(path, line, message, cells))

    # -- files --

    def read_file(self, path: Path) -> None:
        name = str(path)
        if not path.is_file():  # a FIFO or device too: reading it would block
            self.report(name, None, "no such file" if not path.exists() else "not a regular file")
            return
        try:
            parquet = path.suffix.lower() in PARQUET_SUFFIXES
            header, records, delimiter = _parquet_records(path) if parquet else _csv_records(path)
        except (OSError, ValueError, csv.Error) as exc:  # pyarrow's ArrowInvalid is a ValueError
            self.report(name, 1, f"cannot read: {str(exc).splitlines()[0]}; file skipped")
            return
        if not header:
            self.report(name, None, "empty file (no header); file skipped")
            return
        if bad := cell_problem(header):
            self.report(name, 1, f"header: {bad.removesuffix('; row skipped')}; file skipped")
            return
        if delimiter == ";":
            self.report(name, None, "semicolon-separated (read with ';' as the delimiter; numbers need '.' "
                                    "as the decimal point)")
        header = [h.strip().lower() for h in header]
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            self.report(name, 1, f"duplicate column(s) in the header: {', '.join(dupes)}; file skipped")
            return
        schema = detect_schema(header)
        mapped = set(header)
        if schema == "llmftbench":
            mapped |= {LLMFTBENCH_RENAMES[h] for h in header if h in LLMFTBENCH_RENAMES}
            mapped |= {_LLMFT_SPECIAL_TARGETS[h] for h in header if h in _LLMFT_SPECIAL_TARGETS}
        if missing := missing_required(mapped):
            self.report(name, 1, f"missing required column(s): {'; '.join(missing)}; file skipped")
            return
        recs = []
        for line, cells in records:
            if not any(c.strip() for c in cells):
                continue  # a blank line
            if problem := cell_problem(cells):
                self.report(name, line, problem)
                continue
            recs.append((line, cells))
        unit = "percent"
        if schema == "llmftbench" and "gpu_memory_utilization_peak" in header:
            k = header.index("gpu_memory_utilization_peak")
            unit = memory_unit([cells[k] for _, cells in recs if k < len(cells)])
        for col in header:
            if col not in REFERENCE_COLUMNS and col not in ADDED_COLUMNS and col not in self.extra_columns:
                self.extra_columns.append(col)
        for line, cells in recs:
            if len(cells) != len(header):
                if len(cells) > len(header) and not any(c.strip() for c in cells[len(header):]):
                    cells = cells[: len(header)]
                else:
                    self.report(name, line, f"{len(cells)} fields where the header has {len(header)}; "
                                            "row skipped")
                    continue
            raw = dict(zip(header, map(str.strip, cells), strict=True))
            try:
                row = self.read_row(raw, path, line, schema, unit)
            except RowError as exc:
                self.report(name, line, str(exc), raw)
                continue
            if row is not None:
                self.rows.append(row)

    # -- rows --

    def read_row(self, raw: dict[str, str], path: Path, line: int, schema: str,
                 unit: str) -> dict[str, Any] | None:
        name = str(path)
        original = raw
        raw, records, errors = map_llmftbench(raw) if schema == "llmftbench" else (raw, [], [])
        source = raw.get("source", "").strip() or path.stem
        raw["source"] = source
        v, errs = parse_numbers(raw, LLMFT_NUMERIC if schema == "llmftbench" else ())
        errors += errs + check_values(v)
        if errors:
            for e in errors[:-1]:
                self.report(name, line, e)
            raise RowError(errors[-1])
        rid = str(v.get("id") or "")
        where = f"{name}:{line}"
        if rid and rid in self.seen_ids:
            raise RowError(f"duplicate id '{rid}' (first at {self.seen_ids[rid]}); row skipped, first kept")
        key = self.row_key(original)
        first = self.seen_rows.get(key)
        if first is not None:
            raise RowError(f"exact duplicate of the row at {first}; row skipped, first kept")
        if rid:
            self.seen_ids[rid] = where
        else:
            rid = f"{source}@{path.name}:{line}"
            v["id"] = rid
        self.seen_rows[key] = where

        if not self.keep_unresolved:
            return self.normalise(v, records, source, schema, unit, name, line, self.resolve)
        before = (dict(v), list(records))
        try:
            return self.normalise(v, records, source, schema, unit, name, line, True)
        except RowError:
            # set aside because a name did not resolve: kept as a name-free reading keeps it
            with contextlib.suppress(RowError):
                self.unresolved.append(self.normalise(*before, source, schema, unit, name, line, False))
            raise

    @staticmethod
    def row_key(cells: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """A row's exact-duplicate key: its non-empty cells but the id, sorted by name (equal for rows of
        any files whose non-empty cells are equal)."""
        return tuple(sorted((k, c) for k, c in cells.items() if k != "id" and c))

    def normalise(self, v: dict[str, Any], records: list[str], source: str, schema: str, unit: str, name: str,
                  line: int, resolve: bool) -> dict[str, Any]:
        """A parsed row's names resolved (when `resolve`), flags, defaults and derived figures applied."""
        rules = self.defaults.source(source)
        model_spec = gpu_spec = None
        if resolve:
            model_spec = self.model(str(v.get("model") or ""), str(v.get("model_hf_id") or ""),
                                    str(v.get("notes") or ""), v.get("seq_len"), str(v.get("model_config_json") or ""))
            gpu_spec, gpu_record = self.gpu(str(v.get("gpu") or ""), source)
            records += [gpu_record] if gpu_record else []
        st = RowState(v=v, source=source, defaults_used=records)
        if schema == "llmftbench":
            finish_llmftbench(v, unit, getattr(gpu_spec, "memory_gib", None), st.defaults_used)
        model_type = str(getattr(model_spec, "model_type", "") or "").lower()
        apply_flags(st, rules, model_type)
        apply_defaults(st, self.defaults, rules, model_type)
        fill_from_catalog(st, model_spec)
        derive(st)
        return self.finish(st, name, line, model_spec, gpu_spec, resolve)

    def model(self, model: str, hf_id: str, notes: str = "", seq_len: Any = None, config_json: str = "") -> Any:
        if not model and not hf_id and not config_json:
            raise RowError("no model named (model and model_hf_id are empty); row skipped")
        arch = "MPT arch" in (notes or "")
        key = (model, hf_id, seq_len if arch else None, notes if arch else "", config_json)
        got = _lookup(self.model_cache, key, lambda: _catalog_model(model, hf_id, notes if arch else "", seq_len,
                                                                     config_json))
        if isinstance(got, InputError):
            names = f"'{model}'" + (f" (model_hf_id '{hf_id}')" if hf_id and hf_id != model else "")
            raise RowError(f"cannot resolve model {names}: {str(got).removeprefix(f'{got.field}: ')}; row skipped")
        return got

    def gpu(self, gpu: str, source: str) -> tuple[Any, str | None]:
        got = _lookup(self.gpu_cache, (gpu, source),
                      lambda: resolve_gpu_name(gpu, self.defaults.source(source), self.strict_names))
        if isinstance(got, InputError):
            raise RowError(f"cannot resolve GPU '{gpu}': {str(got).removeprefix(f'{got.field}: ')}; row skipped")
        return got

    def finish(self, st: RowState, name: str, line: int, model_spec: Any, gpu_spec: Any,
               resolve: bool) -> dict[str, Any]:
        v = st.v
        notes = str(v.get("notes") or "")
        flags = st.flags
        is_dup = bool(DUPLICATE_NOTE.match(notes))
        is_est = bool(flags.get("is_estimate")) or bool(ESTIMATE_NOTE.match(notes))
        status = outcome(v)
        if is_est and status == "ok":
            status = ""
        is_oom = status == "oom"
        gpu_name = gpu_spec.name if gpu_spec is not None else ""  # both None when not resolved
        model_name = str(getattr(model_spec, "name", "") or "")
        has_gpu = bool(gpu_name) if resolve else bool(v.get("gpu"))
        clean = not (is_oom or is_est or is_dup or status == "failed")
        has_thr = any(v.get(c) is not None for c in THROUGHPUT_COLUMNS)
        usable_thr = has_thr and clean and has_gpu and flags.get("usable_throughput", True) is not False
        usable_mem = (v.get("peak_mem_gib") is not None and clean
                      and flags.get("usable_memory", True) is not False)
        fits: bool | None = {"oom": False, "ok": True}.get(status)
        if "fits" in flags and not is_oom:
            fits = None if flags["fits"] is None else bool(flags["fits"])
        return {**v, "file": name, "line": line, "model_resolved": model_name, "gpu_resolved": gpu_name,
                "status": status, "is_oom": is_oom, "fits": fits, "is_duplicate": is_dup, "is_estimate": is_est,
                "usable_throughput": bool(usable_thr), "usable_memory": bool(usable_mem),
                "defaults_used": ";".join(r.replace(";", ",") for r in st.defaults_used),
                "caveats": ";".join(st.caveats)}

    def table(self) -> RunTable:
        unresolved = self.frame(self.unresolved) if self.keep_unresolved else None
        return RunTable(df=self.frame(self.rows), problems=self.problems, unresolved=unresolved)

    def frame(self, rows: list[dict[str, Any]]):
        """Rows as a typed DataFrame: every reference, setting and added column, then the extras."""
        import pandas as pd

        extras = [c for c in self.extra_columns if c not in SETTING_COLUMNS]  # not reference or added ones either
        columns = list(REFERENCE_COLUMNS) + list(SETTING_COLUMNS) + list(ADDED_COLUMNS) + extras
        df = pd.DataFrame.from_records(rows, columns=columns) if rows else pd.DataFrame(columns=columns)
        numeric = set(NUMERIC_COLUMNS) | set(EXTRA_NUMERIC_COLUMNS)
        for col in columns:
            if col in numeric:
                df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
            elif col in BOOL_ADDED:
                df[col] = df[col].fillna(False).astype(bool)
            elif col == "fits":
                df[col] = df[col].astype("boolean")
            elif col == "line":
                df[col] = df[col].astype(int)
            elif col in extras:  # numbers when every cell is one, else text
                text = df[col].map(lambda x: _text(x).strip())
                try:
                    df[col] = pd.to_numeric(text.mask(text == "")).astype(float)
                except (ValueError, TypeError):
                    df[col] = text.astype(object)
            else:
                df[col] = df[col].map(_text).astype(object)
        return df


def _text(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _lookup(cache: dict, key: tuple, resolve: Any) -> Any:
    """`resolve()` once per key; a name that does not resolve is kept as its InputError."""
    if key not in cache:
        try:
            cache[key] = resolve()
        except InputError as exc:  # unknown and ambiguous names are InputErrors
            cache[key] = exc
    return cache[key]


def read_runs(paths: Iterable[str | Path] | str | Path, strict: bool = False, resolve: bool = True,
              defaults: Defaults | str | Path | None = None, strict_names: bool = False,
              keep_unresolved: bool = False) -> RunTable:
    """Read runs files (CSV or Parquet, reference or LLMFineTuningBench schema; a folder: its runs files) into
    one `RunTable`. Each problem (missing columns, bad cells, duplicate ids or rows, names the catalogs cannot
    resolve) is reported with file and line and its row or file skipped; `strict` raises `DataFileError` at
    the first. `resolve=False` skips catalog look-ups; `defaults`: a `Defaults` or a YAML path (None: the
    shipped source_defaults.yaml). A GPU family name reads as the catalog's default variant (recorded in
    `defaults_used`) unless `strict_names`. `keep_unresolved` also keeps, in `RunTable.unresolved`, the rows
    set aside only because a name did not resolve, as `resolve=False` reads them.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    defs = defaults if isinstance(defaults, Defaults) else load_defaults(defaults)
    reader = _Reader(strict, resolve, defs, strict_names, keep_unresolved)
    for f in (f for p in map(Path, paths) for f in (reference_run_files(p) if p.is_dir() else [p])):
        reader.read_file(f)
    return reader.table()


# --- reference runs -----------------------------------------------------------------------------

def _runs_in(d: Path) -> Path | None:
    """`d` itself or `d/runs` when it holds runs files."""
    for cand in (d / "runs", d):
        if cand.is_dir() and any(cand.glob("*.csv")):
            return cand
    return None


def reference_runs_dir() -> Path:
    """The shared reference runs folder: `$TUNEPLAN_REFERENCE_DIR` (the runs folder, or the reference folder
    that holds runs/), else `shared/reference/runs` next to an ancestor of this package's source tree or of
    the current working directory (CI clones the repository next to `shared/`)."""
    if env := os.environ.get(REFERENCE_DIR_ENV):
        found = _runs_in(Path(env).expanduser())
        if found is None:
            raise TuneplanError(f"{REFERENCE_DIR_ENV}={env}: no runs CSV files there or in its runs/ folder")
        return found
    starts = [Path(__file__).resolve().parent, Path.cwd().resolve()]
    for start in starts:
        for anc in [start, *start.parents]:
            cand = anc / "shared" / "reference" / "runs"
            if cand.is_dir() and any(cand.glob("*.csv")):
                return cand
    raise TuneplanError("cannot find the shared reference runs: set TUNEPLAN_REFERENCE_DIR to the folder "
                        "holding them (e.g. <checkout>/../shared/reference/runs)")


def reference_run_files(directory: str | Path | None = None) -> list[Path]:
    """The runs files (CSV, Parquet) of a folder, sorted; the shared reference runs by default."""
    d = Path(directory) if directory is not None else reference_runs_dir()
    return sorted(p for p in d.iterdir() if p.suffix.lower() in RUNS_SUFFIXES and p.is_file())


def load_reference_runs(strict: bool = False, resolve: bool = True,
                        directory: str | Path | None = None) -> RunTable:
    """Every runs file of the shared reference set (see `reference_runs_dir`)."""
    return read_runs(reference_run_files(directory), strict=strict, resolve=resolve)


# --- writing ------------------------------------------------------------------------------------

def _as_records(rows_or_df: Any) -> list[dict[str, Any]]:
    if isinstance(rows_or_df, RunTable):
        rows_or_df = rows_or_df.df
    if hasattr(rows_or_df, "to_dict") and hasattr(rows_or_df, "columns"):
        return list(rows_or_df.to_dict(orient="records"))
    rows = [rows_or_df] if isinstance(rows_or_df, dict) else list(rows_or_df)
    if not all(isinstance(r, dict) for r in rows):
        raise InputError("rows", "write_runs takes a DataFrame, a RunTable, a dict or dicts")
    return rows


_ID_SUFFIX = re.compile(r"^(.*)-(\d+)$")


def write_runs(rows_or_df: Any, path: str | Path, append: bool = True) -> int:
    """Append rows to a runs CSV file (`append=False`: refuse an existing one); returns the rows written.
    A new file gets the reference header plus the rows' extra columns; an existing one keeps its header
    and its rows, refuses a column it lacks and an id it has, and gives a row without an id `<source>-<n>`
    after the largest n. The columns `read_runs` adds are not written. One exclusive lock covers the read
    and the append, so concurrent writers (two runs' callbacks) never share an id nor interleave lines."""
    p = Path(path)
    records = [{k: v for k, v in r.items() if k not in ADDED_COLUMNS} for r in _as_records(rows_or_df)]
    p.parent.mkdir(parents=True, exist_ok=True)
    check_output_path(p, "out", "runs CSV")  # a regular file (a FIFO would block), in a writable folder
    created = not p.exists()
    with open(p, "a+", newline="", encoding="utf-8", errors="surrogateescape") as f:
        _lock(f)  # held until the file is closed
        f.seek(0)
        text = f.read()
        exists = bool(text)
        if exists and not append:
            raise DataFileError(str(p), None, "file exists; refusing to overwrite it (append=True adds rows)")
        try:
            header, lines = _new_lines(records, p, text.removeprefix("\ufeff"))
        except DataFileError:
            if created and not exists:  # nothing written: no empty file left behind either
                with contextlib.suppress(OSError):
                    p.unlink()
            raise
        if exists and text[-1] not in "\n\r":
            f.write("\n")
        w = csv.writer(f, lineterminator="\n")
        if not exists:
            w.writerow(header)
        w.writerows(lines)
        f.flush()  # on disk before the lock is released: the next writer reads these ids
    return len(lines)


def _new_lines(records: list[dict[str, Any]], p: Path, text: str) -> tuple[list[str], list[list[str]]]:
    """(the header, the cells of each new row) for rows appended to a runs file whose text is `text`
    ('' for a new file): ids checked against the file's and given where missing."""
    if text:
        reader = csv.reader(io.StringIO(text, newline=""))
        header = [h.strip() for h in next(reader, [])]
        id_at = header.index("id") if "id" in header else None
        existing_ids = {cells[id_at] for cells in reader if id_at is not None and len(cells) > id_at}
        if not header:
            raise DataFileError(str(p), 1, "existing file has no header")
    else:
        header = list(dict.fromkeys([*REFERENCE_COLUMNS, *(k for r in records for k in r)]))
        existing_ids = set()
    for i, r in enumerate(records):
        extra = [k for k, val in r.items() if k not in header and cell_str(val) != ""]
        if extra:
            raise DataFileError(str(p), 1, f"row {i + 1} has column(s) the file's header lacks: "
                                           f"{', '.join(extra)}")
    counters: dict[str, int] = {}  # the largest n of each `<prefix>-<n>` id

    def count(rid: str) -> None:
        if m := _ID_SUFFIX.match(rid):
            counters[m.group(1)] = max(counters.get(m.group(1), 0), int(m.group(2)))

    for rid in existing_ids:
        count(rid)
    new_ids: set[str] = set()
    lines = []
    for i, r in enumerate(records):
        rid = cell_str(r.get("id"))
        if not rid and "id" in header:
            prefix = cell_str(r.get("source")) or p.stem
            counters[prefix] = counters.get(prefix, 0) + 1
            rid = f"{prefix}-{counters[prefix]}"
            r = {**r, "id": rid}
        if rid and (rid in existing_ids or rid in new_ids):
            raise DataFileError(str(p), None, f"row {i + 1}: id '{rid}' is already in the file; nothing written")
        if rid:
            new_ids.add(rid)
            count(rid)
        lines.append([cell_str(r.get(col)) for col in header])
    return header, lines


def _lock(f: Any) -> None:
    """An exclusive lock on the open file, released when it is closed."""
    try:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    except (ImportError, OSError):  # pragma: no cover - Windows or unsupported filesystem
        pass
