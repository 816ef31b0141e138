"""The cells of a plain CSV file, column by column (issue 19 point 7: 200,000 rows read by the csv
module cell by cell took longer than everything else `tuneplan predict` does).

A file qualifies when every reader reads it alike: UTF-8 (pyarrow checks it), no carriage return but
in a line end, no blank line, every quote where RFC 4180 puts one (opening a field, closing it, or doubled inside a
quoted field) and no line end inside a quoted field, every record with the header's number of fields,
no cell over `io.MAX_CELL_CHARS`. Then record i is on line i + 2 and pyarrow's parse is the csv
module's. Any other file returns None and is read record by record (`io._csv_records`), with its
problems located by line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

QUOTE, COMMA, NEWLINE, CR = 34, 44, 10, 13
"""The bytes of '"', ',', '\n' and '\r' (ASCII, as UTF-8 writes them)."""
BOM = b"\xef\xbb\xbf"
"""UTF-8's byte-order mark, which the row-by-row reader skips (`utf-8-sig`)."""


@dataclass
class Columns:
    """Per header column: each row's code into `values` (the distinct cells, stripped)."""

    codes: list[np.ndarray]
    values: list[list[str]]
    n: int


SCAN_BYTES = 1 << 20
"""Bytes compared at a time when locating the quotes and line ends (a block stays in the CPU's cache;
comparing the whole file at once allocates a mask as large as the file)."""


def _positions(arr: np.ndarray, byte: int) -> np.ndarray:
    """Where `byte` occurs in `arr` (ascending), found block by block."""
    found = [np.flatnonzero(arr[i:i + SCAN_BYTES] == byte) + i for i in range(0, len(arr), SCAN_BYTES)]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _positions2(arr: np.ndarray, one: int, two: int) -> tuple[np.ndarray, np.ndarray]:
    """`(_positions(arr, one), _positions(arr, two))` in one pass over the bytes."""
    ones, twos = [], []
    for i in range(0, len(arr), SCAN_BYTES):
        block = arr[i:i + SCAN_BYTES]
        at = np.flatnonzero((block == one) | (block == two))
        which = block[at] == one
        at += i
        ones.append(at[which])
        twos.append(at[~which])
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(ones) if ones else empty), (np.concatenate(twos) if twos else empty)


def _plain(data: bytes) -> int | None:
    """The number of records when the file is plain CSV as the module docstring says, else None
    (that no record spans two lines, `read_columns` checks: as many records as lines).

    One pass over the bytes locates the line ends and quotes together (another the carriage returns,
    when there is one); the checks then run on their positions."""
    if not data:
        return None
    arr = np.frombuffer(data, dtype=np.uint8)
    quoted = b'"' in data
    nl, q = _positions2(arr, NEWLINE, QUOTE) if quoted else (_positions(arr, NEWLINE), None)
    if b"\r" in data:
        cr = _positions(arr, CR)  # a carriage return only before a line end
        if cr[-1] + 1 >= len(arr) or not np.all(arr[cr + 1] == NEWLINE):
            return None
    if len(nl) and (nl[0] == 0 or (nl[0] == 1 and arr[0] == CR)):  # a blank first line
        return None
    gap = np.diff(nl)
    if np.any(gap == 1) or np.any((gap == 2) & (arr[nl[1:] - 1] == CR)):  # a blank line ('\n\n', '\n\r\n')
        return None
    lines = len(nl) + (0 if data.endswith(b"\n") else 1)
    if quoted:
        if len(q) % 2:
            return None
        o, c = q[0::2], q[1::2]
        prev = np.where(o > 0, arr[np.maximum(o - 1, 0)], NEWLINE)
        nxt = np.where(c + 1 < len(arr), arr[np.minimum(c + 1, len(arr) - 1)], NEWLINE)
        escaped_before = np.concatenate([[False], o[1:] - 1 == c[:-1]])
        escaped_after = np.concatenate([c[:-1] + 1 == o[1:], [False]])
        if not np.all((prev == COMMA) | (prev == NEWLINE) | escaped_before):
            return None
        if not np.all((nxt == COMMA) | (nxt == NEWLINE) | (nxt == CR) | escaped_after):
            return None
    return lines - 1


def appearance_firsts(codes: np.ndarray) -> np.ndarray | None:
    """The row where each code first appears, when the codes are numbered 0, 1, 2... in order of first
    appearance (as `pd.factorize` and dictionary encoding number them), in one pass; else None."""
    codes = np.asarray(codes)
    if len(codes) == 0 or codes[0] != 0:
        return None
    new = np.empty(len(codes), dtype=bool)
    new[0] = True
    np.greater(codes[1:], np.maximum.accumulate(codes[:-1]), out=new[1:])
    first = np.flatnonzero(new)
    if not np.array_equal(codes[first], np.arange(len(first))) or int(codes.min()) < 0:
        return None
    return first


def _in_order(enc, pc):
    """A dictionary array as `pyarrow.compute.dictionary_encode` numbers a column of texts: its
    dictionary only the texts that occur, in order of first appearance (the CSV reader's, merged from
    its blocks, already is; any other is encoded anew)."""
    first = appearance_firsts(enc.indices.to_numpy(zero_copy_only=False))
    if first is not None and len(first) == len(enc.dictionary):
        return enc
    return pc.dictionary_encode(enc.dictionary.take(enc.indices))


PLAIN_MIN_BYTES = 1 << 20
"""Files from this size on are read by columns: below it, importing pyarrow costs more than it saves."""
READ_BLOCK_BYTES = 4 << 20
"""Bytes pyarrow parses at a time (its default, 1 MiB, merges four times as many dictionaries; 16 MiB
and more parsed slower here: 200,000 rows, 246 MB, 0.57-0.88 s against 0.70-0.96 s at 1 MiB)."""


def read_columns(path: Path, n_fields: int, max_chars: int, min_bytes: int | None = None) -> Columns | None:
    """The file's cells by column (header skipped), or None when it is not plain (see module) or
    smaller than `min_bytes` (default PLAIN_MIN_BYTES)."""
    try:
        if path.stat().st_size < (PLAIN_MIN_BYTES if min_bytes is None else min_bytes):
            return None
    except OSError:
        return None
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pacsv
    except ImportError:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if data.startswith(BOM):
        data = data[len(BOM):]
    n = _plain(data)
    if n is None or n < 1:
        return None
    names = [f"c{i}" for i in range(n_fields)]
    cells = pa.dictionary(pa.int32(), pa.string())  # each distinct text kept once, numbered as it appears
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False,
                                           block_size=READ_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                                             newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types={c: cells for c in names}, null_values=[],
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowException, ValueError):
        return None
    del data
    if table.num_rows != n or table.num_columns != n_fields:
        return None
    codes: list[np.ndarray] = []
    values: list[list[str]] = []
    for name in names:
        enc = _in_order(table[name].combine_chunks(), pc)
        raw = enc.dictionary.to_pylist()
        if any(len(v) > max_chars for v in raw):
            return None  # reported per row by the record reader
        stripped = [v.strip() for v in raw]
        uniq: dict[str, int] = {}
        remap = np.asarray([uniq.setdefault(v, len(uniq)) for v in stripped], dtype=np.int64)
        codes.append(remap[enc.indices.to_numpy(zero_copy_only=False)] if len(remap) else
                     np.zeros(n, dtype=np.int64))
        values.append(list(uniq))
    blank = np.ones(n, dtype=bool)
    for k, vals in zip(codes, values, strict=True):
        empty = np.asarray([v == "" for v in vals], dtype=bool)
        blank &= empty[k] if len(vals) else True
    if blank.any():  # a record of empty cells: skipped by the record reader, keeping its line count
        return None
    return Columns(codes=codes, values=values, n=n)
