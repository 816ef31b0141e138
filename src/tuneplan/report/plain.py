"""rich's table and text layout in plain Python, for output that is not a terminal.

Importing rich and rendering the estimate's tables took ~0.1 s of every `tuneplan estimate`. When
rich would print no colour (stdout is not a terminal, nothing forces one), its output is plain text
that this module reproduces character for character: the same column widths (rich 15's
measure / collapse / ratio-reduce), the same word wrapping (`divide_line`, fold / ellipsis), the same
HEAVY_HEAD box. `plain_width()` says when it applies (None: let rich print); text it cannot vouch
for (markup or emoji codes, characters of other widths, columns under 3 cells) raises `NotPlain`,
and the caller prints with rich instead. tests/test_report_plain.py checks it against rich itself.
"""

from __future__ import annotations

import os
import re
import sys

from tuneplan.specs.struct import dataclass, field

ONE_CELL = frozenset("·×—–±§…°µ≤≥≈→←é")
"""Non-ASCII characters rich counts one cell wide that the estimate prints (others: rich prints)."""
ELLIPSIS = "…"
RE_WORD = re.compile(r"\s*\S+\s*")
RE_TRAILING_SPACE = re.compile(r"\s+$")
RE_EMOJI = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")
"""rich's emoji code pattern (`:name:`): a str cell matching it is left to rich."""
BOX = {"top": "┏━┳┓", "head": "┃ ┃┃", "head_row": "┡━╇┩", "mid": "│ ││", "foot": "│ ││", "bottom": "└─┴┘"}
"""rich's HEAVY_HEAD box: corners, lines and dividers (left, fill, divider, right)."""
PADDING = 1
"""Spaces left and right of each cell (rich's default padding (0, 1))."""
MIN_COLUMN = 3
"""Narrowest column width (padding included) vouched for; narrower ones are left to rich."""


class NotPlain(Exception):
    """This output needs rich (markup, other character widths, a degenerate width)."""


@dataclass
class Cell:
    text: str
    markup: bool = True  # a str cell: rich reads markup and emoji codes in it (a Text cell: not)


@dataclass
class PlainTable:
    title: str | None
    headers: list[str]
    justify: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    styles: list[str | None] | None = None  # each column's rich style (a terminal shows it)
    bold_last: bool = False  # the last row (a total) in bold on a terminal


def plain_width(stream=None) -> int | None:
    """The width rich's Console() would use on `stream` when it prints no colour, or None when rich
    would see a terminal (colours, Jupyter, Windows, a non-UTF-8 stream)."""
    out = stream or sys.stdout
    env = os.environ
    if os.name == "nt" or "IPython" in sys.modules or env.get("TTY_COMPATIBLE") == "1" or env.get("FORCE_COLOR"):
        return None
    try:
        if out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    if not (getattr(out, "encoding", None) or "utf-8").lower().startswith("utf"):
        return None
    columns = env.get("COLUMNS")
    if columns is not None and columns.isdigit():
        return int(columns)
    width = None
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd)[0]
        except (AttributeError, ValueError, OSError):
            continue
        break
    return width or 80


def _check(text: str, markup: bool) -> None:
    if markup and ("[" in text or RE_EMOJI.search(text)):
        raise NotPlain("markup or emoji codes")
    for ch in text:
        if not (" " <= ch <= "~" or ch == "\n" or ch in ONE_CELL):
            raise NotPlain(f"character {ch!r}")


# ---- rich.text.Text.wrap -----------------------------------------------------------------------

def divide_line(text: str, width: int, fold: bool) -> list[int]:
    """rich._wrap.divide_line for one-cell characters: the offsets to break a line at."""
    breaks: list[int] = []
    offset = 0
    for m in RE_WORD.finditer(text):
        start, word = m.start(), m.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            if fold:
                pieces = [word[i:i + width] for i in range(0, len(word), width)]
                for i, piece in enumerate(pieces):
                    if start:
                        breaks.append(start)
                    if i == len(pieces) - 1:
                        offset = len(piece)
                    else:
                        start += len(piece)
            else:
                if start:
                    breaks.append(start)
                offset = len(word)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    return breaks


def _truncate(line: str, width: int, overflow: str, pad: bool = False) -> str:
    length = len(line)
    if length > width:
        line = (line[:max(width - 1, 0)] + ELLIPSIS) if overflow == "ellipsis" else line[:width]
    if pad and length < width:
        line = line + " " * (width - length)
    return line


def wrap(text: str, width: int, justify: str, overflow: str) -> list[str]:
    """rich's Text.wrap: each line word-wrapped at `width`, justified (default, left, right)."""
    out: list[str] = []
    for line in text.split("\n"):
        offsets = divide_line(line, width, fold=overflow == "fold")
        bounds = [0, *offsets, len(line)]
        pieces = [line[a:b] for a, b in zip(bounds, bounds[1:], strict=False)] if offsets else [line]
        for i, p in enumerate(pieces):
            if len(p) > width:
                m = RE_TRAILING_SPACE.search(p)
                if m:
                    pieces[i] = p[:len(p) - min(len(m.group(0)), len(p) - width)]
        if justify == "left":
            pieces = [_truncate(p, width, overflow, pad=True) for p in pieces]
        elif justify == "right":
            pieces = [_truncate(p.rstrip(), width, overflow) for p in pieces]
            pieces = [" " * (width - len(p)) + p for p in pieces]
        elif justify != "default":
            raise NotPlain(f"justify {justify}")
        out.extend(_truncate(p, width, overflow) for p in pieces)
    return out


# ---- rich.table.Table layout -------------------------------------------------------------------

def _measure(text: str, max_width: int) -> tuple[int, int]:
    """Measurement.get of a padded cell (rich: Padding -> Text.__rich_measure__, normalised)."""
    def norm(lo: int, hi: int) -> tuple[int, int]:
        lo = min(max(0, lo), hi)
        return max(0, lo), max(0, max(lo, hi))

    def get(lo: int, hi: int, limit: int) -> tuple[int, int]:
        if limit < 1:
            return 0, 0
        lo, hi = norm(lo, hi)
        lo, hi = min(lo, limit), min(hi, limit)
        return (0, 0) if hi < 1 else norm(lo, hi)

    if max_width - 2 * PADDING < 1:
        return get(max_width, max_width, max_width)
    lines = text.splitlines()
    hi = max((len(line) for line in lines), default=0)
    words = text.split()
    lo = max((len(w) for w in words), default=hi)
    lo, hi = get(lo, hi, max_width)
    return get(min(lo + 2 * PADDING, max_width), min(hi + 2 * PADDING, max_width), max_width)


def _column_range(texts: list[str], max_width: int) -> tuple[int, int]:
    if max_width < 1:
        return 0, 0
    ms = [_measure(t, max_width) for t in texts]
    lo, hi = max((m[0] for m in ms), default=1), max((m[1] for m in ms), default=max_width)
    return min(lo, max_width), min(hi, max_width)


def ratio_reduce(total: int, ratios: list[int], maximums: list[int], values: list[int]) -> list[int]:
    """rich._ratio.ratio_reduce."""
    ratios = [r if m else 0 for r, m in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    out = []
    for ratio, maximum, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            d = min(maximum, round(ratio * remaining / total_ratio))
            out.append(value - d)
            remaining -= d
            total_ratio -= ratio
        else:
            out.append(value)
    return out


def _collapse(widths: list[int], max_width: int) -> list[int]:
    """rich's Table._collapse_widths with every column wrappable."""
    total = sum(widths)
    excess = total - max_width
    while total and excess > 0:
        top = max(widths)
        second = max((w if w != top else 0) for w in widths)
        ratios = [1 if w == top else 0 for w in widths]
        if not any(ratios) or not top - second:
            break
        widths = ratio_reduce(excess, ratios, [min(excess, top - second)] * len(widths), widths)
        total = sum(widths)
        excess = total - max_width
    return widths


def column_widths(table: PlainTable, width: int) -> list[int]:
    """Each column's width, padding included (rich's Table._calculate_column_widths, expand off)."""
    cols = [[h, *(row[i].text for row in table.rows)] for i, h in enumerate(table.headers)]
    max_width = width - (len(cols) + 1)
    widths = [_column_range(c, max_width)[1] or 1 for c in cols]
    if sum(widths) > max_width:
        widths = _collapse(widths, max_width)
        if sum(widths) > max_width:
            widths = ratio_reduce(sum(widths) - max_width, [1] * len(widths), widths, widths)
        widths = [_column_range(c, w)[1] or 0 for c, w in zip(cols, widths, strict=True)]
    if min(widths, default=MIN_COLUMN) < MIN_COLUMN:
        raise NotPlain("a column under 3 cells")
    return widths


def _cell_lines(text: str, width: int, justify: str) -> list[str]:
    inner = width - 2 * PADDING
    lines = wrap(text, inner, justify, "ellipsis")
    return [" " * PADDING + _truncate(line, inner, "crop", pad=True) + " " * PADDING for line in lines]


def render_table(table: PlainTable, width: int) -> list[str]:
    """The table's lines as rich prints them (title, HEAVY_HEAD box, header, rows)."""
    for t in [table.title or "", *table.headers]:
        _check(t, True)
    for row in table.rows:
        for c in row:
            _check(c.text, c.markup)
    widths = column_widths(table, width)
    table_width = sum(widths) + len(widths) + 1
    out = wrap(table.title, table_width, "left", "fold") if table.title else []

    def rule(kind: str) -> str:
        left, fill, div, right = BOX[kind]
        return left + div.join(fill * w for w in widths) + right

    out.append(rule("top"))
    rows = [(True, [Cell(h) for h in table.headers]), *((False, r) for r in table.rows)]
    for n, (header, row) in enumerate(rows):
        cells = [_cell_lines(c.text, w, j) for c, w, j in zip(row, widths, table.justify, strict=True)]
        height = max(len(c) for c in cells)
        blank = [" " * w for w in widths]
        cells = [([b] * (height - len(c)) + c) if header else (c + [b] * (height - len(c)))
                 for c, b in zip(cells, blank, strict=True)]
        left, _, div, right = BOX["head" if header else ("foot" if n == len(rows) - 1 else "mid")]
        out.extend(left + div.join(c[i] for c in cells) + right for i in range(height))
        if header:
            out.append(rule("head_row"))
    out.append(rule("bottom"))
    return out


def render_text(text: str, width: int) -> list[str]:
    """A Text printed at the console's width (justify default, overflow fold; not markup-read)."""
    _check(text, False)
    return [line[:width] for line in wrap(text, width, "default", "fold")]
