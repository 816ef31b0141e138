"""Errors a user can cause, each rendered as one line by the interfaces (exit code 2)."""

from __future__ import annotations

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
        self._named(field, what, name, closest(name, list(candidates)), hint)

    def _named(self, field: str, what: str, name: str, close: list[str], hint: str) -> None:
        """"unknown <what> '<name>'; closest: ...; <hint>" as the error of `field`."""
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
    import difflib  # here: only a name that does not resolve needs it (start-up)

    fuzzy = [by_lower[m] for m in difflib.get_close_matches(low, list(by_lower), n=n, cutoff=0.5)]
    out: list[str] = []
    for p in subs[:n] + fuzzy:
        if p not in out:
            out.append(p)
    return out[:n]


MAX_USER_FILE_BYTES = 256 * 1024 * 1024
"""Largest config, GPU, price or calibration file read, bytes: a config.json is kilobytes, the shipped
calibration a few megabytes."""
SHOWN_NAME_CHARS = 120
"""Characters of a user's path or name shown in an error message."""


def shown(text: object) -> str:
    """A user's path or name for a one-line message: control characters escaped, long ones cut."""
    s = str(text).encode("unicode_escape", "backslashreplace").decode("ascii")
    return s if len(s) <= SHOWN_NAME_CHARS else s[:SHOWN_NAME_CHARS] + "..."


def read_user_bytes(path: object, field: str, what: str = "file", max_bytes: int = MAX_USER_FILE_BYTES) -> bytes:
    """A user's file as bytes; InputError (naming `field`) for an empty path, a folder, a missing or
    unreadable file, a name too long, or a file over `max_bytes`."""
    import os

    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if not text.strip():
        raise InputError(field, f"empty path: give a {what}")
    try:
        if os.path.isdir(text):
            raise InputError(field, f"'{shown(text)}' is a folder: give a {what}")
        size = os.path.getsize(text)
        if size > max_bytes:
            raise InputError(field, f"'{shown(text)}' is {size:,} bytes: too large for a {what} "
                                    f"(at most {max_bytes:,})")
        with open(text, "rb") as fh:
            return fh.read(max_bytes + 1)
    except InputError:
        raise
    except FileNotFoundError:
        raise InputError(field, f"no such file: '{shown(text)}'") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InputError(field, f"cannot read '{shown(text)}': {reason}") from None


def read_user_text(path: object, field: str, what: str = "file", max_bytes: int = MAX_USER_FILE_BYTES) -> str:
    """A user's text file, decoded as UTF-8 (a BOM is dropped); InputError as `read_user_bytes`, and for
    bytes that are not UTF-8 (a binary or latin-1 file), with the offset of the first bad byte."""
    data = read_user_bytes(path, field, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(field, f"'{shown(path)}' is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                                f"give a {what}") from None


def parse_user_json(text: str, field: str, where: str) -> object:
    """json.loads with every failure as one InputError: bad syntax (with the line), nesting too deep
    for the parser, numbers too long to convert."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"'{shown(where)}' is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(field, f"'{shown(where)}' nests too deeply to be a config") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(field, f"'{shown(where)}' holds a value that cannot be read: {exc}") from None


def check_output_path(path: object, field: str, what: str = "file") -> str:
    """Refuse an output path that cannot be written (before any long work): empty, a folder, a missing
    or read-only parent folder, a name too long. Returns the path as text."""
    import os

    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if not text.strip():
        raise InputError(field, f"empty path: give a {what} to write")
    if os.path.isdir(text):
        raise InputError(field, f"'{shown(text)}' is a folder: give a {what} to write")
    parent = os.path.dirname(os.path.abspath(text)) or "."
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX") if os.path.isdir(parent) else 255
    except (OSError, ValueError, AttributeError):
        name_max = 255
    if len(os.path.basename(text).encode("utf-8", "surrogateescape")) > name_max:
        raise InputError(field, f"file name too long: '{shown(text)}'")
    if not os.path.isdir(parent):
        raise InputError(field, f"folder '{shown(parent)}' does not exist (create it first)")
    if os.path.exists(text) and not os.access(text, os.W_OK):
        raise InputError(field, f"'{shown(text)}' is not writable")
    if not os.path.exists(text) and not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(field, f"folder '{shown(parent)}' is not writable")
    return text


def write_user_text(path: object, text: str, field: str, what: str = "file") -> None:
    """Write a user's output file; an OSError (a full disk, a vanished folder) is one InputError."""
    import os

    target = check_output_path(path, field, what)
    try:
        with open(target, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    except OSError as exc:
        raise InputError(field, f"cannot write '{shown(os.fspath(target))}': {exc.strerror or exc}") from None
