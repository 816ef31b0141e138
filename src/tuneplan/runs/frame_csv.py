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


def _column_cells(s) -> list[str]:
    """A column's cells, formatted and quoted as pandas' to_csv writes them."""
    import pandas as pd
    from pandas.core.indexes.base import get_values_for_csv

    values = s.array if isinstance(s.dtype, pd.api.extensions.ExtensionDtype) else s.to_numpy()
    if isinstance(values, np.ndarray) and values.dtype == object:  # the same object is written alike
        codes = pd.factorize(np.fromiter(map(id, values), dtype=np.int64, count=len(values)))[0]
        objects = values[np.unique(codes, return_index=True)[1]]
        if pd.api.types.infer_dtype(objects, skipna=True) in ("string", "empty"):  # equal texts alike
            codes = pd.factorize(objects, use_na_sentinel=False)[0][codes]
    elif _distinct_safe(values):
        codes = pd.factorize(s, use_na_sentinel=False)[0]
    else:  # each cell on its own
        codes = np.arange(len(values))
    first = np.unique(codes, return_index=True)[1]
    formatted = get_values_for_csv(values[first], date_format=None, na_rep="", quoting=csv.QUOTE_MINIMAL,
                                   float_format=None, decimal=".")
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiub":  # numbers and booleans: never quoted
        cells = np.asarray([x if type(x) is str else str(x) for x in formatted], dtype=object)
    else:
        cells = np.asarray(_quoted(list(formatted)), dtype=object)
    return cells[codes].tolist()


def _text(df) -> str:
    header = ",".join(_quoted([str(c) for c in df.columns]))
    cols = [_column_cells(df.iloc[:, j]) for j in range(df.shape[1])]
    return header + "\n" + "".join(",".join(r) + "\n" for r in zip(*cols, strict=True))


def frame_csv_text(df) -> str:
    """`df.to_csv(index=False)` as a string, per distinct cell (pandas' writer when the first rows differ)."""
    if not df.columns.is_unique or df.shape[1] < 2 or not all(isinstance(c, str) for c in df.columns):
        return df.to_csv(index=False)
    try:
        head = df.iloc[:CHECK_ROWS]
        same = _text(head) == head.to_csv(index=False)
    except (ImportError, TypeError, ValueError, AttributeError):
        same = False
    if not same:
        return df.to_csv(index=False)
    return _text(df)


def write_frame_csv(df, path: str) -> None:
    """`df.to_csv(path, index=False)`, the same bytes (UTF-8, '\\n' line ends)."""
    text = frame_csv_text(df)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
