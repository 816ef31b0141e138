"""Cloud prices per GPU-hour, with the date and source of each figure.

The shipped price file is `tuneplan/data/gpu_prices.csv` (a copy of the shared reference
`gpu_prices.csv`), read with the csv module. `--prices FILE` overrides it with a user's YAML (a
`prices:` list of records with the keys below) or CSV (the reference columns).

Record keys: provider, gpu (a GPU catalog name), usd_per_gpu_hour (> 0), pricing_kind (on-demand,
spot, reserved-1y, capacity-block, community), offer, region, date_seen (YYYY-MM or YYYY-MM-DD),
source, notes; optionally gpus_per_instance and usd_per_instance_hour.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import asdict, dataclass
from datetime import date
from functools import lru_cache
from typing import Any

from tuneplan.errors import (
    DataFileError,
    TooComplexError,
    UnknownNameError,
    check_yaml_shape,
    read_user_text,
    shown,
)

SHIPPED_CSV = "gpu_prices.csv"
DEFAULT_KINDS = ("on-demand",)  # Pricing kinds the default price is taken from (the cheapest of them per GPU).
DATE_RE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
PRICE_STALE_DAYS = 365
"""Days after its `date_seen` at which a price is called old and warned about: cloud GPU prices move
within a year (shared reference GPUS_PRICES.md: the H100 on-demand list prices of 2024 and 2026 differ)."""

# CSV column -> record key (the reference CSV's names on the left)
_CSV_KEYS = {
    "price_usd_per_gpu_hour": "usd_per_gpu_hour",
    "instance_or_offer": "offer",
    "price_usd_per_hour_instance": "usd_per_instance_hour",
}


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
    notes: str = ""
    gpus_per_instance: int | None = None
    line: int | None = None  # where the record starts in its file

    def describe(self) -> str:
        return f"${self.usd_per_gpu_hour:.2f}/GPU-h, {self.provider} {self.offer} ({self.pricing_kind}, {self.date_seen})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("gpus_per_instance", "line")}


def _text(v: Any) -> str:
    return "" if v is None else str(v).strip()


def _record(r: dict, path: str, line: int | None) -> Price | None:
    """One price record, validated; None for a record with neither GPU nor price (a blank row)."""
    r = {_CSV_KEYS.get(k, k): v for k, v in r.items() if k is not None}
    gpu = _text(r.get("gpu"))
    raw = r.get("usd_per_gpu_hour")
    if not gpu and _text(raw) == "":
        return None
    if not gpu:
        raise DataFileError(path, line, "price record without a 'gpu'")
    if not _text(r.get("provider")):
        raise DataFileError(path, line, f"price record for {gpu} without a 'provider'")
    try:
        price = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        raise DataFileError(path, line, f"usd_per_gpu_hour '{_text(raw)}' is not a number") from None
    if not math.isfinite(price) or price <= 0:
        raise DataFileError(path, line, f"usd_per_gpu_hour must be a positive number, got '{_text(raw)}'")
    n = r.get("gpus_per_instance")
    try:
        n_gpus = int(float(n)) if _text(n) else None
    except (TypeError, ValueError):
        raise DataFileError(path, line, f"gpus_per_instance '{_text(n)}' is not a number") from None
    return Price(provider=_text(r.get("provider")), gpu=gpu, usd_per_gpu_hour=price,
                 pricing_kind=_text(r.get("pricing_kind")) or "on-demand", offer=_text(r.get("offer")),
                 region=_text(r.get("region")), date_seen=_text(r.get("date_seen")),
                 source=_text(r.get("source")), notes=_text(r.get("notes")), gpus_per_instance=n_gpus,
                 line=line)


def parse_csv_prices(text: str, path: str) -> tuple[Price, ...]:
    """Prices from CSV text in the reference columns; each record's line is the one it starts on (the
    header is line 1; blank rows are skipped)."""
    import csv

    reader = csv.reader(io.StringIO(text))
    header = next((row for row in reader if row), None)  # blank lines before the header skipped
    if not header or "gpu" not in header:
        raise DataFileError(path, 1, "a price CSV needs a header with at least provider, gpu and "
                            "price_usd_per_gpu_hour")
    out = []
    start = reader.line_num + 1
    for cells in reader:
        if cells:
            p = _record(dict(zip(header, cells, strict=False)), path, start)
            if p is not None:
                out.append(p)
        start = reader.line_num + 1
    return tuple(out)


def parse_yaml_prices(text: str, path: str) -> tuple[Price, ...]:
    """Prices from YAML text: a `prices:` list of records (or a bare list)."""
    import yaml

    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loader = loader_cls(text)
        try:
            root = loader.get_single_node()
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataFileError(path, mark.line + 1 if mark else None,
                            f"cannot parse YAML: {getattr(exc, 'problem', None) or exc}") from None
    if root is None:
        raise DataFileError(path, 1, "empty price file: expected a 'prices:' list of price records")
    node = root
    if isinstance(data, dict):
        if "prices" not in data:
            raise DataFileError(path, 1, "expected a 'prices:' list of price records")
        records = data["prices"]
        node = next((v for k, v in root.value if getattr(k, "value", None) == "prices"), None)
    else:
        records = data
    if not isinstance(records, list):
        raise DataFileError(path, (node.start_mark.line + 1) if node is not None else 1,
                            "expected a list of price records under 'prices'")
    lines = [item.start_mark.line + 1 for item in node.value] if node is not None else [None] * len(records)
    out = []
    for rec, line in zip(records, lines, strict=False):
        if not isinstance(rec, dict):
            raise DataFileError(path, line, "a price record must be a mapping (provider, gpu, usd_per_gpu_hour, ...)")
        p = _record(rec, path, line)
        if p is not None:
            out.append(p)
    return tuple(out)


@lru_cache(maxsize=8)
def load_prices(path: str | None = None) -> tuple[Price, ...]:
    """The shipped prices (None) or a user's price file (YAML or CSV, by extension)."""
    if path is None:
        from tuneplan.data import read_text

        return parse_csv_prices(read_text(SHIPPED_CSV), "tuneplan/data/" + SHIPPED_CSV)
    from pathlib import Path

    p = Path(path)
    if str(path).strip() and not p.exists():
        raise DataFileError(shown(path), None, "no such price file")
    text = read_user_text(path, "prices", "price file (YAML or CSV)")
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            check_yaml_shape(text)  # nested and aliased within bounds
        except TooComplexError as exc:
            raise DataFileError(str(p), exc.line, str(exc)) from None
        except yaml.YAMLError:
            pass  # the parse reports it with its line
        return parse_yaml_prices(text, str(p))
    return parse_csv_prices(text, str(p))


def providers(path: str | None = None) -> list[str]:
    return sorted({p.provider for p in load_prices(path)})


def check_provider(provider: str, path: str | None = None) -> str:
    """The provider's name as the price file writes it (case-insensitive match), or UnknownNameError
    with the close matches."""
    names = providers(path)
    match = [n for n in names if n.lower() == provider.strip().lower()]
    if not match:
        raise UnknownNameError("provider", provider, names, what="provider",
                               hint=f"providers: {', '.join(names)}")
    return match[0]


def price_for(gpu: str, provider: str | None = None, path: str | None = None) -> Price | None:
    """The cheapest on-demand price per GPU-hour for a GPU (optionally from one provider); other
    pricing kinds only when the GPU has no on-demand price."""
    rows = [p for p in load_prices(path) if p.gpu == gpu]
    if provider:
        name = check_provider(provider, path)
        rows = [p for p in rows if p.provider == name]
    pref = [p for p in rows if p.pricing_kind in DEFAULT_KINDS] or rows
    return min(pref, key=lambda p: p.usd_per_gpu_hour) if pref else None


def price_age_days(p: Price, today: date | None = None) -> int | None:
    """Days from a price's `date_seen` (YYYY-MM reads as the 1st) to today; None without a date."""
    if not DATE_RE.match(p.date_seen or ""):
        return None
    seen = date.fromisoformat(p.date_seen if len(p.date_seen) > 7 else p.date_seen + "-01")
    return ((today or date.today()) - seen).days


def stale_price_warning(p: Price | None, today: date | None = None) -> str | None:
    """A warning when a price is older than PRICE_STALE_DAYS, else None."""
    age = price_age_days(p, today) if p is not None else None
    if age is None or age <= PRICE_STALE_DAYS:
        return None
    return (f"the price of {p.gpu} ({p.describe()}) is {age / 365.25:.1f} years old: check the provider's "
            "current price, or pass --rate")
