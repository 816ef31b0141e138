"""The dataset reader, the token counts (a tiny BPE trained here, counted by hand), the collator's
arithmetic (padding, group-by-length, packing, truncation, by hand) and bad input (one line naming the
file, row and field)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sample_data import CHAT_ROWS, write_all, write_jsonl
from tuneplan.corpus.collate import collate, grouped_batches, length_bins, pack_bfd, truncate
from tuneplan.corpus.summary import render_histogram, render_summary, summarise
from tuneplan.corpus.tokens import APPROX_ERROR, CHARS_PER_TOKEN
from tuneplan.errors import InputError


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("data"))


# ---- counts by hand ------------------------------------------------------------------------------------------

def test_prompt_completion_counts_by_hand(sample):
    # rows (prompt words, completion words): (2, 3), (4, 1), (1, 6); one token per word, BOS added
    s = summarise(sample["prompt_completion"], tokenizer=str(sample["tokenizer"]))
    assert s.shape == "prompt-completion" and s.exact
    assert s.prompt.tolist() == [3, 5, 2]
    assert s.length.tolist() == [6, 6, 8]
    assert s.stats()["completion_tokens"] == 3 + 1 + 6


def test_chat_template_counts_by_hand(sample):
    # template: <|user|> words <|end|> <|assistant|> words <|end|>; markers one token each, no BOS
    s = summarise(sample["chat"], tokenizer=str(sample["tokenizer_dir"]))
    assert s.shape == "chat" and "chat template" in s.tokens_source
    assert s.prompt.tolist() == [u + 3 for u, _ in CHAT_ROWS]  # user turn + generation prompt
    assert s.length.tolist() == [u + a + 4 for u, a in CHAT_ROWS]


@pytest.mark.parametrize("name", ["text_csv", "text_parquet", "saved"])
def test_text_files_every_type(sample, name):
    s = summarise(sample[name], tokenizer=str(sample["tokenizer"]))
    assert s.shape == "text"
    assert s.length.tolist() == [n + 1 for n in range(1, 11)]
    assert s.prompt.sum() == 0
    if name == "saved":
        assert s.split == "train" and s.kind == "arrow"


def test_alpaca_json_through_the_template(sample):
    # user turn: instruction (3) + "\n" + input (2) = 5 words -> prompt 1 + 5 + 1 + 1; output 4 -> + 4 + 1
    s = summarise(sample["alpaca_json"], tokenizer=str(sample["tokenizer_dir"]))
    assert s.shape == "alpaca" and s.kind == "json"
    assert s.prompt.tolist() == [8, 5]
    assert s.length.tolist() == [13, 7]


def test_preference_pair_and_rl_prompts(sample):
    s = summarise(sample["preference"], tokenizer=str(sample["tokenizer"]))
    assert s.shape == "preference"
    # prompt 2 words + BOS; chosen: 2 + 3 + BOS, rejected: 2 + 6 + BOS; the pair pads to the longer
    assert (s.prompt.tolist(), s.length.tolist(), s.real.tolist()) == ([3], [9], [6 + 9])
    # the total holds both sequences, the split the longer one: said, not shown as if 3 + 6 made 15
    assert render_summary(s)[2] == "  total 15 (all sequences; the longest of each example: prompt 3, completion 6)"
    r = summarise(sample["rl"], tokenizer=str(sample["tokenizer"]))
    assert r.shape == "rl-prompt" and r.length.tolist() == [5, 8]


def test_character_approximation_is_stated(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"text": "a" * 10}, {"text": "b" * 400}])
    s = summarise(path)
    assert not s.exact
    assert s.length.tolist() == [math.ceil(10 / CHARS_PER_TOKEN), math.ceil(400 / CHARS_PER_TOKEN)]
    assert "approximated from characters" in s.tokens_source and f"{APPROX_ERROR:.0%}" in s.tokens_source
    assert "approximated" in s.assumption()


def test_histogram_bins_cover_every_example(sample):
    s = summarise(sample["text_csv"], tokenizer=str(sample["tokenizer"]))
    h = s.histogram(4)  # lengths 2..11: width 3 -> 2-4, 5-7, 8-10, 11-13
    assert h == [(2, 4, 3), (5, 7, 3), (8, 10, 3), (11, 13, 1)]
    assert len(render_histogram(s, bins=4)) == 4


# ---- bad input -----------------------------------------------------------------------------------------------

def _error(path, **kw) -> str:
    with pytest.raises(InputError) as e:
        summarise(path, **kw)
    return str(e.value)


def test_missing_field_names_file_row_and_field(tmp_path):
    p = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "a", "completion": "b"}, {"prompt": "c"}])
    msg = _error(p)
    assert "pc.jsonl row 2" in msg and "'completion' is missing" in msg and "\n" not in msg


def test_non_text_value_and_bad_json_row(tmp_path):
    p = write_jsonl(tmp_path / "t.jsonl", [{"text": "a"}, {"text": 5}])
    assert "row 2: field 'text' is int, not text" in _error(p)
    q = tmp_path / "bad.jsonl"
    q.write_text('{"text": "a"}\n{"text": "b"}\n{"text": "c\n')  # a truncated last line
    assert "row 3: not valid JSON" in _error(q)
    s = summarise(q, skip_bad_rows=True)
    assert (s.examples, s.bad_rows, s.rows) == (2, 1, 3)
    assert "1 bad row(s) left out" in s.assumption()


def test_empty_file_unknown_type_and_shape(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    assert "no rows" in _error(tmp_path / "e.jsonl")
    (tmp_path / "d.txt").write_text("x")
    assert "unknown file type '.txt'" in _error(tmp_path / "d.txt")
    p = write_jsonl(tmp_path / "odd.jsonl", [{"question": "a", "answer": "b"}])
    msg = _error(p)
    assert msg.startswith("data-format:") and "answer, question" in msg and "allowed: text, chat" in msg
    assert "no such file" in _error(tmp_path / "missing.jsonl")


def test_fifo_named_as_a_data_file_or_tokenizer_is_refused_not_read(tmp_path):
    # opening a FIFO for reading blocks until a writer comes: the read must refuse it before opening
    import os

    from tuneplan.corpus.tokens import token_counter

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    assert _error(fifo).endswith("not a regular file (a FIFO)")
    with pytest.raises(InputError, match=r"^tokenizer: .*not a regular file \(a FIFO\)"):
        token_counter(str(fifo))


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.csv"])
def test_utf16_file_is_refused_in_one_line(tmp_path, name):
    # Windows tools write UTF-16 with a byte-order mark: read line by line, its rows came out as bad JSON,
    # a CSV newline error, or (with --skip-bad-rows) a shorter dataset than the file holds
    p = tmp_path / name
    text = '{"text": "hello world"}\n{"text": "abc def"}\n' if name.endswith("jsonl") else "text\nhello world\nabc\n"
    p.write_bytes(text.encode("utf-16"))
    assert _error(p, skip_bad_rows=True).endswith("UTF-16 text (it starts with a UTF-16 byte-order mark): save it as UTF-8")


def test_csv_cell_longer_than_the_csv_modules_default_limit_is_read(tmp_path):
    # a 300,000-character document was "not valid CSV (field larger than field limit)", and with
    # --skip-bad-rows the longest examples, the ones that run out of memory, were left out
    p = tmp_path / "long.csv"
    p.write_text('text\n"' + "word " * 60_000 + '"\nshort\n')
    s = summarise(p)
    assert (s.examples, s.bad_rows) == (2, 0) and s.length.max() == math.ceil(300_000 / CHARS_PER_TOKEN)


def test_tokenizer_folder_without_its_vocabulary_is_refused(tmp_path):
    # transformers loads a lone tokenizer_config.json as a tokenizer of special tokens only: every example
    # counted 0 tokens, said to be "exact"
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer_config.json").write_text('{"tokenizer_class": "LlamaTokenizer"}')
    p = write_jsonl(tmp_path / "t.jsonl", [{"text": "hello world"}])
    from tokenizers import Tokenizer, models

    Tokenizer(models.BPE(vocab={}, merges=[])).save(str(tmp_path / "empty.json"))  # a tokenizer.json the same
    for tok in (tmp_path / "tok", tmp_path / "empty.json"):
        msg = _error(p, tokenizer=str(tok))
        assert msg.startswith("tokenizer: ") and "encodes text to no tokens" in msg


def test_csv_with_a_duplicate_column_is_refused(tmp_path):
    # 'text,text': each row kept the last cell only, a silently different dataset
    p = tmp_path / "dup.csv"
    p.write_text('text,text\n"a long first text",x\n')
    assert _error(p) == f"data: {p}: duplicate column(s) in the header: text"


def test_csv_row_of_the_wrong_width(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text('text\n"a b"\n"c",extra\n"d"\n')
    assert "row 2: 2 fields, the header has 1" in _error(p)
    s = summarise(p, skip_bad_rows=True)
    assert s.examples == 2 and s.bad_rows == 1


def test_csv_record_the_csv_module_cannot_parse_is_a_bad_row(tmp_path):
    p = tmp_path / "cr.csv"
    p.write_bytes(b'text\n"a b"\nc\rd\n"e"\n')  # a bare carriage return inside an unquoted field
    assert "row 2: not valid CSV (new-line character seen in unquoted field)" in _error(p)
    s = summarise(p, skip_bad_rows=True)
    assert s.examples == 2 and s.bad_rows == 1
    p.write_bytes(b"\r\x00")  # the header itself: no rows
    assert "no rows" in _error(p)


def test_chat_without_assistant_turn(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    assert "row 1: field 'messages' has no assistant turn" in _error(p)


def test_sharegpt_conversations(tmp_path, sample):
    rows = [{"conversations": [{"from": "human", "value": "the model"}, {"from": "gpt", "value": "yes no"}]}]
    s = summarise(write_jsonl(tmp_path / "sg.jsonl", rows), tokenizer=str(sample["tokenizer_dir"]))
    assert (s.prompt.tolist(), s.length.tolist()) == ([1 + 2 + 1 + 1], [1 + 2 + 1 + 1 + 2 + 1])


def test_bad_tokenizer(tmp_path, sample):
    (tmp_path / "tokenizer.json").write_text("{}")
    assert _error(sample["text_csv"], tokenizer=str(tmp_path / "tokenizer.json")).startswith("tokenizer:")
    assert "no such file" in _error(sample["text_csv"], tokenizer=str(tmp_path / "none.json"))


def test_jsonl_read_in_batches_keeps_row_numbers(tmp_path, monkeypatch):
    import tuneplan.corpus.read as read

    monkeypatch.setattr(read, "BATCH_ROWS", 16)  # many batches, then a bad row far in
    rows = [{"text": "w" * (i % 7 + 1)} for i in range(300)]
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"text": 3}\n')
    assert "row 301: field 'text' is int" in _error(p)
    s = summarise(p, skip_bad_rows=True)
    assert s.examples == 300 and s.length.tolist() == [math.ceil((i % 7 + 1) / CHARS_PER_TOKEN) for i in range(300)]


# ---- the collator by hand ------------------------------------------------------------------------------------

def test_truncation():
    cut, n, t = truncate([5, 10, 3, 9], 6)
    assert cut.tolist() == [5, 6, 3, 6] and n == 2 and t == 4 + 3


def test_pad_to_max():
    c = collate([2, 3, 5, 7], micro_batch=2, seq_len=8, padding="max")
    assert (c.real_tokens, c.padded_tokens, c.micro_batches) == (17, 32, 2)
    assert c.padding_waste == pytest.approx(1 - 17 / 32)
    assert c.batch_len_max == 8


def test_pad_to_longest_extremes():
    one = collate([2, 3, 5, 7], micro_batch=4, padding="longest")  # one batch: all padded to 7
    assert one.padded_tokens == 4 * 7 and one.batch_len_max == 7
    each = collate([2, 3, 5, 7], micro_batch=1, padding="longest")  # no padding at all
    assert each.padded_tokens == each.real_tokens == 17 and each.padding_waste == 0


def test_group_by_length_by_hand():
    c = collate([1, 2, 3, 4, 5, 6, 7, 8], micro_batch=2, padding="group-by-length")
    # one megabatch, sorted longest first: (8,7) (6,5) (4,3) (2,1) -> 2 x (8 + 6 + 4 + 2)
    assert c.batch_lengths.tolist() == [8, 6, 4, 2]
    assert (c.padded_tokens, c.real_tokens) == (40, 36)
    maxes, _ = grouped_batches(np.arange(1, 1001), micro_batch=4)
    assert maxes[0] == 1000  # the longest batch first


def test_packing_by_hand():
    # best-fit decreasing into 8: 6 | 5 | 4, then 3 -> the 5's (3 free), 2 -> the 6's (2 free): 3 sequences
    assert pack_bfd([6, 5, 4, 3, 2], 8) == 3
    assert pack_bfd([4, 4, 4, 4], 8) == 2
    assert pack_bfd([3, 3, 3, 3, 3], 8) == 3
    assert pack_bfd([3, 3, 2, 2], 8) == 2
    c = collate([4, 4], micro_batch=1, seq_len=8, packing=True)
    assert (c.samples, c.padded_tokens, c.padding_waste) == (1, 8, 0)
    assert c.attention_fraction == pytest.approx((16 + 16) / 64)  # cross-document masking: each 4 x 4
    w = collate([6, 5, 4, 3, 2, 9], micro_batch=1, seq_len=8, packing=True, packing_strategy="wrapped")
    assert (w.samples, w.real_tokens, w.examples_cut) == (math.ceil(29 / 8), 29, 0)  # nothing cut: wrapped
    b = collate([6, 5, 4, 3, 2, 9], micro_batch=1, seq_len=8, packing=True)
    assert (b.examples_cut, b.tokens_cut, b.real_tokens) == (1, 1, 28)


def _bfd_reference(lengths, seq_len):
    """Best-fit decreasing, one example at a time over a list of open sequences."""
    free: list[int] = []
    for n in sorted(lengths, reverse=True):
        fits = [i for i, f in enumerate(free) if f >= n]
        if fits:
            i = min(fits, key=lambda i: free[i])
            free[i] -= n
        else:
            free.append(seq_len - n)
    return len(free)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 16), min_size=1, max_size=60), st.integers(16, 40))
def test_bfd_matches_the_one_at_a_time_reference(lengths, seq_len):
    assert pack_bfd(lengths, seq_len) == _bfd_reference(lengths, seq_len)


def test_length_bins_weights():
    bins = length_bins(np.arange(1, 101))
    assert sum(w for _, w in bins) == pytest.approx(1.0)
    assert bins[-1] == (100, pytest.approx(0.01))  # the top 1%
    assert bins[0] == (13, pytest.approx(0.25))  # mean of 1..25, rounded up


ROW_VALUES = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
                       st.lists(st.text(max_size=5), max_size=3),
                       st.lists(st.dictionaries(st.sampled_from(["role", "content", "from", "value"]),
                                                st.one_of(st.text(max_size=8), st.integers(), st.none()),
                                                max_size=3), max_size=3))
ROWS = st.lists(st.dictionaries(st.sampled_from(["text", "messages", "prompt", "completion", "chosen", "rejected",
                                                 "instruction", "output", "input", "conversations", "x"]),
                                ROW_VALUES, max_size=4), max_size=6)


@settings(max_examples=60, deadline=None)
@given(ROWS, st.binary(max_size=60), st.sampled_from([".jsonl", ".json", ".csv", ".parquet"]), st.booleans())
def test_fuzzed_files_are_read_or_refused_in_one_line(tmp_path_factory, rows, junk, suffix, skip):
    """Random rows (wrong types, missing fields, nulls) and random bytes in every file type: `tuneplan data`
    answers with the counts (exit 0) or one line (exit 2), never a traceback."""
    import contextlib
    import io

    from tuneplan.cli import main

    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / f"d{suffix}"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if suffix == ".json" and rows:
        text = json.dumps(rows)
    path.write_bytes(text.encode() + junk if suffix != ".parquet" else junk)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["data", str(path), "--json"] + (["--skip-bad-rows"] if skip else []))
    assert rc in (0, 2), err.getvalue()
    if rc == 2:
        assert len(err.getvalue().strip().splitlines()) == 1 and "internal error" not in err.getvalue()
    else:
        assert json.loads(out.getvalue())["examples"] >= 1


def test_cells_keep_their_own_types(tmp_path):
    """A CSV cell is text even when it reads as a number; a JSONL value is the type it is written as
    (not the type a column of mixed numbers would take)."""
    p = tmp_path / "n.csv"
    p.write_text("\ufeffprompt,completion\nhello,12\nhi,3.5\n")
    s = summarise(p)
    assert s.shape == "prompt-completion" and s.length.tolist() == [math.ceil(7 / 4), math.ceil(5 / 4)]
    assert "row 1: field 'text' is int, not text" in _error(write_jsonl(tmp_path / "m.jsonl", [{"text": 1}, {"text": 1.5}]))


def test_long_csv_with_a_bad_row_far_in(tmp_path):
    """The csv module over more rows than one batch (row numbers kept across batches)."""
    p = tmp_path / "long.csv"
    p.write_text("text\n" + "".join(f'"row {i}"\n' for i in range(9000)) + '"a",extra\n' + '"b"\n')
    assert "row 9001: 2 fields, the header has 1" in _error(p)
    s = summarise(p, skip_bad_rows=True)
    assert (s.examples, s.bad_rows, s.rows) == (9001, 1, 9002)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=200), st.integers(1, 9),
       st.sampled_from(["max", "longest", "group-by-length", "bfd", "wrapped"]), st.one_of(st.none(), st.integers(1, 400)))
def test_collator_invariants(lengths, micro_batch, mode, seq_len):
    """Computed tokens hold every real token; the longest batch is the longest (truncated) example for the
    samplers that pad to it; every example is in exactly one micro-batch."""
    packing = mode in ("bfd", "wrapped")
    c = collate(lengths, micro_batch=micro_batch, seq_len=seq_len, padding="max" if packing else mode,
                packing=packing, packing_strategy=mode if packing else "bfd")
    cut, _, _ = truncate(lengths, None if mode == "wrapped" else seq_len)
    assert c.real_tokens == int(cut.sum())
    assert c.padded_tokens >= c.real_tokens and 0 <= c.padding_waste < 1
    if mode in ("longest", "group-by-length"):
        assert c.batch_len_max == cut.max()
        assert c.micro_batches == math.ceil(len(lengths) / micro_batch)
    if mode == "max":
        assert c.padded_tokens == len(lengths) * (seq_len or max(lengths))


def test_the_cli_lists_the_readers_shapes():
    from tuneplan.commands.common import DATA_SHAPES
    from tuneplan.corpus.read import SHAPES

    assert DATA_SHAPES == SHAPES
