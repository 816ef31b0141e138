"""Errors a user can cause, each rendered as one line by the interfaces (exit code 2)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TuneplanError(Exception):
    """Base class: a problem with the user's input or data, shown as one line, never a traceback."""

    exit_code = 2


class InputError(TuneplanError, ValueError):
    """A bad value for a named field, with the allowed values when there is a closed set."""

    def __init__(self, field: str, message: str, allowed: Iterable[str] | None = None) -> None:
        self.field = field
        self.allowed = list(allowed) if allowed is not None else None
        text = f"{field}: {message}"
        if self.allowed:
            text += f" (allowed: {', '.join(self.allowed)})"
        super().__init__(text)


class UnknownNameError(InputError):
    """A model, GPU, provider... name that is not in the catalog; lists the closest catalog names."""

    def __init__(self, field: str, name: str, candidates: Iterable[str], what: str = "name",
                 hint: str = "") -> None:
        pool = list(candidates)
        close = closest(name, pool)
        message = f"unknown {what} '{name}'"
        if close:
            message += f"; closest: {', '.join(close)}"
        if hint:
            message += f"; {hint}"
        self.name = name
        self.close = close
        InputError.__init__(self, field, message)


class AmbiguousNameError(InputError):
    """A name that matches several catalog entries."""

    def __init__(self, field: str, name: str, candidates: Iterable[str]) -> None:
        self.candidates = sorted(set(candidates))
        InputError.__init__(self, field, f"'{name}' is ambiguous; candidates: {', '.join(self.candidates)}")


class DataFileError(TuneplanError):
    """A problem in a data file, located by file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


def closest(name: str, pool: Iterable[str], n: int = 5) -> list[str]:
    """Closest names by case-insensitive similarity, substring matches first."""
    pool = list(pool)
    low = name.lower()
    by_lower = {p.lower(): p for p in pool}
    subs = [p for p in pool if low and (low in p.lower() or p.lower() in low)]
    fuzzy = [by_lower[m] for m in difflib.get_close_matches(low, list(by_lower), n=n, cutoff=0.5)]
    out: list[str] = []
    for p in subs[:n] + fuzzy:
        if p not in out:
            out.append(p)
    return out[:n]
