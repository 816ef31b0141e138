"""The price file: the shipped CSV's records, user overrides, bad files."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from tests.conftest import SHARED

from tuneplan.errors import DataFileError, UnknownNameError
from tuneplan.specs.gpu import resolve_gpu
from tuneplan.specs.prices import (
    DATE_RE,
    load_prices,
    price_for,
    providers,
)

REPO = Path(__file__).resolve().parents[1]
KINDS = {"on-demand", "spot", "reserved-1y", "capacity-block", "community"}


def test_every_shipped_price_is_dated_sourced_and_names_a_catalog_gpu():
    import csv

    text = resources.files("tuneplan.data").joinpath("gpu_prices.csv").read_text(encoding="utf-8")
    rows = [r for r in csv.DictReader(text.splitlines(keepends=True)) if r["gpu"]]
    assert len(rows) >= 100
    prices = load_prices()
    assert len(prices) == len(rows)
    for p, r in zip(prices, rows, strict=True):
        assert p.usd_per_gpu_hour == float(r["price_usd_per_gpu_hour"]) > 0
        assert (p.provider, p.gpu, p.offer, p.source) == (r["provider"], r["gpu"], r["instance_or_offer"],
                                                          r["source"])
        assert DATE_RE.match(p.date_seen), p
        assert p.source.strip() and p.provider.strip()
        assert p.pricing_kind in KINDS
    # every GPU priced is a catalog GPU, by its exact catalog name
    for name in {p.gpu for p in prices}:
        assert resolve_gpu(name).name == name
    shared = SHARED / "reference" / "gpu_prices.csv"
    if shared.exists():  # the package's copy is the shared reference's
        assert shared.read_text(encoding="utf-8") == text


def test_a_price_record_spanning_lines_and_a_blank_row(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text('provider,gpu,price_usd_per_gpu_hour,source\nA,H100-SXM5-80GB,2,"two\nlines"\n,,,\n'
                 "B,L4-24GB,0.5,x\n", encoding="utf-8")
    got = load_prices(str(p))  # a record's line is the one it starts on
    assert [(q.provider, q.source, q.line) for q in got] == [("A", "two\nlines", 2), ("B", "x", 5)]


def test_default_is_cheapest_on_demand():
    rows = [p for p in load_prices() if p.gpu == "H100-SXM5-80GB"]
    best = price_for("H100-SXM5-80GB")
    assert best.pricing_kind == "on-demand"
    assert best.usd_per_gpu_hour == min(p.usd_per_gpu_hour for p in rows if p.pricing_kind == "on-demand")
    aws = price_for("H100-SXM5-80GB", provider="aws")
    assert aws.provider == "AWS" and aws.usd_per_gpu_hour >= best.usd_per_gpu_hour
    assert price_for("no-such-gpu") is None


def test_unknown_provider_lists_close_matches():
    with pytest.raises(UnknownNameError) as e:
        price_for("H100-SXM5-80GB", provider="Lamda")
    assert "Lambda" in e.value.close
    assert "Lambda" in providers()


def test_user_price_files(tmp_path):
    y = tmp_path / "mine.yaml"
    y.write_text("prices:\n  - provider: Mine\n    gpu: H100-SXM5-80GB\n    usd_per_gpu_hour: 1.25\n"
                 "    date_seen: '2026-12-01'\n    source: my invoice\n", encoding="utf-8")
    assert price_for("H100-SXM5-80GB", path=str(y)).usd_per_gpu_hour == 1.25
    c = tmp_path / "mine.csv"
    c.write_text("provider,gpu,price_usd_per_gpu_hour,pricing_kind,date_seen,source\n"
                 "Mine,A100-SXM4-80GB,0.99,on-demand,2026-12-01,quote\n", encoding="utf-8")
    assert price_for("A100-SXM4-80GB", path=str(c)).usd_per_gpu_hour == 0.99
    # the estimate API takes the same file
    from tuneplan.specs.resolve import resolve_gpu_arg, resolve_rate

    rate, src = resolve_rate(resolve_gpu_arg("A100-SXM4-80GB"), None, None, str(c))
    assert rate == 0.99 and "Mine" in src
    rate, src = resolve_rate(resolve_gpu_arg("A100-SXM4-80GB"), 3.0, None, None)
    assert (rate, src) == (3.0, "--rate")


@pytest.mark.parametrize("text, line, words", [
    ("prices:\n  - provider: A\n    gpu: H100-SXM5-80GB\n    usd_per_gpu_hour: -1\n", 2, "positive"),
    ("prices:\n  - provider: A\n    gpu: H100-SXM5-80GB\n    usd_per_gpu_hour: 1\n"
     "  - provider: B\n    gpu: L4-24GB\n    usd_per_gpu_hour: cheap\n", 5, "not a number"),
    ("prices:\n  - provider: A\n    usd_per_gpu_hour: 2\n", 2, "without a 'gpu'"),
    ("prices:\n  - [1, 2]\n", 2, "mapping"),
    ("prices: 3\n", 1, "list"),
    ("other: []\n", 1, "'prices:'"),
    ("prices:\n  - provider: A\n   gpu: x: y\n", 3, "cannot parse"),
])
def test_bad_yaml_has_file_and_line(tmp_path, text, line, words):
    p = tmp_path / "bad.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(DataFileError) as e:
        load_prices(str(p))
    assert e.value.line == line, str(e.value)
    assert words in str(e.value) and str(p) in str(e.value)


def test_bad_csv_has_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("provider,gpu,price_usd_per_gpu_hour\nA,H100-SXM5-80GB,2\nB,L4-24GB,zero\n", encoding="utf-8")
    with pytest.raises(DataFileError) as e:
        load_prices(str(p))
    assert e.value.line == 3 and "not a number" in str(e.value)
    with pytest.raises(DataFileError, match="no such price file"):
        load_prices(str(tmp_path / "missing.yaml"))


def test_plan_cli_with_a_price_file(tmp_path, capsys):
    import json

    from tuneplan.cli import main

    y = tmp_path / "p.yaml"
    y.write_text("prices:\n  - {provider: Mine, gpu: L40S-48GB, usd_per_gpu_hour: 0.10, date_seen: '2026-12-01',"
                 " source: test}\n", encoding="utf-8")
    assert main(["plan", "--model", "Qwen/Qwen2.5-0.5B", "--examples", "1000", "--tokens-per-example", "256",
                 "--gpus", "L40S-48GB", "--prices", str(y), "--max-gpus", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["prices"]["L40S-48GB"]["usd_per_gpu_hour"] == 0.10
    assert d["recommended"]["rate_usd_per_gpu_hour"] == 0.10


def test_prices_older_than_a_year_are_warned() -> None:
    from datetime import date

    from tuneplan.specs.prices import PRICE_STALE_DAYS, Price, price_age_days, stale_price_warning

    p = Price(provider="X", gpu="A100-SXM4-80GB", usd_per_gpu_hour=1.0, pricing_kind="on-demand", offer="o",
              region="r", date_seen="2024-11", source="s")
    assert price_age_days(p, date(2025, 11, 1)) == PRICE_STALE_DAYS == 365
    assert stale_price_warning(p, date(2025, 11, 1)) is None
    w = stale_price_warning(p, date(2026, 12, 1))
    assert w and "2024-11" in w and "2.1 years old" in w and "--rate" in w
    assert stale_price_warning(Price(**{**p.__dict__, "date_seen": ""}), date(2030, 1, 1)) is None


def test_estimate_warns_of_an_old_default_price() -> None:
    import tuneplan

    kw = dict(method="lora", examples=1000, tokens_per_example=256, interval=None)
    r = tuneplan.estimate("meta-llama/Llama-3.1-8B", "A100-SXM4-80GB", **kw)  # the default: Lambda, 2023-02-01
    assert "2023-02-01" in r.rate_source
    assert any("years old" in w and "2023-02-01" in w for w in r.warnings)
    r = tuneplan.estimate("meta-llama/Llama-3.1-8B", "A100-SXM4-80GB", rate=2.0, **kw)
    assert not any("years old" in w for w in r.warnings)
