"""Cloud prices per GPU-hour, with the date and source of each figure (`tuneplan/data/gpu_prices.csv`,
from the shared reference). `--prices FILE` overrides with a user's CSV or YAML of the same columns."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tuneplan.errors import DataFileError, UnknownNameError


@dataclass(frozen=True)
class Price:
    provider: str
    gpu: str
    usd_per_gpu_hour: float
    pricing_kind: str
    offer: str
    region: str
    date_seen: str
    source: str

    def describe(self) -> str:
        return f"${self.usd_per_gpu_hour:.2f}/GPU-h, {self.provider} {self.offer} ({self.pricing_kind}, {self.date_seen})"


def _rows_from_records(records: list[dict], path: str) -> list[Price]:
    out = []
    for i, r in enumerate(records, start=2):
        try:
            price = float(r.get("price_usd_per_gpu_hour") or 0)
        except ValueError:
            raise DataFileError(path, i, f"price_usd_per_gpu_hour '{r.get('price_usd_per_gpu_hour')}' "
                                "is not a number") from None
        if price <= 0 or not r.get("gpu"):
            continue
        out.append(Price(provider=str(r.get("provider", "")), gpu=str(r["gpu"]), usd_per_gpu_hour=price,
                         pricing_kind=str(r.get("pricing_kind", "")),
                         offer=str(r.get("instance_or_offer", "")), region=str(r.get("region", "")),
                         date_seen=str(r.get("date_seen", "")), source=str(r.get("source", ""))))
    return out


@lru_cache(maxsize=8)
def load_prices(path: str | None = None) -> tuple[Price, ...]:
    if path is None:
        text = resources.files("tuneplan.data").joinpath("gpu_prices.csv").read_text(encoding="utf-8")
        return tuple(_rows_from_records(list(csv.DictReader(text.splitlines())), "gpu_prices.csv"))
    p = Path(path)
    if not p.exists():
        raise DataFileError(str(p), None, "no such price file")
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(p.read_text(encoding="utf-8"))
        records = data.get("prices", data) if isinstance(data, dict) else data
        if not isinstance(records, list):
            raise DataFileError(str(p), None, "expected a list of price records under 'prices'")
        return tuple(_rows_from_records(records, str(p)))
    return tuple(_rows_from_records(list(csv.DictReader(p.read_text(encoding="utf-8").splitlines())), str(p)))


def providers(path: str | None = None) -> list[str]:
    return sorted({p.provider for p in load_prices(path)})


def price_for(gpu: str, provider: str | None = None, path: str | None = None,
              kinds: tuple[str, ...] = ("on-demand",)) -> Price | None:
    """The cheapest on-demand price per GPU-hour for a GPU (optionally from one provider)."""
    rows = [p for p in load_prices(path) if p.gpu == gpu]
    if provider:
        names = providers(path)
        match = [n for n in names if n.lower() == provider.lower()]
        if not match:
            raise UnknownNameError("provider", provider, names, what="provider")
        rows = [p for p in rows if p.provider == match[0]]
    pref = [p for p in rows if p.pricing_kind in kinds] or rows
    return min(pref, key=lambda p: p.usd_per_gpu_hour) if pref else None
