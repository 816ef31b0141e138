"""The price file: its schema, its generation from the reference CSV, user overrides, bad files."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from tuneplan.errors import DataFileError, UnknownNameError
from tuneplan.specs.gpu import resolve_gpu
from tuneplan.specs.prices import (
    DATE_RE,
    load_prices,
    parse_yaml_prices,
    price_for,
    providers,
    render_prices_yaml,
)

REPO = Path(__file__).resolve().parents[1]
KINDS = {"on-demand", "spot", "reserved-1y", "capacity-block", "community"}


def test_schema_of_the_shipped_file():
    import yaml

    text = resources.files("tuneplan.data").joinpath("prices.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert data["schema"] == 1 and data["currency"] == "USD"
    recs = data["prices"]
    assert len(recs) >= 100
    for r in recs:
        assert {"provider", "gpu", "usd_per_gpu_hour", "pricing_kind", "offer", "region", "date_seen", "source",
                "notes"} <= set(r)
        assert isinstance(r["usd_per_gpu_hour"], float) and r["usd_per_gpu_hour"] > 0
        assert DATE_RE.match(r["date_seen"]), r
        assert r["source"].strip() and r["provider"].strip()
        assert r["pricing_kind"] in KINDS
    prices = load_prices()
    assert len(prices) == len(recs)
    # every GPU priced is a catalog GPU, by its exact catalog name
    for name in {p.gpu for p in prices}:
        assert resolve_gpu(name).name == name


def test_yaml_is_generated_from_the_csv_byte_for_byte():
    data = resources.files("tuneplan.data")
    csv_text = data.joinpath("gpu_prices.csv").read_text(encoding="utf-8")
    assert render_prices_yaml(csv_text) == data.joinpath("prices.yaml").read_text(encoding="utf-8")
    shared = REPO.parent / "shared" / "reference" / "gpu_prices.csv"
    if shared.exists():  # the package's copy is the shared reference's
        assert shared.read_text(encoding="utf-8") == csv_text
    script = REPO / "scripts" / "build_prices.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_csv_and_yaml_agree():
    from tuneplan.specs.prices import parse_csv_prices

    data = resources.files("tuneplan.data")
    from_csv = parse_csv_prices(data.joinpath("gpu_prices.csv").read_text(encoding="utf-8"), "gpu_prices.csv")
    from_yaml = load_prices()
    strip = [(p.provider, p.gpu, p.usd_per_gpu_hour, p.pricing_kind, p.offer, p.date_seen, p.source)
             for p in from_csv]
    assert strip == [(p.provider, p.gpu, p.usd_per_gpu_hour, p.pricing_kind, p.offer, p.date_seen, p.source)
                     for p in from_yaml]


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


def test_line_numbers_point_at_records():
    text = resources.files("tuneplan.data").joinpath("prices.yaml").read_text(encoding="utf-8").splitlines()
    for p in parse_yaml_prices("\n".join(text), "prices.yaml")[:5]:
        assert re.match(r"\s*- provider: ", text[p.line - 1])


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


def test_shipped_file_read_without_yaml_as_yaml_reads_it():
    """The shipped file is read by a line parser of its generated shape (start-up: no YAML parser);
    it gives exactly what the YAML parser gives, and declines any text not in that shape."""
    from tuneplan.specs.prices import parse_generated_prices

    text = resources.files("tuneplan.data").joinpath("prices.yaml").read_text(encoding="utf-8")
    fast = parse_generated_prices(text, "prices.yaml")
    assert fast is not None and fast == parse_yaml_prices(text, "prices.yaml")
    assert [p.line for p in fast] == [p.line for p in parse_yaml_prices(text, "prices.yaml")]
    escaped = text + '  - provider: "Caf\\u00e9 \\"GPU\\""\n    gpu: "H100-SXM5-80GB"\n    usd_per_gpu_hour: 2\n'
    assert parse_generated_prices(escaped, "p") == parse_yaml_prices(escaped, "p")
    for changed in (text.replace("usd_per_gpu_hour: 6.88", "usd_per_gpu_hour: 6.88  # list price", 1),
                    text.replace("schema: 1", "schema: 2"), text.replace('    gpu: "', "    gpu: '", 1),
                    text + "extra: 1\n", text.replace("usd_per_gpu_hour: 6.88", "usd_per_gpu_hour: 1e3", 1)):
        assert parse_generated_prices(changed, "p") is None
