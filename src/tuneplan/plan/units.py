"""Durations and money as people write them on a command line (`12h`, `90min`, `1h30m`, `$400`), and
their short human forms in the planner's sentences."""

from __future__ import annotations

import math
import re

from tuneplan.errors import InputError

_UNIT_S = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
           "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
           "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
           "d": 86400.0, "day": 86400.0, "days": 86400.0}
_PART = re.compile(r"((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-z]*)")  # 1e3h: exponent, then unit


def parse_duration(text: str) -> float:
    """Seconds from '12h', '90m', '1h30m', '2d', '3600s'; a bare number is hours."""
    s = str(text).strip().lower().replace(" ", "")
    if not s:
        raise InputError("deadline", "is empty")
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        unit = m.group(2) or "h"
        if unit not in _UNIT_S:
            raise InputError("deadline", f"unknown unit '{unit}' in '{text}'", ("s", "min", "h", "d"))
        total += float(m.group(1)) * _UNIT_S[unit]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise InputError("deadline", f"'{text}' is not a duration (e.g. 12h, 90min, 1h30m, 2d)")
    if not math.isfinite(total) or total <= 0:
        raise InputError("deadline", f"must be a positive duration, got '{text}'")
    return total


def parse_money(text: str) -> float:
    """Dollars from '400', '$400', '1,200.50'."""
    s = str(text).strip().replace("$", "").replace(",", "").replace("usd", "").replace("USD", "").strip()
    try:
        v = float(s)
    except ValueError:
        raise InputError("budget", f"'{text}' is not an amount of dollars (e.g. 400 or $400)") from None
    if not math.isfinite(v) or v <= 0:
        raise InputError("budget", f"must be a positive amount, got '{text}'")
    return v


def hours(seconds: float | None) -> str:
    """'5.2 h', '45 min', '3.1 days' ('-' for no figure)."""
    if seconds is None or not math.isfinite(s := float(seconds)):
        return "-"
    if s < 3600.0:
        return f"{s / 60.0:.0f} min" if s >= 60 else f"{s:.0f} s"
    if s >= 4 * 86400.0:
        return f"{_one_decimal(s / 86400.0)} days"
    return f"{_one_decimal(s / 3600.0)} h"


def _one_decimal(v: float) -> str:
    t = f"{v:,.1f}"
    return t[:-2] if t.endswith(".0") else t


def money(v: float | None) -> str:
    if v is None or not math.isfinite(float(v)):
        return "no price"
    v = float(v)
    if abs(v) >= 1000 or (v == int(v) and abs(v) >= 10):
        return f"${v:,.0f}"
    return f"${v:,.2f}"
