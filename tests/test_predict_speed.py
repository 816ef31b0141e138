"""predict over many rows: the per-distinct-setting paths give the row-by-row answers."""

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
    from tuneplan.runs import columnar
    from tuneplan.runs import io as runs_io

    monkeypatch.setattr(columnar, "PLAIN_MIN_BYTES", 0)
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


_CELLS = ["a", " a", "b ", "", "x,y", 'say "hi"', "é", "1.5", '"', 'x"y', '"q"z', "\n", "\r"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_CELLS), min_size=3, max_size=3), min_size=1, max_size=12),
       st.booleans(), st.sampled_from(["\n", "\r\n"]))
def test_columns_are_the_record_readers_cells_and_lines_or_none(tmp_path_factory, rows, quote_all, end):
    """A file read by columns gives each record's cells (stripped) as the record reader reads them, record
    i on line i + 2; a file where that would not hold (a line end in a cell, a stray quote pyarrow
    refuses, a record of empty cells) is left to the record reader (None)."""
    import csv
    import io

    from tuneplan.runs import columnar
    from tuneplan.runs.io import _csv_records

    buf = io.StringIO()
    csv.writer(buf, lineterminator=end, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL).writerows(
        [["p", "q", "r"], *rows])
    text = buf.getvalue().replace('"""', '"') if not quote_all else buf.getvalue()  # stray quotes too
    path = tmp_path_factory.mktemp("cols") / "f.csv"
    path.write_bytes(text.encode("utf-8"))
    cols = columnar.read_columns(path, 3, 1000, min_bytes=0)
    if cols is None:
        return
    _, records = _csv_records(path)
    want = [(line, [c.strip() for c in cells]) for line, cells in records]
    got = [(i + 2, [cols.values[j][cols.codes[j][i]] for j in range(3)]) for i in range(cols.n)]
    assert got == want


def test_in_order_encodes_a_dictionary_out_of_order_anew():
    import pyarrow as pa
    import pyarrow.compute as pc

    from tuneplan.runs.columnar import _in_order

    enc = pa.DictionaryArray.from_arrays(pa.array([2, 0, 2, 1], type=pa.int32()), pa.array(["a", "b", "c", "d"]))
    got = _in_order(enc, pc)
    assert got.dictionary.to_pylist() == ["c", "a", "b"]
    assert got.indices.to_pylist() == [0, 1, 0, 2]


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


def test_a_plain_file_is_read_by_columns_and_a_quoted_line_end_is_not(tmp_path):
    from tuneplan.runs.columnar import read_columns

    p = tmp_path / "f.csv"
    p.write_bytes(b'p,q\r\n a ,"x,y"\r\nb,\r\n')
    cols = read_columns(p, 2, 1000, min_bytes=0)
    assert cols is not None and cols.n == 2
    assert [[cols.values[j][cols.codes[j][i]] for j in range(2)] for i in range(2)] == [["a", "x,y"], ["b", ""]]
    for text in (b'p,q\na,"x\ny"\n', b"p,q\na,b\n\nc,d\n", b"p,q\na\rb,c\n", b"p,q\n,\n", b'p,q\n"a,b\n'):
        p.write_bytes(text)
        assert read_columns(p, 2, 1000, min_bytes=0) is None, text
