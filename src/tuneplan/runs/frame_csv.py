"""Writing a large DataFrame as CSV, byte for byte as `DataFrame.to_csv(path, index=False)` writes it,
each distinct cell formatted and quoted once (issue 19 point 7: `tuneplan predict` over 200,000
rows spent more time in pandas' writer, cell by cell, than in the physics).

pandas formats each column with `get_values_for_csv` (floats with numpy's `astype(str)`, missing
values as '') and hands the cells to the standard library's csv writer (QUOTE_MINIMAL, '\\n' line
ends). Here the same formatting runs on each column's distinct values and the same csv writer quotes
each distinct cell; the rows are then joined. The first rows are checked against pandas' own output
and any difference (another pandas, a dtype this does not know) falls back to pandas' writer."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import numpy as np

CHECK_ROWS = 64
"""Rows written by both this writer and pandas' and compared before the whole file is written."""


_SPECIAL = re.compile(r'[,"\r\n]')
"""What makes the csv writer quote a text cell (QUOTE_MINIMAL: the delimiter, the quote, a line end)."""


def _quoted(cells: list[Any]) -> list[str]:
    """Each cell as the csv writer writes it in a row of several fields."""
    if cells and set(map(type, cells)) == {str} and not _SPECIAL.search("".join(cells)):
        return list(cells)  # texts with nothing to quote (200,000 ids: ~5 ms instead of ~50)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    out = []
    for c in cells:
        if type(c) is str and not _SPECIAL.search(c):
            out.append(c)
            continue
        buf.seek(0)
        buf.truncate()
        w.writerow([c, ""])
        out.append(buf.getvalue()[:-2])  # the cell, without the empty field's ',' and the line end
    return out


def _distinct_safe(values) -> bool:
    """Whether cells equal as values are written alike (not -0.0 next to 0.0)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return not bool(np.any(np.signbit(values) & (values == 0)))
    return True


def float_cells(values: np.ndarray) -> list[str]:
    """float64 cells as pandas' writer formats them (`get_values_for_csv`: numpy's `astype(str)`, the
    shortest text that reads back as the same number, missing values as ''): Python's `repr` of a
    float is that same text (tests/test_predict_speed.py compares them over every exponent), ~1.5x faster."""
    return ["" if x != x else repr(x) for x in values.tolist()]


def _column_cells(s) -> list[str]:
    """A column's cells, formatted and quoted as pandas' to_csv writes them."""
    import pandas as pd
    from pandas.core.indexes.base import get_values_for_csv

    from tuneplan.runs.columnar import first_rows, object_ids

    values = s.array if isinstance(s.dtype, pd.api.extensions.ExtensionDtype) else s.to_numpy()
    if isinstance(values, np.ndarray) and values.dtype == object:  # the same object is written alike
        codes = pd.factorize(object_ids(values))[0]
        objects = values[first_rows(codes)]
        if pd.api.types.infer_dtype(objects, skipna=True) in ("string", "empty"):  # equal texts alike
            codes = pd.factorize(objects, use_na_sentinel=False)[0][codes]
    elif _distinct_safe(values):
        codes = pd.factorize(s, use_na_sentinel=False)[0]
    else:  # each cell on its own
        codes = np.arange(len(values))
    first = first_rows(codes)
    if isinstance(values, np.ndarray) and values.dtype == np.float64:  # numbers: never quoted
        return np.asarray(codes, dtype=np.int64), np.asarray(float_cells(values[first]), dtype=object)
    formatted = get_values_for_csv(values[first], date_format=None, na_rep="", quoting=csv.QUOTE_MINIMAL,
                                   float_format=None, decimal=".")
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":  # numbers: never quoted
        cells = np.asarray(formatted, dtype=object)
    elif isinstance(values, np.ndarray) and values.dtype.kind in "iub":  # the csv writer's str()
        cells = np.asarray([x if type(x) is str else str(x) for x in formatted], dtype=object)
    else:
        cells = np.asarray(_quoted(list(formatted)), dtype=object)
    return np.asarray(codes, dtype=np.int64), cells


SEGMENT_SHARE = 8
"""Neighbouring columns are joined once per distinct combination of their cells while there are at
most rows / SEGMENT_SHARE combinations (fewer, longer pieces for the rows' final join)."""


def _segments(cols: list[tuple[np.ndarray, np.ndarray]], n: int) -> list[list[str]]:
    """Each row's text, in pieces: runs of neighbouring columns joined per distinct combination."""
    import pandas as pd

    from tuneplan.runs.columnar import first_rows

    limit = max(n // SEGMENT_SHARE, 1)
    pieces: list[list[str]] = []
    run: list[int] = []
    key = np.zeros(n, dtype=np.int64)

    def close() -> None:
        if len(run) == 1:
            pieces.append(cols[run[0]][1][key].tolist())
            return
        first = first_rows(key)
        joined = np.asarray([",".join([cols[j][1][cols[j][0][i]] for j in run]) for i in first.tolist()],
                            dtype=object)
        pieces.append(joined[key].tolist())

    distinct = 0  # how many values `key` has (numbered 0, 1, ... in order of first appearance)
    for j, (codes, cells) in enumerate(cols):
        if run:
            if len(cells) == 1:  # one text: the combinations are the key's own (factorize would give it back)
                if distinct <= limit:
                    run.append(j)
                    continue
            else:
                combined, uniq = pd.factorize(key * len(cells) + codes)
                if len(uniq) <= limit:  # join on while the combinations stay few
                    key, distinct = combined.astype(np.int64), len(uniq)
                    run.append(j)
                    continue
            close()
        run, key, distinct = [j], codes, len(cells)
    close()
    return pieces


CHUNK_ROWS = 2_000
"""Rows joined and written at a time (the whole text is never held at once)."""


def _chunks(df):
    """`df.to_csv(index=False)` in pieces: the header line, then the rows, CHUNK_ROWS at a time."""
    yield ",".join(_quoted([str(c) for c in df.columns])) + "\n"
    if not len(df):
        return
    pieces = _segments([_column_cells(df.iloc[:, j]) for j in range(df.shape[1])], len(df))
    for at in range(0, len(df), CHUNK_ROWS):
        yield "".join(",".join(r) + "\n" for r in zip(*(p[at:at + CHUNK_ROWS] for p in pieces), strict=True))


def _text(df) -> str:
    return "".join(_chunks(df))


def _checked(df) -> bool:
    """Whether this writer writes the frame's first rows as pandas does (else pandas writes it all)."""
    if not df.columns.is_unique or df.shape[1] < 2 or not all(isinstance(c, str) for c in df.columns):
        return False
    try:
        head = df.iloc[:CHECK_ROWS]
        return _text(head) == head.to_csv(index=False)
    except (ImportError, TypeError, ValueError, AttributeError):
        return False


def frame_csv_text(df) -> str:
    """`df.to_csv(index=False)` as a string, per distinct cell (pandas' writer when the first rows differ)."""
    return _text(df) if _checked(df) else df.to_csv(index=False)


def write_frame_csv(df, path: str) -> None:
    """`df.to_csv(path, index=False)`, the same bytes (UTF-8, '\n' line ends)."""
    if not _checked(df):
        df.to_csv(path, index=False)
        return
    with open(path, "w", encoding="utf-8", newline="") as f:
        for text in _chunks(df):
            f.write(text)
