"""Issue 19 point 7, predict rows/s: the per-distinct-setting paths give the row-by-row answers."""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuneplan.learn.dataset import BASE_COLUMNS, BATCH_COLUMNS, arrays_for, configs_from_rows, row_to_config
from tuneplan.learn.frame_configs import frame_arrays, frame_configs
from tuneplan.runs import read_runs

REF = "../shared/reference/runs"


@pytest.fixture(scope="module")
def varied() -> pd.DataFrame:
    """Reference rows with their batch shape varied (some empty, a global batch only, a bad one)."""
    df = read_runs([f"{REF}/litgpt.csv", f"{REF}/xtuner.csv", f"{REF}/llmftbench.csv", f"{REF}/peft.csv"]).df
    parts = [df]
    for k, (mb, ga, gb) in enumerate([(2.0, np.nan, np.nan), (np.nan, 2.0, 64.0), (np.nan, np.nan, np.nan),
                                      (3.0, 1.0, 24.0), (2e6, 1.0, np.nan), (np.nan, 1.0, 1e7)]):
        d = df.copy()
        d["micro_batch_size"], d["grad_accum"], d["global_batch_size"] = mb, ga, gb
        d["id"] = d["id"] + f"-v{k}"
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


class _Reads(dict):
    seen: set[str]

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)


def test_row_to_config_reads_only_the_listed_columns(varied):
    seen: set[str] = set()
    for row in varied.to_dict("records")[::7]:
        r = _Reads(row)
        r.seen = seen
        with contextlib.suppress(Exception):  # the reads up to an error count too
            row_to_config(r, {})
    assert seen <= set(BASE_COLUMNS) | set(BATCH_COLUMNS), seen - set(BASE_COLUMNS) - set(BATCH_COLUMNS)


def test_frame_configs_equal_row_by_row(varied):
    configs, errors = configs_from_rows(varied.to_dict("records"))
    fc = frame_configs(varied)
    assert fc.errors == errors
    ok = [i for i, c in enumerate(configs) if c is not None]
    assert len(ok) > 100 and len(ok) < len(varied)
    refused = varied["id"].str.endswith("-v4").to_numpy()  # a micro-batch a JobSpec refuses
    assert all(e is not None for e, r in zip(fc.errors, refused, strict=True) if r)
    assert [fc.defaults_used[i] for i in ok] == ["; ".join(configs[i].defaults_used) for i in ok]
    want = arrays_for([configs[i] for i in ok])
    got = frame_arrays(fc, np.asarray(ok))
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_frame_csv_writes_what_pandas_writes():
    from tuneplan.runs.frame_csv import _text, frame_csv_text

    df = pd.DataFrame({
        "f": [1.0, -0.0, 0.0, np.nan, 1e20, 0.1 + 0.2, 3.0, 1.0],
        "s": ['a,b', 'say "hi"', "two\nlines", "", None, " lead", "a,b", "x"],
        "o": pd.Series([1, 1.0, True, None, "1", np.nan, False, 0], dtype=object),
        "b": [True, False, True, True, False, False, True, False],
        "nb": pd.array([True, None, False, True, None, False, True, True], dtype="boolean"),
        "i": [1, 2, 3, 4, 5, 6, 7, 8],
        "e": ["", "", "", "", "", "", "", ""],
    })
    big = pd.concat([df] * 20, ignore_index=True)
    for frame in (df, big, df[["f", "s"]]):
        assert frame_csv_text(frame) == frame.to_csv(index=False)
        assert _text(frame) == frame.to_csv(index=False)  # the distinct-cell writer itself, not its fallback


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(), st.integers(), st.text(max_size=4), st.booleans()), max_size=30))
def test_frame_columns_read_cells_as_dataset_get(cells):
    from tuneplan.learn.dataset import _get
    from tuneplan.learn.frame_configs import _column

    df = pd.DataFrame({"c": pd.Series(cells, dtype=object)})
    got = _column(df, "c")
    want = [_get({"c": x}, "c") for x in df["c"].tolist()]
    assert len(got) == len(want) and all(a is b for a, b in zip(got, want, strict=True))
    assert _column(df, "absent") == [None] * len(df)


def _pandas_float_cells(values: np.ndarray) -> list[str]:
    import csv

    from pandas.core.indexes.base import get_values_for_csv

    return get_values_for_csv(values, date_format=None, na_rep="", quoting=csv.QUOTE_MINIMAL, float_format=None,
                              decimal=".").tolist()


def test_float_cells_are_pandas_float_texts_at_every_exponent():
    from tuneplan.runs.frame_csv import float_cells

    rng = np.random.default_rng(0)
    mantissas = rng.random(40) * 9 + 1
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.concatenate([np.outer(mantissas, 10.0 ** np.arange(-323, 309)).ravel(),
                            rng.integers(0, 2**63, 20_000, dtype=np.uint64).view(np.float64),
                            [0.0, -0.0, 5e-324, 1.7976931348623157e308, np.inf, -np.inf, np.nan, 1e16, 1e15,
                             9999999999999998.0, 1e-4, 1e-5, 0.1 + 0.2, 123456789.0]])
        v = np.concatenate([v, -v, np.round(v, 3)])
    assert float_cells(v) == _pandas_float_cells(v)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=50))
def test_float_cells_are_pandas_float_texts(xs):
    from tuneplan.runs.frame_csv import float_cells

    v = np.asarray(xs, dtype=np.float64)
    assert float_cells(v) == _pandas_float_cells(v)


def test_search_over_distinct_configurations_finds_the_same_micro_batch():
    from tuneplan.estimators.base import get_estimator

    est = get_estimator("tuneplan")
    df = read_runs([f"{REF}/litgpt.csv", f"{REF}/xtuner.csv"]).df
    configs = [c for c in configs_from_rows(df.to_dict("records"))[0] if c is not None]
    a = arrays_for(configs, est.constants)
    want = np.asarray(est.predict_arrays(a, with_max_batch=True)["max_micro_batch"])
    for rows in (None, 10, 5000, 10**6):
        np.testing.assert_array_equal(est.max_micro_batch(a, represents=rows), want)


# -- reading by columns (runs/columnar.py) gives what reading row by row gives --------------------

def _read_both(paths, monkeypatch, **kw):
    from tuneplan.runs import fast_csv
    from tuneplan.runs import io as runs_io

    monkeypatch.setattr(fast_csv, "PLAIN_MIN_BYTES", 0)
    plain = runs_io._Reader.read_plain
    by_columns = []
    with monkeypatch.context() as m:
        m.setattr(runs_io._Reader, "read_plain", lambda self, *a: by_columns.append(plain(self, *a)) or by_columns[-1])
        fast = read_runs(paths, **kw)
    assert any(by_columns)
    with monkeypatch.context() as m:
        m.setattr(runs_io._Reader, "read_plain", lambda self, *a: False)
        slow = read_runs(paths, **kw)
    fast.by_columns = by_columns
    return fast, slow


def _assert_same(fast, slow):
    pd.testing.assert_frame_equal(fast.df, slow.df, check_exact=True)
    if slow.unresolved is None:
        assert fast.unresolved is None
    else:
        pd.testing.assert_frame_equal(fast.unresolved, slow.unresolved, check_exact=True)
    assert [str(p) for p in fast.problems] == [str(p) for p in slow.problems]


def _write(path, header, rows, newline="\n"):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator=newline).writerows([header, *rows])
    return path


@pytest.mark.parametrize("kw", [{"keep_unresolved": True}, {}, {"resolve": False}])
def test_columns_read_the_reference_runs_as_rows_do(monkeypatch, kw):
    from tuneplan.runs.io import reference_run_files

    files = reference_run_files(REF)
    fast, slow = _read_both(files, monkeypatch, **kw)
    _assert_same(fast, slow)
    assert len(fast.df) > 1000


def test_columns_read_odd_rows_as_rows_do(tmp_path, monkeypatch):
    """Duplicated ids and rows (within and across files), refused numbers, empty ids and sources,
    unknown names, quotes and commas in cells, CRLF line ends, a file read row by row between."""
    import csv

    with open(f"{REF}/litgpt.csv", newline="", encoding="utf-8") as f:
        src = list(csv.reader(f))
    head, body = src[0], src[1:40]
    i_id, i_mb, i_model, i_src = head.index("id"), head.index("micro_batch_size"), head.index("model"), \
        head.index("source")
    rows = [list(r) for r in body]
    rows[3][i_id] = rows[2][i_id]  # a duplicate id
    rows.append(list(rows[5]))  # an exact duplicate but its id
    rows[-1][i_id] = "copy-of-5"
    rows[7][i_mb] = "1.5"  # refused: not a whole number
    rows[8][i_mb] = "abc"
    rows[9][i_id] = ""  # an id made from the source and line
    rows[10][i_src] = ""  # the source from the file name
    rows[11][i_model] = "no-such-model-xyz"  # set aside: the name does not resolve
    rows[12][head.index("notes")] = 'say "hi", twice'
    a = _write(tmp_path / "a.csv", head, rows)
    b = _write(tmp_path / "b.csv", head, [list(r) for r in body[20:30]] + [[*body[0][:i_id], "b-0",
                                                                             *body[0][i_id + 1:]]], "\r\n")
    c = _write(tmp_path / "c.csv", head + ["extra_col"], [[*r, "7"] for r in body[30:35]])  # read row by row
    for kw in ({"keep_unresolved": True}, {}):
        fast, slow = _read_both([a, c, b], monkeypatch, **kw)
        _assert_same(fast, slow)
        assert fast.by_columns == [True, False, True]
        assert any("duplicate id" in p.message for p in fast.problems)
        assert any("exact duplicate" in p.message for p in fast.problems)


def test_derive_reads_only_its_columns():
    from tuneplan.runs.columnar import DERIVE_COLUMNS
    from tuneplan.runs.normalise import RowState, derive

    seen: set[str] = set()
    df = read_runs([f"{REF}/litgpt.csv", f"{REF}/llm-foundry.csv", f"{REF}/xtuner.csv", f"{REF}/peft.csv"]).df
    for row in df.to_dict("records")[::5]:
        for blank in ((), ("global_batch_size",), ("micro_batch_size", "tokens_per_s")):
            v = _Reads({k: (None if k in blank or (isinstance(x, float) and x != x) else x) for k, x in row.items()})
            v.seen = seen
            derive(RowState(v=v, source="x", flags={"full_length_samples": True, "step_time_is_micro_batch": True}))
    assert seen <= set(DERIVE_COLUMNS), seen - set(DERIVE_COLUMNS)


@pytest.mark.parametrize("calibrated", [False, True])
def test_predicting_each_distinct_configuration_once_gives_every_row_its_figures(varied, monkeypatch, calibrated,
                                                                                 calibrated_estimator):
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn import predict_table

    est = calibrated_estimator if calibrated else get_estimator("tuneplan")  # with residual trees, or none
    for rows in (varied, varied.iloc[:40]):  # many distinct configurations, and a few
        twice = pd.concat([rows, rows.assign(id=rows["id"] + "-again")], ignore_index=True)
        once = predict_table.predict_frame(twice, est)
        with monkeypatch.context() as m:
            m.setattr(predict_table, "_distinct_pays", lambda *a: False)
            pd.testing.assert_frame_equal(once, predict_table.predict_frame(twice, est), check_exact=True)


# -- fast paths against the plain, slower code they replace ----------------------------------------

def _plain_by_bytes_methods(data: bytes):
    """`fast_csv._plain` as it was written with bytes.count / `in` scans and a regular expression."""
    import re

    from tuneplan.runs.fast_csv import COMMA, CR, NEWLINE

    if not data or data.count(b"\r") != data.count(b"\r\n"):
        return None
    if data.startswith((b"\n", b"\r\n")) or b"\n\n" in data or b"\n\r\n" in data:
        return None
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if b'"' in data:
        arr = np.frombuffer(data, dtype=np.uint8)
        q = np.fromiter((m.start() for m in re.finditer(b'"', data)), dtype=np.int64)
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


_CSV_BYTES = [b"a", b"1", b",", b'"', b'""', b"\n", b"\r", b"\r\n", b" ", b"\xc3\xa9"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_CSV_BYTES), max_size=40), st.integers(0, 3))
def test_plain_scan_by_positions_equals_the_bytes_scans(parts, block_shift):
    from tuneplan.runs import fast_csv

    data = b"".join(parts)
    old = fast_csv.SCAN_BYTES
    try:
        fast_csv.SCAN_BYTES = 1 << block_shift  # blocks of 1 to 8 bytes: every boundary case
        assert fast_csv._plain(data) == _plain_by_bytes_methods(data)
    finally:
        fast_csv.SCAN_BYTES = old


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200).map(lambda b: b.replace(b"x", b"\n").replace(b"y", b'"')), st.integers(0, 3))
def test_two_bytes_located_in_one_pass_as_each_alone(data, block_shift):
    from tuneplan.runs import fast_csv

    arr = np.frombuffer(data, dtype=np.uint8)
    old = fast_csv.SCAN_BYTES
    try:
        fast_csv.SCAN_BYTES = 1 << block_shift
        got = fast_csv._positions2(arr, fast_csv.NEWLINE, fast_csv.QUOTE)
        want = fast_csv._positions(arr, fast_csv.NEWLINE), fast_csv._positions(arr, fast_csv.QUOTE)
    finally:
        fast_csv.SCAN_BYTES = old
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w)


def test_plain_scan_on_whole_files():
    from tuneplan.runs import fast_csv

    with open(f"{REF}/litgpt.csv", "rb") as f:
        data = f.read()
    for d in (data, data.replace(b"\n", b"\r\n"), data + b"\n", b"\n" + data, data.replace(b"\n", b"\n\n", 1),
              data.replace(b",", b'","', 1), data.replace(b"\n", b"\r", 1), data.rstrip(b"\n")):
        assert fast_csv._plain(d) == _plain_by_bytes_methods(d)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=60))
def test_first_rows_is_uniques_first_index(values):
    from tuneplan.runs.columnar import first_rows

    dense = pd.factorize(np.asarray(values, dtype=np.int64))[0]  # numbered by first appearance
    for codes in (dense, np.asarray(values, dtype=np.int64), dense - 1):  # and codes numbered otherwise
        np.testing.assert_array_equal(first_rows(codes), np.unique(codes, return_index=True)[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 2**40)), min_size=1, max_size=40))
def test_distinct_rows_is_uniques_along_rows(rows):
    from tuneplan.learn.predict_table import distinct_rows

    table = np.asarray(rows, dtype=np.int64)
    for t in (table, table[:, :2], table * np.asarray([1, 1, 2**21])):  # the last: too wide for one integer
        first, inverse = distinct_rows(t)
        want = np.unique(t, axis=0, return_index=True, return_inverse=True)
        np.testing.assert_array_equal(first, want[1])
        np.testing.assert_array_equal(inverse, np.asarray(want[2]).ravel())


def _columns_as_texts(data: bytes, n_fields: int):
    """`read_columns`' codes and values from pyarrow's texts encoded afterwards (the earlier reading)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    names = [f"c{i}" for i in range(n_fields)]
    table = pacsv.read_csv(
        pa.py_buffer(data), read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False,
                                                           block_size=64),
        parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False, escape_char=False),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in names}, null_values=[],
                                             strings_can_be_null=False, quoted_strings_can_be_null=False))
    out = []
    for name in names:
        enc = pc.dictionary_encode(table[name]).combine_chunks()
        uniq: dict[str, int] = {}
        remap = np.asarray([uniq.setdefault(v.strip(), len(uniq)) for v in enc.dictionary.to_pylist()], dtype=np.int64)
        out.append((remap[enc.indices.to_numpy(zero_copy_only=False)], list(uniq)))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", " a", "b ", "", "x,y", 'say "hi"', "é", "1.5"]), min_size=3,
                         max_size=3), min_size=1, max_size=30))
def test_columns_read_as_dictionaries_equal_texts_encoded(tmp_path_factory, rows):
    """pyarrow's dictionary columns (merged from blocks of 64 bytes here) give the codes and values
    the texts encoded afterwards give, in the same order."""
    import csv
    import io

    from tuneplan.runs import fast_csv

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([["p", "q", "r"], *rows, ["z", "z", "z"]])
    path = tmp_path_factory.mktemp("cols") / "f.csv"
    path.write_text(buf.getvalue(), encoding="utf-8")
    import pyarrow.csv as pacsv

    real = pacsv.ReadOptions

    def small_blocks(**kw):
        return real(**{**kw, "block_size": 64})

    pacsv.ReadOptions = small_blocks
    try:
        cols = fast_csv.read_columns(path, 3, 1000, min_bytes=0)
    finally:
        pacsv.ReadOptions = real
    if any(not "".join(r) for r in rows):  # a record of empty cells: left to the record reader
        assert cols is None
        return
    assert cols is not None
    want = _columns_as_texts(path.read_bytes(), 3)
    for j, (codes, values) in enumerate(want):
        assert cols.values[j] == values
        np.testing.assert_array_equal(cols.codes[j], codes)


def test_in_order_encodes_a_dictionary_out_of_order_anew():
    import pyarrow as pa
    import pyarrow.compute as pc

    from tuneplan.runs.fast_csv import _in_order

    enc = pa.DictionaryArray.from_arrays(pa.array([2, 0, 2, 1], type=pa.int32()), pa.array(["a", "b", "c", "d"]))
    got = _in_order(enc, pc)
    assert got.dictionary.to_pylist() == ["c", "a", "b"]
    assert got.indices.to_pylist() == [0, 1, 0, 2]


def test_frame_csv_in_small_chunks_writes_what_pandas_writes(tmp_path, monkeypatch):
    from tuneplan.runs import frame_csv

    df = pd.DataFrame({"f": [0.1 * k for k in range(50)], "s": [f"r{k % 7}," for k in range(50)],
                       "b": [k % 3 == 0 for k in range(50)]})
    monkeypatch.setattr(frame_csv, "CHUNK_ROWS", 7)
    frame_csv.write_frame_csv(df, str(tmp_path / "a.csv"))
    assert (tmp_path / "a.csv").read_text(encoding="utf-8") == df.to_csv(index=False)


def test_columns_admit_ids_and_duplicates_as_rows_do(tmp_path, monkeypatch):
    """Ids repeated within a file and across files, empty ids, a duplicate of a row skipped for its
    number, exact duplicates: the rows checked one by one are those a check can stop or change."""
    import csv

    with open(f"{REF}/litgpt.csv", newline="", encoding="utf-8") as f:
        src = list(csv.reader(f))
    head, body = src[0], src[1:30]
    i_id, i_mb = head.index("id"), head.index("micro_batch_size")
    rows = [list(r) for r in body]
    rows[4][i_mb] = "1.5"  # refused; a later row reuses its id
    rows.append([*rows[4][:i_mb], "2", *rows[4][i_mb + 1:]])
    rows[6][i_id] = rows[7][i_id] = ""  # ids made from the source and line
    rows.append(list(rows[9]))  # an exact duplicate, id and all
    rows.append([*rows[10][:i_id], "x-10", *rows[10][i_id + 1:]])  # an exact duplicate but its id
    a = _write(tmp_path / "a.csv", head, rows)
    b = _write(tmp_path / "b.csv", head, [list(r) for r in body[20:25]] + [list(body[1])])  # ids read in a.csv
    fast, slow = _read_both([a, b], monkeypatch, keep_unresolved=True)
    _assert_same(fast, slow)
    assert fast.by_columns == [True, True]
    assert sum("duplicate id" in p.message for p in fast.problems) >= 6


def test_object_ids_are_ids():
    from tuneplan.runs.columnar import object_ids

    a = np.asarray(["x", None, 1.5, "x", True, "y" * 3] * 5, dtype=object)
    frame = pd.DataFrame({"a": a, "b": a[::-1].copy()})
    for v in (a, a[::2], a[:0], frame["a"].to_numpy(), frame["b"].to_numpy(), frame.to_numpy()[:, 1]):
        np.testing.assert_array_equal(object_ids(v), np.asarray([id(x) for x in v], dtype=np.int64))


@pytest.mark.parametrize("case", ["some", "all", "existing", "repeated index", "other index"])
def test_new_column_set_at_once_is_the_loc_column(case):
    from tuneplan.learn.predict_table import _set_new_column

    df = pd.DataFrame({"a": ["x", "y", "z", "w"], "b": [1.0, 2.0, 3.0, 4.0]})
    ok = [0, 1, 2, 3] if case == "all" else [0, 2, 3]
    if case == "existing":
        df["c"] = ["old", "older", "", "kept"]
    if case == "repeated index":
        df.index = [0, 1, 1, 2]
    if case == "other index":
        df.index = [10, 7, 3, 5]
    values = ["seq_len; gpus", "", 'a "quoted", text', "x"][:len(ok)]
    ref = df.copy()
    with contextlib.suppress(ValueError, KeyError):  # the repeated index: whatever loc does, the helper does
        ref.loc[ref.index[ok], "c"] = values
    out = df.copy()
    with contextlib.suppress(ValueError, KeyError):
        _set_new_column(out, out.index[ok], "c", values)
    pd.testing.assert_frame_equal(out, ref, check_exact=True)
    assert list(out.dtypes) == list(ref.dtypes)
    assert out.to_csv(index=False) == ref.to_csv(index=False)


@pytest.mark.parametrize("share", [1, 2, 8, 1000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frame_csv_with_constant_and_plain_text_columns_writes_what_pandas_writes(share, seed, monkeypatch):
    """Columns of one text between varied ones (joined on without a factorize), text columns with and
    without anything to quote (written as they are), as pandas writes them."""
    from tuneplan.runs import frame_csv

    rng = np.random.default_rng(seed)
    n = 300
    cols: dict[str, object] = {}
    for j in range(14):
        kind = rng.integers(0, 5)
        if kind == 0:
            cols[f"c{j}"] = ["same"] * n if j % 2 else [np.nan] * n
        elif kind == 1:
            cols[f"c{j}"] = [f"id-{k}" for k in rng.permutation(n)]
        elif kind == 2:
            cols[f"c{j}"] = rng.choice(["a,b", 'q"', "x", "", "y"], size=n).tolist()
        elif kind == 3:
            cols[f"c{j}"] = rng.choice([0.5, 1.0, np.nan, 3.25], size=n)
        else:
            cols[f"c{j}"] = rng.integers(0, 4, size=n)
    df = pd.DataFrame(cols)
    monkeypatch.setattr(frame_csv, "SEGMENT_SHARE", share)
    assert frame_csv._text(df) == df.to_csv(index=False)
