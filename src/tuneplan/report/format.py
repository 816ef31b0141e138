"""Human formatting of figures with their units."""

from __future__ import annotations


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 0:  # a part that hides time (an RL step's overlap)
        return "-" + duration(-s)
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.2f} h"
    return f"{s / 86400:.1f} days"


def money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def number(v: float | None, unit: str = "", digits: int = 3) -> str:
    if v is None:
        return "-"
    v = float(v)
    if abs(v) >= 100:
        s = f"{v:,.0f}"
    elif abs(v) >= 1:
        s = f"{v:,.{max(0, digits - 1)}f}".rstrip("0").rstrip(".")
    else:
        s = f"{v:.{digits}g}"
    return f"{s} {unit}".strip()


def gib(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f} GiB"
