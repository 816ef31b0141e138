"""Reading a plain CSV runs file by columns: the same rows, problems and order as `_Reader.read_file`
row by row, each step computed once per distinct input it reads. pyarrow parses the file into
dictionary-encoded columns (`read_columns`).

A row's normalisation has three parts, each a function of a few of its cells: the settings
(`_Reader.settings`: names, flags, defaults, catalog figures) of the cells the rules and look-ups
read (`settings_columns`), the derived figures (`normalise.derive`) of `DERIVE_COLUMNS` and two
flags, the outcome marks (`_Reader.finish`) of the settings, the outcome cells and which figures are
present. Each part runs on one row of each group of rows alike in its inputs; its changes are then
set on every row of the group. Rows with a number the checks refuse go through `read_row` itself;
ids and exact duplicates are checked row by row, in order (rows hashed by their cells, a
duplicate confirmed on the cells themselves)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuneplan.runs.normalise import ERROR_TEXT_COLUMNS, RowError, RowState, check_values, derive, parse_number
from tuneplan.runs.schema import (
    ADDED_COLUMNS,
    BOOL_ADDED,
    EXTRA_NUMERIC_COLUMNS,
    NUMERIC_COLUMNS,
    REFERENCE_COLUMNS,
    SETTING_COLUMNS,
    THROUGHPUT_COLUMNS,
)

DERIVE_COLUMNS = ("gpus", "sharding", "micro_batch_size", "grad_accum", "global_batch_size", "step_time_s",
                  "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "seq_len", "avg_tokens_per_sample",
                  "peak_mem_gib", "mem_kind")
"""Every cell `normalise.derive` reads or writes (tests/test_predict_speed.py checks it)."""
DERIVE_FLAGS = ("full_length_samples", "step_time_is_micro_batch")
"""The flags `derive` reads."""
NAME_COLUMNS = ("source", "model", "model_hf_id", "notes", "gpu", "method", "framework")
"""Cells the settings read by value besides the rules' own (names, method from the notes, framework)."""
FILLED_COLUMNS = ("params_b", "active_params_b", "peft_options", "trainable_params")
"""Cells the settings fill when empty besides the rules' targets (catalog figures, notes' settings)."""
FINISH_ADDED = ("model_resolved", "gpu_resolved", "status", "is_oom", "fits", "is_duplicate", "is_estimate",
                "usable_throughput", "usable_memory", "caveats")
"""The columns `_Reader.finish` adds that are the same for rows alike in its inputs (not file, line,
defaults_used)."""
MASK = (1 << 64) - 1
"""Row hashes are sums of the cells' hashes modulo 2**64 (numpy's uint64 arithmetic)."""

BOM = b"\xef\xbb\xbf"
"""UTF-8's byte-order mark, which the record reader skips (`utf-8-sig`)."""
PLAIN_MIN_BYTES = 1 << 20
"""Files from this size on are read by columns: below it, importing pyarrow costs more than it saves."""
READ_BLOCK_BYTES = 4 << 20
"""Bytes pyarrow parses at a time (its default, 1 MiB, merges four times as many dictionaries; 16 MiB
and more parsed slower here: 200,000 rows, 246 MB, 0.57-0.88 s against 0.70-0.96 s at 1 MiB)."""


@dataclass
class Columns:
    """Per header column: each row's code into `values` (the distinct cells, stripped)."""

    codes: list[np.ndarray]
    values: list[list[str]]
    n: int


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


def read_columns(path: Path, n_fields: int, max_chars: int, min_bytes: int | None = None) -> Columns | None:
    """The file's cells by column (header skipped), parsed by pyarrow, or None when the file is smaller
    than `min_bytes` (default PLAIN_MIN_BYTES) or not plain: UTF-8, each record on a line of its own
    (so record i is on line i + 2) with the header's number of fields, no carriage return but in a
    line end, no cell over `max_chars`, no record of empty cells. The record reader
    (`io._csv_records`) reads any other file, locating its problems by line."""
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
    if not data or data.count(b"\r") != data.count(b"\r\n"):
        return None  # a carriage return alone: a line end to the record reader, none to pyarrow
    n = data.count(b"\n") - (1 if data.endswith(b"\n") else 0)  # records if each is on a line of its own
    if n < 1:
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
        return None  # a record over several lines (a quoted line end) or a blank line
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


def settings_columns(defaults) -> tuple[set[str], set[str]]:
    """(cells the settings read by value, cells they only fill when empty)."""
    read: set[str] = set(NAME_COLUMNS)
    targets: set[str] = set(FILLED_COLUMNS)
    entries = []

    def cond(c) -> None:
        read.update(c.when)
        read.update(c.unless)
        read.update(c.match)

    for src in defaults.sources.values():
        for f in src.flags:
            cond(f.conditions)
        entries += list(src.defaults.values())
    for fw in defaults.frameworks:
        entries += list(fw.defaults.values())
    for e in entries:
        cond(e.conditions)
        targets.add(e.column)
        if e.by:
            read.add(e.by)
    return read, targets - read


def row_hash(key) -> int:
    """A row's exact-duplicate key hashed as the columnar reader hashes its rows."""
    return sum(hash(p) & MASK for p in key) & MASK


def group_ids(codes: list[np.ndarray], n: int) -> np.ndarray:
    """One id per row, equal for rows equal in every code array (ids dense, by first appearance)."""
    import pandas as pd

    key = np.zeros(n, dtype=np.int64)
    for c in codes:
        c = np.asarray(c, dtype=np.int64)
        key = pd.factorize(key * (int(c.max(initial=0)) + 1) + c)[0].astype(np.int64)
    return key


def object_ids(values: np.ndarray) -> np.ndarray:
    """`id()` of each object of a 1-D object array: read from the array's own pointers (CPython's
    `id` is the object's address) when the array is contiguous, else one `id` call per cell."""
    import ctypes
    import sys

    if (values.ndim == 1 and len(values) and values.flags.c_contiguous and sys.implementation.name == "cpython"
            and values.itemsize == ctypes.sizeof(ctypes.c_ssize_t)):
        pointers = (ctypes.c_ssize_t * len(values)).from_address(values.ctypes.data)
        return np.ctypeslib.as_array(pointers).astype(np.int64)  # a copy: nothing refers to the array after
    return np.fromiter(map(id, values), dtype=np.int64, count=len(values))


def first_rows(codes: np.ndarray) -> np.ndarray:
    """`np.unique(codes, return_index=True)[1]` for codes numbered in order of first appearance (as
    `pd.factorize` and `group_ids` number them): the row where each code first appears, in one pass
    instead of a sort (`appearance_firsts`). Codes in another order take `np.unique` itself."""
    codes = np.asarray(codes)
    if len(codes) == 0:
        return np.zeros(0, dtype=np.intp)
    first = appearance_firsts(codes)
    return np.unique(codes, return_index=True)[1] if first is None else first


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class PlainFile:
    """One plain CSV file in the reference schema, read by columns into `reader`."""

    def __init__(self, reader, path: Path, header: list[str], cols: Columns) -> None:
        self.r = reader
        self.path = path
        self.name = str(path)
        self.header = header
        self.at = {h: j for j, h in enumerate(header)}
        self.codes = cols.codes
        self.text = cols.values
        self.n = cols.n
        numeric = set(NUMERIC_COLUMNS) | set(EXTRA_NUMERIC_COLUMNS)
        self.vals: list[list[Any]] = []
        self.bad = np.zeros(self.n, dtype=bool)
        for j, h in enumerate(header):
            if h not in numeric:
                self.vals.append(self.text[j])
                continue
            parsed, bad = [], []
            for t in self.text[j]:
                try:
                    x = parse_number(t, h)
                    b = bool(check_values({h: x}))
                except RowError:
                    x, b = None, True
                parsed.append(x)
                bad.append(b)
            self.vals.append(parsed)
            if any(bad):
                self.bad |= np.asarray(bad, dtype=bool)[self.codes[j]]
        stem = path.stem
        if "source" in self.at:
            j = self.at["source"]
            self.source_values = [t or stem for t in self.text[j]]
            self.source_codes = self.codes[j]
        else:
            self.source_values, self.source_codes = [stem], np.zeros(self.n, dtype=np.int64)

    # -- cells --
    def column(self, col: str) -> tuple[np.ndarray, list[Any]]:
        """(codes, values) of a column after parsing (an absent column: every row None)."""
        if col == "source":
            return self.source_codes, self.source_values
        j = self.at.get(col)
        if j is None:
            return np.zeros(self.n, dtype=np.int64), [None]
        return self.codes[j], self.vals[j]

    def raw(self, i: int) -> dict[str, str]:
        return {h: self.text[j][self.codes[j][i]] for j, h in enumerate(self.header)}

    def values(self, i: int) -> dict[str, Any]:
        """Row i as `read_row` hands it to `normalise` (its id, if empty, given by `read`)."""
        v = {h: self.vals[j][self.codes[j][i]] for j, h in enumerate(self.header)}
        v["source"] = self.source_values[self.source_codes[i]]
        return v

    def key(self, i: int) -> frozenset:
        """Row i's exact-duplicate key, as `read_row` builds it."""
        raw = self.raw(i)
        raw["source"] = self.source_values[self.source_codes[i]]
        return frozenset((k, c) for k, c in raw.items() if k != "id" and c)

    def hashes(self) -> np.ndarray:
        h = np.zeros(self.n, dtype=np.uint64)
        for j, col in enumerate(self.header):
            if col in ("id", "source"):
                continue
            table = np.asarray([hash((col, t)) & MASK if t else 0 for t in self.text[j]], dtype=np.uint64)
            h += table[self.codes[j]] if len(table) else np.uint64(0)
        src = np.asarray([hash(("source", t)) & MASK for t in self.source_values], dtype=np.uint64)
        return h + src[self.source_codes]

    # -- rows in order: checks, ids, duplicates --
    def admit(self) -> tuple[list[int], list[str]]:
        """The rows that pass the number checks, the id and the duplicate checks (problems reported in
        row order), and each row's id (generated where empty).

        Only the rows a check can stop or change go through them one by one (`_special`); every other
        row is kept, its id remembered, all at once: the same outcome as checking each in order."""
        r = self.r
        id_codes, id_vals = self.column("id")
        ids = [str(x or "") for x in np.asarray(id_vals, dtype=object)[id_codes].tolist()]
        hs = self.hashes()
        uniq, counts = np.unique(hs, return_counts=True)
        before = r.row_hashes()  # rows of the files read before this one (none for the first file)
        cand = set(uniq[counts > 1].tolist()) | (before & set(uniq.tolist()) if before else set())
        special = self._special(id_codes, id_vals, hs, cand)
        keep: list[int] = []
        lazy: list[int] = []
        hs_list = hs.tolist()
        for i in np.flatnonzero(special).tolist():
            self._admit_row(i, ids, hs_list[i], cand, keep, lazy)
        plain = np.flatnonzero(~special)
        name = self.name
        r.seen_ids.update((ids[i], f"{name}:{i + 2}") for i in plain.tolist())
        keep_rows = np.sort(np.concatenate([plain, np.asarray(keep, dtype=np.int64)]))
        rows = np.sort(np.concatenate([plain, np.asarray(lazy, dtype=np.int64)])).astype(np.int64)
        r.remember_rows(self, rows, hs[rows])
        return keep_rows.tolist(), ids

    def _special(self, id_codes: np.ndarray, id_vals: list, hs: np.ndarray, cand: set[int]) -> np.ndarray:
        """The rows a check may stop or change: a refused number, an empty id, an id given to another
        row (of this file or one read before), a possible exact duplicate."""
        text = [str(x or "") for x in id_vals]
        repeated = np.bincount(id_codes, minlength=len(text)) > 1
        ids_special = repeated | np.asarray([not t or t in self.r.seen_ids for t in text], dtype=bool)
        special = self.bad | ids_special[id_codes]
        if cand:
            special |= np.isin(hs, np.fromiter(cand, dtype=np.uint64, count=len(cand)))
        return special

    def _admit_row(self, i: int, ids: list[str], h: int, cand: set[int], keep: list[int], lazy: list[int]) -> None:
        """Row i through the number, id and duplicate checks, in file order (`admit`)."""
        r = self.r
        line = i + 2
        if self.bad[i]:
            try:
                r.read_row(self.raw(i), self.path, line, "reference", "percent")
            except RowError as exc:
                r.report(self.name, line, str(exc))
            return  # pragma: no cover - a refused number always raises
        rid = ids[i]
        if rid and rid in r.seen_ids:
            r.report(self.name, line, f"duplicate id '{rid}' (first at {r.seen_ids[rid]}); row skipped, first kept")
            return
        key = self.key(i) if h in cand else None
        if key is not None:
            first = r.first_seen(key, h)
            if first is not None:
                r.report(self.name, line, f"exact duplicate of the row at {first}; row skipped, first kept")
                return
        if rid:
            r.seen_ids[rid] = f"{self.name}:{line}"
        else:
            ids[i] = f"{self.source_values[self.source_codes[i]]}@{self.path.name}:{line}"
        if key is not None:
            r.remember(key, f"{self.name}:{line}")
        else:
            lazy.append(i)
        keep.append(i)

    # -- the three parts, once per group --
    def _outcome(self, before: dict[str, Any], st: RowState, model_spec: Any, gpu_spec: Any) -> dict[str, Any]:
        delta = {k: x for k, x in st.v.items() if k not in before or not _same(before[k], x)}
        return {"delta": delta, "records": list(st.defaults_used), "flags": dict(st.flags),
                "caveats": list(st.caveats), "model": model_spec, "gpu": gpu_spec}

    def settings(self, i: int) -> tuple[dict[str, Any] | str, dict[str, Any] | None]:
        """Row i's settings outcome (or its error) and, for a row set aside, its name-free outcome."""
        r = self.r
        v = self.values(i)
        v["id"] = self.ids[i]
        source = v["source"]
        before = dict(v)
        try:
            st, m, g = r.settings(v, [], source, "reference", "percent", r.resolve)
            return self._outcome(before, st, m, g), None
        except RowError as exc:
            unresolved = None
            if r.keep_unresolved:
                try:
                    st, m, g = r.settings(dict(before), [], source, "reference", "percent", False)
                    unresolved = self._outcome(before, st, m, g)
                except RowError:
                    unresolved = None
            return str(exc), unresolved

    def settings_groups(self, keep: list[int]) -> np.ndarray:
        """Rows alike in every cell the settings read (by value, or by emptiness where they fill it)."""
        value_cols, empty_cols = settings_columns(self.r.defaults)
        rows = np.asarray(keep, dtype=np.int64)
        codes = [self.column(c)[0][rows] for c in sorted(value_cols) if c == "source" or c in self.at]
        for c in sorted(empty_cols):
            if c in self.at:
                cc, vv = self.column(c)
                empty = np.asarray([x is None or (isinstance(x, str) and not x.strip()) for x in vv], dtype=bool)
                codes.append(empty[cc[rows]])
        nc, nv = self.column("notes")
        sc = self.column("seq_len")[0]
        arch = np.asarray(["MPT arch" in str(x or "") for x in nv], dtype=bool)  # `_Reader.model` reads seq_len
        codes.append(np.where(arch[nc[rows]], sc[rows] + 1, 0))
        return group_ids(codes, len(rows))

    def _override(self, base: np.ndarray, gids: np.ndarray, outs: list[dict], col: str, table) -> np.ndarray:
        """`base` with the value each group's changes give `col` (table: value -> the array's value)."""
        having = self._keys_index(outs).get(col)
        if not having:
            return base
        at = np.asarray(having, dtype=np.int64)
        has = np.zeros(len(outs), dtype=bool)
        has[at] = True
        vals = np.empty(len(outs), dtype=base.dtype)
        vals[at] = np.asarray([table(outs[g][col]) for g in having], dtype=base.dtype)
        m = has[gids]
        out = base.copy()
        out[m] = vals[gids[m]]
        return out

    def _keys_index(self, outs: list[dict]) -> dict[str, list[int]]:
        """Per key, the groups whose changes have it (built once per list of changes: the list is
        held with its index, so its id is not reused meanwhile)."""
        cache = self.__dict__.setdefault("_indexes", {})
        hit = cache.get(id(outs))
        if hit is not None and hit[0] is outs:
            return hit[1]
        index: dict[str, list[int]] = {}
        for g, o in enumerate(outs):
            for k in o:
                index.setdefault(k, []).append(g)
        cache[id(outs)] = (outs, index)
        return index

    def derived(self, rows: np.ndarray, gids: np.ndarray, outs: list[dict]) -> tuple[np.ndarray, list, list]:
        """Derive groups: per row its group; per group the derived changes and records."""
        deltas = [o["delta"] for o in outs]
        codes = []
        for c in DERIVE_COLUMNS:
            cc, vv = self.column(c)
            if c == "peak_mem_gib":  # derive reads only whether it is there
                present = np.asarray([x is not None for x in vv], dtype=bool)[cc[rows]]
                codes.append(self._override(present, gids, deltas, c, lambda x: x is not None))
                continue
            base = cc[rows].astype(np.int64)
            has = np.asarray([c in d for d in deltas], dtype=bool)
            if has.any():
                base = np.where(has[gids], int(base.max(initial=0)) + 1 + gids, base)
            codes.append(base)
        flags = np.asarray([2 * bool(o["flags"].get(DERIVE_FLAGS[0])) + bool(o["flags"].get(DERIVE_FLAGS[1]))
                            for o in outs], dtype=np.int64)
        codes.append(flags[gids])
        dg = group_ids(codes, len(rows))
        first = first_rows(dg)
        changes, records = [], []
        firsts = rows[first]
        cells = {}  # each column's cell at each derive group's first row
        for c in DERIVE_COLUMNS:
            cc, vv = self.column(c)
            cells[c] = [vv[k] for k in cc[firsts].tolist()]
        for g, at in enumerate(first.tolist()):
            o = outs[gids[at]]
            d = o["delta"]
            inputs = {c: d[c] if c in d else cells[c][g] for c in DERIVE_COLUMNS}
            st = RowState(v=dict(inputs), source="", flags=dict(o["flags"]))
            derive(st)
            changes.append({k: x for k, x in st.v.items() if not _same(inputs.get(k), x) or k not in inputs})
            records.append(list(st.defaults_used))
        return dg, changes, records

    def finished(self, rows: np.ndarray, gids: np.ndarray, outs: list[dict], dg: np.ndarray, changes: list,
                 resolve: bool) -> tuple[np.ndarray, list[dict]]:
        """Finish groups: per row its group; per group the marks `_Reader.finish` adds."""
        codes = [gids]
        for c in ERROR_TEXT_COLUMNS:
            if c in self.at:
                codes.append(self.column(c)[0][rows])
        for c in THROUGHPUT_COLUMNS + ("peak_mem_gib",):
            cc, vv = self.column(c)
            present = np.asarray([x is not None for x in vv], dtype=bool)[cc[rows]]
            present = self._override(present, gids, [o["delta"] for o in outs], c, lambda x: x is not None)
            codes.append(self._override(present, dg, changes, c, lambda x: x is not None))
        fg = group_ids(codes, len(rows))
        first = first_rows(fg)
        marks = []
        for at in first:
            i, o = int(rows[at]), outs[gids[at]]
            v = self.values(i)
            v["id"] = self.ids[i]
            v.update(o["delta"])
            v.update(changes[dg[at]])
            st = RowState(v=v, source=v["source"], caveats=list(o["caveats"]), flags=dict(o["flags"]))
            row = self.r.finish(st, self.name, i + 2, o["model"], o["gpu"], resolve)
            marks.append({c: row[c] for c in FINISH_ADDED})
        return fg, marks

    def frame(self, rows: np.ndarray, gids: np.ndarray, outs: list[dict], resolve: bool):
        """The rows' typed table, as `_Reader.frame` types the rows `read_row` returns."""
        import pandas as pd

        dg, changes, records = self.derived(rows, gids, outs)
        fg, marks = self.finished(rows, gids, outs, dg, changes, resolve)
        deltas = [o["delta"] for o in outs]
        numeric = set(NUMERIC_COLUMNS) | set(EXTRA_NUMERIC_COLUMNS)
        pair = group_ids([gids, dg], len(rows))  # the defaults taken: once per (settings, derive) group
        texts = [";".join(x.replace(";", ",") for x in outs[gids[at]]["records"] + records[dg[at]])
                 for at in first_rows(pair).tolist()]
        used = np.asarray(texts, dtype=object)[pair] if texts else np.zeros(0, dtype=object)
        data: dict[str, Any] = {}
        for c in list(REFERENCE_COLUMNS) + list(SETTING_COLUMNS) + list(ADDED_COLUMNS):
            if c == "file":
                data[c] = pd.Series([self.name] * len(rows), dtype=object)
            elif c == "line":
                data[c] = pd.Series(rows + 2, dtype=int)
            elif c == "defaults_used":
                data[c] = pd.Series(used, dtype=object)
            elif c in FINISH_ADDED:
                vals = [m[c] for m in marks]
                if c in BOOL_ADDED:
                    data[c] = pd.Series(np.asarray([bool(x) for x in vals], dtype=bool)[fg])
                elif c == "fits":
                    data[c] = pd.Series(pd.array(np.asarray(vals, dtype=object)[fg].tolist(), dtype="boolean"))
                else:
                    data[c] = pd.Series(np.asarray([_text(x) for x in vals], dtype=object)[fg], dtype=object)
            elif c == "id":
                data[c] = pd.Series(np.asarray(self.ids, dtype=object)[rows], dtype=object)
            else:
                table = _number if c in numeric else _text
                cc, vv = self.column(c)
                base = np.asarray([table(x) for x in vv], dtype=float if c in numeric else object)[cc[rows]]
                col = self._override(self._override(base, gids, deltas, c, table), dg, changes, c, table)
                data[c] = pd.Series(col, dtype=float if c in numeric else object)
        return pd.DataFrame(data)

    def read(self) -> tuple[Any, Any]:
        """(the table of the rows read, the table of the rows set aside whose names did not resolve)."""
        r = self.r
        start = len(r.problems)
        keep, self.ids = self.admit()
        kept = np.asarray(keep, dtype=np.int64)
        sg = self.settings_groups(keep)
        first = first_rows(sg)
        outs = [self.settings(keep[at]) for at in first]
        ok = np.asarray([isinstance(o, dict) for o, _ in outs], dtype=bool)
        for i, g in zip(keep, sg.tolist(), strict=True):
            if not ok[g]:
                r.report(self.name, i + 2, outs[g][0])
        r.problems[start:] = sorted(r.problems[start:], key=lambda p: p.line)
        m = ok[sg]
        resolved = self._table(kept[m], sg[m], [o for o, _ in outs], ok, r.resolve)
        unres = np.asarray([u is not None for _, u in outs], dtype=bool)
        aside = self._table(kept[unres[sg]], sg[unres[sg]], [u for _, u in outs], unres, False)
        return resolved, aside

    def _table(self, rows: np.ndarray, groups: np.ndarray, outs: list, take: np.ndarray, resolve: bool):
        if not len(rows):
            return None
        index = np.cumsum(take) - 1  # settings group -> position among the groups taken
        return self.frame(rows, index[groups], [o for o, t in zip(outs, take, strict=True) if t], resolve)


def _text(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and x != x) else str(x)


def _number(x: Any) -> float:
    return np.nan if x is None else float(x)
