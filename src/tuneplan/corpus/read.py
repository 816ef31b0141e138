"""Reading a dataset file (JSONL, CSV, Parquet, a JSON list, a `datasets.save_to_disk` folder) in batches of
rows, numbered from 1, and each row's shape: what is prompt (not trained on) and what is completion (trained
on). The files, the shapes and how a bad row is reported: docs/data.md, "Files and row shapes"."""

from __future__ import annotations

import csv
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tuneplan.errors import InputError, shown
from tuneplan.errors import file_kind as mode_kind

SHAPES = ("text", "chat", "prompt-completion", "alpaca", "preference", "rl-prompt")
BATCH_ROWS = 4096
"""Rows handed on per batch (bounded memory whatever the file size)."""
ROLE_NAMES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
              "bot": "assistant", "system": "system", "tool": "tool", "function": "tool", "observation": "tool"}
"""ShareGPT's `from` names to chat roles."""


class Example(NamedTuple):
    """One row as sequences: `prompt` (a string, a message list, or None when all is trained on) and one
    `completion` per sequence (two for a preference pair, none for an RL prompt). A named tuple: one is
    made per row, millions for a large file."""

    prompt: Any
    completions: list


@dataclass
class ReadState:
    """What a read found besides the rows: skipped bad rows (row number and reason, the first few kept)."""

    path: str
    kind: str
    shape: str = ""
    rows: int = 0
    bad_rows: int = 0
    bad_examples: list = field(default_factory=list)
    split: str | None = None


def file_kind(path: Path) -> str:
    """jsonl, json, csv, parquet, or arrow (a save_to_disk folder), from the name (or the folder's files)."""
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return "arrow"
        raise InputError("data", f"{path}: a folder that is not a datasets.save_to_disk folder (no dataset_info.json "
                                 "or dataset_dict.json)")
    if not path.is_file():  # a FIFO or a device named x.jsonl would block (or never end) on read
        raise InputError("data", f"{shown(path)}: not a regular file ({mode_kind(path.stat().st_mode)})")
    suffix = path.suffix.lower()
    kind = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet",
            ".pq": "parquet"}.get(suffix)
    if kind is None:
        raise InputError("data", f"{path}: unknown file type '{suffix or '(none)'}'",
                         [".jsonl", ".json", ".csv", ".parquet", "a save_to_disk folder"])
    if kind == "json":  # a .json file of one object per line is JSONL
        with path.open("rb") as f:
            head = f.read(4096).lstrip()
        if head.startswith(b"{"):
            return "jsonl"
    return kind


SHAPE_COLUMNS = (({"messages"}, "chat"), ({"conversations"}, "chat"), ({"chosen", "rejected"}, "preference"),
                 ({"prompt", "completion"}, "prompt-completion"), ({"instruction", "output"}, "alpaca"),
                 ({"text"}, "text"), ({"prompt"}, "rl-prompt"))
"""The columns that tell each shape, the first match winning."""


def detect_shape(columns: list[str], path: str) -> str:
    """The row shape from the column names."""
    cols = set(columns)
    for need, shape in SHAPE_COLUMNS:
        if need <= cols:
            return shape
    raise InputError("data-format", f"{path}: no known row shape in the columns ({', '.join(sorted(cols)) or 'none'}); "
                                    "name it", SHAPES)


class BadRow(Exception):
    """A row that cannot be read: its reason (the field and what is wrong)."""


def _text(row: dict, name: str, *, optional: bool = False) -> str | None:
    v = row.get(name)
    if v is None:
        if optional:
            return None
        raise BadRow(f"field '{name}' is missing")
    if not isinstance(v, str):
        raise BadRow(f"field '{name}' is {type(v).__name__}, not text")
    return v


def _messages(v: Any, name: str) -> list[dict]:
    """A chat message list as [{"role", "content"}] (ShareGPT's from/value read too)."""
    if not isinstance(v, list) or not v:
        raise BadRow(f"field '{name}' is {'empty' if isinstance(v, list) else type(v).__name__}, not a message list")
    out = []
    for i, m in enumerate(v):
        if not isinstance(m, dict):
            raise BadRow(f"field '{name}' message {i + 1} is {type(m).__name__}, not an object")
        if type(m.get("role")) is str and type(m.get("content")) is str:  # the usual shape, as it is
            out.append(m)
            continue
        role = m.get("role") if m.get("role") is not None else ROLE_NAMES.get(str(m.get("from", "")).lower())
        content = m.get("content") if "content" in m and m.get("content") is not None else m.get("value")
        if not isinstance(role, str):
            raise BadRow(f"field '{name}' message {i + 1} has no role")
        if not isinstance(content, str):
            raise BadRow(f"field '{name}' message {i + 1} content is "
                         f"{'missing' if content is None else type(content).__name__ + ', not text'}")
        out.append({"role": role, "content": content})
    return out


def _text_or_messages(row: dict, name: str, *, optional: bool = False) -> Any:
    v = row.get(name)
    if isinstance(v, list):
        return _messages(v, name)
    return _text(row, name, optional=optional)


def to_example(row: dict, shape: str) -> Example:
    """One row in `shape` as an Example; BadRow naming the field when it does not hold that shape."""
    if shape == "text":
        return Example(None, [_text(row, "text")])
    if shape == "chat":
        name = "messages" if "messages" in row and row["messages"] is not None else "conversations"
        msgs = _messages(row.get(name), name)
        last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=None)
        if last is None:
            raise BadRow(f"field '{name}' has no assistant turn")
        return Example(msgs[:last], [msgs[last:last + 1]])
    if shape == "prompt-completion":
        return Example(_text_or_messages(row, "prompt"), [_text_or_messages(row, "completion")])
    if shape == "alpaca":
        instruction = _text(row, "instruction")
        extra = _text(row, "input", optional=True)
        user = instruction + ("\n" + extra if extra else "")
        return Example([{"role": "user", "content": user}],
                       [[{"role": "assistant", "content": _text(row, "output")}]])
    if shape == "preference":
        prompt = _text_or_messages(row, "prompt", optional=True)
        return Example(prompt, [_text_or_messages(row, "chosen"), _text_or_messages(row, "rejected")])
    if shape == "rl-prompt":
        return Example(_text_or_messages(row, "prompt"), [])
    raise InputError("data-format", f"unknown shape '{shape}'", SHAPES)


# ---- files as batches of row dicts --------------------------------------------------------------------------

def _chunks(rows: Iterator[tuple[int, Any, int]]) -> Iterator[tuple[int, list, int]]:
    """Numbered rows (row number, dict or BadRow, progress units) in batches of BATCH_ROWS."""
    while chunk := list(itertools.islice(rows, BATCH_ROWS)):
        yield chunk[0][0], [row for _, row, _ in chunk], chunk[-1][2]


def _jsonl_rows(f: Any) -> Iterator[tuple[int, Any, int]]:
    """(row number, parsed object or BadRow, bytes read) of each non-blank line."""
    for row, line in enumerate((line for line in f if line.strip()), start=1):
        try:
            obj = json.loads(line)
        except ValueError as exc:
            obj = BadRow(f"not valid JSON ({str(exc).split(':')[0]})")
        yield row, obj if isinstance(obj, (dict, BadRow)) else BadRow(f"a JSON {type(obj).__name__}, not an object"), f.tell()


def _csv_records(reader: Any) -> Iterator[list[str] | BadRow]:
    """Each record of a csv reader; a BadRow for one the csv module cannot parse (a bare carriage return
    inside a line), the reader going on with the next line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield BadRow(f"not valid CSV ({str(exc).split(' - ')[0]})")


def _csv_rows(f: Any) -> Iterator[tuple[int, Any, int]]:
    """(row number, dict or BadRow, bytes read) of each record (a record of the wrong width is a bad row)."""
    csv.field_size_limit(2**31 - 1)  # a long document is one cell: the csv module's default stops at 128 KiB
    records = _csv_records(csv.reader(line.decode("utf-8", "replace") for line in f))
    header = next(records, None)
    header = [] if header is None or isinstance(header, BadRow) else header
    if header:
        header[0] = header[0].removeprefix("\ufeff")  # a byte-order mark
    if dup := sorted({c for c in header if header.count(c) > 1}):  # a row would keep only the last one's cell
        raise InputError("data", f"{shown(f.name)}: duplicate column(s) in the header: {', '.join(dup)}")
    for row, rec in enumerate(records, start=1):
        if not isinstance(rec, BadRow) and len(rec) != len(header):
            rec = BadRow(f"{len(rec)} fields, the header has {len(header)}")
        yield row, rec if isinstance(rec, BadRow) else dict(zip(header, rec, strict=True)), f.tell()


def _batches_lines(path: Path, row_reader) -> Iterator[tuple[int, list, int]]:
    with path.open("rb") as f:
        if f.read(2) in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 (or -32): split at b"\n", each line's bytes misread
            raise InputError("data", f"{shown(path)}: UTF-16 text (it starts with a UTF-16 byte-order mark): "
                                     "save it as UTF-8")
        f.seek(0)
        yield from _chunks(row_reader(f))


def _numbered(batches: Any, total_rows: int, units: int) -> Iterator[tuple[int, list, int]]:
    """(first row, row dicts, progress units) of pyarrow batches: `units` in all over `total_rows` rows."""
    done = 0
    for batch in batches:
        yield done + 1, batch.to_pylist(), units * (done + batch.num_rows) // max(1, total_rows)
        done += batch.num_rows


def _batches_parquet(path: Path) -> Iterator[tuple[int, list, int]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors for a damaged file vary (ArrowInvalid, OSError)
        raise InputError("data", f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    return _numbered(pf.iter_batches(batch_size=BATCH_ROWS), pf.metadata.num_rows, os.path.getsize(path))


def _batches_json(path: Path) -> Iterator[tuple[int, list, int]]:
    try:
        with path.open("rb") as f:
            data = json.load(f)
    except ValueError as exc:
        raise InputError("data", f"{path}: not valid JSON ({str(exc).split(':')[0]})") from None
    if isinstance(data, dict):  # {"train": [...]} or {"data": [...]}: the one list inside
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise InputError("data", f"{path}: a JSON object; expected a list of rows (or one object per line: JSONL)")
        data = lists[0]
    if not isinstance(data, list):
        raise InputError("data", f"{path}: a JSON {type(data).__name__}; expected a list of rows")
    size = os.path.getsize(path)
    return _chunks((i + 1, r if isinstance(r, dict) else BadRow(f"a JSON {type(r).__name__}, not an object"),
                    size * (i + 1) // len(data)) for i, r in enumerate(data))


def _batches_arrow(path: Path, state: ReadState) -> Iterator[tuple[int, list, int]]:
    """A save_to_disk folder's Dataset (a DatasetDict's train split, or its only one) in Arrow tables."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError / ValueError for folders it cannot read
        raise InputError("data", f"{path}: not a readable datasets folder ({str(exc).splitlines()[0]})") from None
    if isinstance(ds, datasets.DatasetDict):
        state.split = "train" if "train" in ds else next(iter(ds), None)
        if state.split is None:
            raise InputError("data", f"{path}: a DatasetDict with no splits")
        ds = ds[state.split]
    return _numbered(ds.with_format("arrow").iter(batch_size=BATCH_ROWS), len(ds), 1_000_000)


def total_units(path: Path, kind: str) -> int:
    """The progress bar's total: the file's bytes (a save_to_disk folder: a million parts of its rows)."""
    return 1_000_000 if kind == "arrow" else os.path.getsize(path)


def row_batches(path: Path, state: ReadState) -> Iterator[tuple[int, list, int]]:
    """(first row number, rows, progress units read) per batch; each row a dict or a BadRow."""
    if state.kind == "arrow":
        return _batches_arrow(path, state)
    if state.kind in ("jsonl", "csv"):
        return _batches_lines(path, _jsonl_rows if state.kind == "jsonl" else _csv_rows)
    return {"parquet": _batches_parquet, "json": _batches_json}[state.kind](path)


def examples(path: str | os.PathLike, shape: str | None = None, *, skip_bad_rows: bool = False,
             state: ReadState | None = None) -> Iterator[tuple[list[Example], int]]:
    """The file's rows as batches of Examples (with the progress units read so far). A bad row (not valid
    JSON, a missing field, a non-text value) is an InputError naming the file, the row and the field,
    unless `skip_bad_rows`: then it is counted in `state` and left out. An empty file is an InputError."""
    p = Path(path)
    if not p.exists():
        raise InputError("data", f"{p}: no such file or folder")
    st = state if state is not None else ReadState(str(p), "")
    st.kind = st.kind or file_kind(p)
    if shape is not None and shape not in SHAPES:
        raise InputError("data-format", f"unknown shape '{shape}'", SHAPES)
    st.shape = shape or ""
    for first, rows, read in row_batches(p, st):
        yield _examples_of(p, st, first, rows, skip_bad_rows), read
    if st.rows - st.bad_rows == 0:
        raise InputError("data", f"{p}: no rows" + (f" that could be read ({st.bad_rows} bad)" if st.bad_rows else ""))


def _examples_of(p: Path, st: ReadState, first: int, rows: list, skip_bad_rows: bool) -> list[Example]:
    """The Examples of one batch of rows (dicts or BadRows numbered from `first`)."""
    out: list[Example] = []
    for i, row in enumerate(rows):
        n = first + i
        try:
            if isinstance(row, BadRow):
                raise row
            if not st.shape:
                st.shape = detect_shape([k for k, v in row.items() if v is not None], str(p))
            out.append(to_example(row, st.shape))
        except BadRow as exc:
            if not skip_bad_rows:
                raise InputError("data", f"{p} row {n}: {exc} (--skip-bad-rows leaves such rows out)") from None
            st.bad_rows += 1
            if len(st.bad_examples) < 5:
                st.bad_examples.append(f"row {n}: {exc}")
    st.rows += len(rows)
    return out
