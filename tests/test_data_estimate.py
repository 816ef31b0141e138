"""`--data` on estimate, plan and memory, `tuneplan data`, and the web upload: the data's counts replace
--examples/--tokens-per-example, the time is weighed over the batch lengths, and the worst-batch verdict
(the longest batch that fits, the share over it, the step of the first OOM) checks against the memory
model itself."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sample_data import write_all, write_jsonl
from tuneplan.api import estimate
from tuneplan.cli import main
from tuneplan.corpus.summary import DataSummary
from tuneplan.integrations.dataset import estimate_with_data

MODEL, GPU = "meta-llama/Llama-3.1-8B", "H100-SXM5-80GB"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("data"))


def summary_of(lengths) -> DataSummary:
    L = np.asarray(lengths, dtype=np.int64)
    return DataSummary(path="made.jsonl", kind="jsonl", shape="text", tokens_source="given", exact=True,
                       prompt=np.zeros_like(L), length=L, real=L.copy(), rows=len(L), bad_rows=0)


@pytest.fixture(scope="module")
def long_tail():
    """2,000 examples of 300-700 tokens and 4 of 12,000: a LoRA run of an 8B model without checkpointing
    at micro-batch 4 fits the typical batch on an 80 GiB GPU, not the batches holding a long one."""
    rng = np.random.default_rng(3)
    L = rng.integers(300, 700, 2000)
    L[[10, 500, 1200, 1900]] = 12_000
    return summary_of(L)


def test_worst_batch_verdict_against_the_memory_model(long_tail):
    r = estimate_with_data(MODEL, GPU, summary=long_tail, interval=None, method="lora", micro_batch=4,
                           padding="longest")
    w = r.extra["data"]["worst_batch"]
    assert w["median"]["fits"] and not w["longest"]["fits"] and not w["fits_longest"]
    fit = w["longest_fitting_batch_len"]
    one = dict(method="lora", micro_batch=4, padding="max", interval=None)
    assert estimate(MODEL, GPU, seq_len=fit, **one).fits
    assert not estimate(MODEL, GPU, seq_len=fit + 1, **one).fits
    batches = r.extra["data"]["collator"]["micro_batches"]
    assert batches == 500
    over = w["share_over"] * batches
    assert over == pytest.approx(4, abs=0.01)  # the four batches holding a 12,000-token example
    assert w["oom_step"] == math.ceil(math.ceil(1 / w["share_over"]) / 1)  # grad-accum 1, one GPU
    assert "expect an OOM around step" in w["verdict"] and w["verdict"] in r.warnings
    changes = [f["change"] for f in w["fixes"]]
    assert changes[0] == f"truncate to --seq-len {fit:,}"
    assert any(c.startswith("--packing --seq-len") for c in changes)
    # checkpointing and a smaller micro-batch are offered exactly when they make the 12,000-token batch fit
    assert ("--grad-ckpt" in changes) == estimate(MODEL, GPU, seq_len=12_000, grad_ckpt=True, **one).fits
    def fitting(**over):
        return [m for m in (3, 2, 1) if estimate(MODEL, GPU, **(one | {"seq_len": 12_000, "micro_batch": m} | over)).fits]

    smaller, both = fitting(), fitting(grad_ckpt=True)
    expected = ([f"--micro-batch {smaller[0]} --grad-accum {math.ceil(4 / smaller[0])}"] if smaller else
                [] if "--grad-ckpt" in changes else
                [f"--micro-batch {both[0]} --grad-accum {math.ceil(4 / both[0])} --grad-ckpt"] if both else [])
    assert [c for c in changes if c.startswith("--micro-batch")] == expected


def test_group_by_length_ooms_at_step_one(long_tail):
    r = estimate_with_data(MODEL, GPU, summary=long_tail, interval=None, method="lora", micro_batch=4,
                           group_by_length=True)
    w = r.extra["data"]["worst_batch"]
    assert w["oom_step"] == 1
    from tuneplan.corpus.collate import collate

    random_order = collate(long_tail.length, micro_batch=4, padding="longest")
    assert r.extra["data"]["collator"]["padding_waste"] < random_order.padding_waste  # similar lengths together


def test_fits_longest_and_counts_replace_sizes(long_tail):
    r = estimate_with_data(MODEL, GPU, summary=long_tail, interval=None, method="qlora", micro_batch=1,
                           grad_ckpt=True, padding="longest")
    d = r.to_dict()
    assert d["data"]["worst_batch"]["fits_longest"] and d["data"]["worst_batch"]["fixes"] == []
    assert d["workload"]["samples_per_epoch"] == 2000
    assert d["workload"]["real_tokens_per_epoch"] == pytest.approx(long_tail.length.sum())


def test_time_weighed_over_the_batch_lengths(long_tail):
    kw = dict(summary=long_tail, interval=None, method="qlora", micro_batch=2, grad_ckpt=True, padding="longest")
    r = estimate_with_data(MODEL, GPU, **kw)
    bins = r.extra["data"]["time_bins"]
    assert sum(b["share"] for b in bins) == pytest.approx(1.0)
    assert min(b["step_time_s"] for b in bins) < r.step_time_s < max(b["step_time_s"] for b in bins)
    mean_len = estimate(MODEL, GPU, method="qlora", micro_batch=2, grad_ckpt=True, interval=None,
                        seq_len=round(long_tail.length.mean()))
    assert r.step_time_s > mean_len.step_time_s  # a batch runs at its longest example, not the mean
    four = estimate_with_data(MODEL, GPU, gpus=4, **kw)  # each step waits for the slowest of 4 ranks
    assert four.extra["data"]["run_seq_len"] > r.extra["data"]["run_seq_len"]


def test_synced_step_time_by_hand():
    from tuneplan.integrations.dataset import synced_step_time

    lens, times = [10, 20], [1.0, 2.0]  # a whole step at 10 tokens: 1 s, at 20: 2 s
    assert synced_step_time([10, 20, 10, 20], lens, times, 1, 1) == pytest.approx(1.5)
    assert synced_step_time([10, 20, 10, 20], lens, times, 1, 2) == pytest.approx(2.0)  # the slower rank
    assert synced_step_time([10, 20, 10, 20], lens, times, 2, 1) == pytest.approx(1.5)  # (1 + 2) / 2 each
    assert synced_step_time([15], lens, times, 1, 1) == pytest.approx(1.5)  # interpolated
    assert synced_step_time([10, 20, 20], lens, times, 1, 2) == pytest.approx(2.0)  # the last step: one rank


def test_packed_data_samples_are_the_packed_sequences():
    s = summary_of([6, 5, 4, 3, 2])
    r = estimate_with_data(MODEL, GPU, summary=s, interval=None, method="lora", micro_batch=1, seq_len=8,
                           packing=True)
    assert r.workload.samples_per_epoch == pytest.approx(3)  # best-fit decreasing: 3 sequences of 8
    assert r.workload.seq_len == 8


def test_data_replaces_sizes_not_both(long_tail):
    from tuneplan.errors import InputError

    with pytest.raises(InputError, match="replaces --examples"):
        estimate_with_data(MODEL, GPU, summary=long_tail, examples=100, method="lora")


# ---- the commands ----------------------------------------------------------------------------------------------

def test_estimate_data_cli(sample, capsys):
    assert main(["estimate", "--model", MODEL, "--gpu", GPU, "--method", "lora", "--data", str(sample["chat"]),
                 "--tokenizer", str(sample["tokenizer_dir"]), "--micro-batch", "2", "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert "Your data: 8 examples" in out and "Verdict: fits at the longest batch" in out
    assert main(["estimate", "--model", MODEL, "--gpu", GPU, "--data", str(sample["chat"]), "--json",
                 "--interval", "0", "--padding", "longest"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["data"]["summary"]["examples"] == 8 and d["workload"]["samples_per_epoch"] == 8
    assert any("approximated from characters" in a for a in d["assumptions"])


def test_bad_data_is_one_line_exit_2(tmp_path, capsys):
    p = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "a", "completion": "b"}, {"prompt": "a"}])
    assert main(["estimate", "--model", MODEL, "--gpu", GPU, "--data", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "row 2: field 'completion' is missing" in err
    assert main(["estimate", "--model", MODEL, "--gpu", GPU, "--tokenizer", "x.json", "--seq-len", "512"]) == 2
    assert "tokenizer: applies with --data" in capsys.readouterr().err


def test_data_command(sample, tmp_path, capsys):
    png = tmp_path / "h.png"
    assert main(["data", str(sample["text_csv"]), "--tokenizer", str(sample["tokenizer"]), "--seq-len", "8",
                 "--micro-batch", "2", "--padding", "max", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "10 examples" in out and "length histogram" in out and "truncated: 3 example(s)" in out
    assert png.stat().st_size > 1000
    assert main(["data", str(sample["text_csv"]), "--tokenizer", str(sample["tokenizer"]), "--packing",
                 "--seq-len", "11", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # lengths 2..11 (65 tokens), best-fit decreasing into 11: 11 | 10 | 9+2 | 8+3 | 7+4 | 6+5 -> 6 sequences
    assert d["tokens"] == 65 and d["collator"]["samples"] == 6 and d["collator"]["padded_tokens"] == 66


def test_data_plot_path_refused_in_one_line(sample, tmp_path, capsys):
    # a suffix matplotlib cannot draw, a folder or a missing folder: one line naming --plot, exit 2, and
    # no file written (a folder named as the plot got a "folder.png" beside it)
    folder = tmp_path / "plots"
    folder.mkdir()
    for plot, says in ((str(sample["chat"]), "plot: cannot tell the image type"), ("h.txt", "allowed: png, svg"),
                       (str(folder), "plot: "), (str(tmp_path / "no" / "h.png"), "plot: cannot write")):
        assert main(["data", str(sample["text_csv"]), "--plot", plot]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "\n" not in err and "internal error" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots"]


def test_plan_and_memory_take_data(sample, capsys):
    assert main(["plan", "--model", MODEL, "--gpus", GPU, "--methods", "lora", "--data", str(sample["chat"]),
                 "--json", "--interval", "0"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["data"]["examples"] == 8 and d["workload"]["samples_per_epoch"] == 8
    assert d["workload"]["seq_len"] == d["data"]["max_length"]
    assert main(["memory", MODEL, "--methods", "lora", "--data", str(sample["chat"]), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["seq_len"] == m["data"]["max_length"]


def test_web_upload(sample):
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    c = TestClient(create_app(warm_up=False))
    with open(sample["prompt_completion"], "rb") as f, open(sample["tokenizer"], "rb") as t:
        r = c.post("/api/data", files={"file": ("pc.jsonl", f), "tokenizer": ("tokenizer.json", t)},
                   data={"micro_batch": "1"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["fields"] == {"examples": 3, "tokens_per_example": round(20 / 3, 1), "seq_len": 8}
    assert d["path"] == "pc.jsonl" and "tuneplan-upload" not in d["tokens_source"]
    bad = c.post("/api/data", files={"file": ("x.jsonl", b'{"text": "a"}\n{"text": 1}\n')})
    assert bad.status_code == 422 and "x.jsonl row 2" in bad.json()["detail"][0]["msg"]
    assert "tuneplan-upload" not in bad.json()["detail"][0]["msg"]
    assert c.post("/api/data", files={"file": ("x.txt", b"a")}).status_code == 422


def test_packed_batches_are_one_shape_and_the_fix_shrinks_the_pack(long_tail):
    r = estimate_with_data(MODEL, GPU, summary=long_tail, interval=None, method="lora", micro_batch=4,
                           seq_len=4096, packing=True)
    d = r.extra["data"]
    w = d["worst_batch"]
    assert d["collator"]["mode"] == "packed (bfd)" and d["collator"]["examples_cut"] == 4
    assert w["verdict"].startswith("does not fit: every micro-batch is 4 x 4,096 tokens")
    fit = w["longest_fitting_batch_len"]
    assert w["fixes"][0]["change"] == f"pack to --seq-len {fit:,}"
    assert "packed sequences" in w["fixes"][0]["effect"]
    steps = math.ceil(d["collator"]["samples"] / 4)
    assert d["per_optimizer_step"]["padded_tokens"] == pytest.approx(d["collator"]["padded_tokens"] / steps)


def test_framework_data_path_decides_packing(sample, capsys):
    # axolotl's recipes pack (data/frameworks.yaml packing: true); hf-trainer pads to the batch's longest
    assert main(["data", str(sample["chat"]), "--framework", "axolotl", "--seq-len", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["collator"]["mode"] == "packed (bfd)"
    assert main(["data", str(sample["chat"]), "--framework", "hf-trainer", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["collator"]["mode"] == "padded to the longest in each batch"


def test_progress_bar_only_on_a_terminal_for_long_reads():
    from tuneplan.corpus.summary import PROGRESS_MIN_BYTES, _progress

    assert _progress(PROGRESS_MIN_BYTES - 1).disable
    assert _progress(10 * PROGRESS_MIN_BYTES).disable  # pytest's stderr is no terminal


def test_from_config_with_data_takes_the_data_sizes(sample, capsys):
    """A training config's packing and sequence length apply; the examples are the data's, not the ones
    `--from` would otherwise assume."""
    from conftest import SHARED

    cfg = SHARED / "fixtures" / "training-configs" / "axolotl" / "llama3-8b-lora.yml"
    if not cfg.exists():
        pytest.skip("shared training-config fixtures not present")
    assert main(["estimate", "--from", str(cfg), "--gpu", GPU, "--data", str(sample["long_tail"]), "--json",
                 "--interval", "0"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["data"]["summary"]["examples"] == 600
    assert d["data"]["collator"]["mode"] == "packed (bfd)"  # axolotl's sample_packing: true
    assert d["data"]["collator"]["seq_len"] == d["job"]["seq_len"]  # the config's sequence_len


def test_web_upload_without_multipart_says_what_to_install(monkeypatch):
    from fastapi.testclient import TestClient

    import tuneplan.web.data_upload as du
    from tuneplan.web.app import create_app

    monkeypatch.setattr(du, "multipart_installed", lambda: False)
    r = TestClient(create_app(warm_up=False)).post("/api/data")
    assert r.status_code == 422 and "python-multipart" in r.json()["detail"][0]["msg"]
