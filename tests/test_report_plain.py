"""tuneplan.report.plain (the estimate's tables without rich, when no colour is printed) against rich
itself: random tables and texts at random widths lay out character for character as rich's do."""

from __future__ import annotations

import io

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tuneplan.report.plain import ONE_CELL, Cell, NotPlain, PlainTable, plain_width
from tuneplan.report.tables import Styled, estimate_items, plain_text, rich_renderable

rich = pytest.importorskip("rich")
from rich.cells import cell_len  # noqa: E402
from rich.console import Console  # noqa: E402


def _rich(items, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False,
            force_jupyter=False).print(rich_renderable(items))
    return buf.getvalue()


WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-/.,:()$%·×—", min_size=1, max_size=30)
TEXT = st.lists(st.one_of(WORD, st.sampled_from([" ", "  ", "\n", " \n"])), max_size=14).map("".join)


@st.composite
def tables(draw):
    n = draw(st.integers(1, 4))
    headers = draw(st.lists(WORD, min_size=n, max_size=n))
    justify = draw(st.lists(st.sampled_from(["left", "right"]), min_size=n, max_size=n))
    rows = draw(st.lists(st.lists(st.tuples(TEXT, st.booleans()), min_size=n, max_size=n), max_size=6))
    title = draw(st.one_of(st.none(), TEXT.filter(bool)))
    return PlainTable(title, headers, justify,
                      [[Cell(Styled(t, "dim"), markup=False) if styled else Cell(t) for t, styled in r] for r in rows],
                      bold_last=draw(st.booleans()))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(tables(), TEXT.map(lambda t: Styled(t, "yellow"))), min_size=1, max_size=3),
       st.integers(8, 140))
def test_random_tables_and_texts_print_as_rich_prints_them(items, width):
    try:
        ours = plain_text(items, width)
    except NotPlain:
        assume(False)
    assert ours == _rich(items, width)


def test_the_estimate_prints_as_rich_prints_it():
    import tuneplan

    for kw in ({"method": "lora", "examples": 1000, "seq_len": 512},
               {"method": "full", "examples": 100, "seq_len": 4096, "gpu": "RTX-4090-24GB"},
               {"method": "qlora", "seq_len": 2048, "stage": "dpo"}):
        r = tuneplan.estimate("meta-llama/Llama-3.1-8B", kw.pop("gpu", "A100-SXM4-80GB"), **kw)
        for width in (40, 80, 133):
            assert plain_text(estimate_items(r), width) == _rich(estimate_items(r), width)


def test_what_plain_leaves_to_rich():
    t = PlainTable(None, ["a"], ["left"], [[Cell("[bold]x[/bold]")]])
    with pytest.raises(NotPlain):
        plain_text([t], 80)
    with pytest.raises(NotPlain):
        plain_text([Styled("wide 字", "dim")], 80)
    assert all(cell_len(ch) == 1 for ch in ONE_CELL)


def test_plain_only_where_rich_prints_no_colour(monkeypatch):
    class Stream(io.StringIO):
        encoding = "utf-8"

        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.setenv("COLUMNS", "97")
    assert plain_width(Stream(False)) == 97
    assert plain_width(Stream(True)) is None
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert plain_width(Stream(False)) is None
