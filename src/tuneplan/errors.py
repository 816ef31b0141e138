"""Errors a user can cause, each rendered as one line by the interfaces (exit code 2)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator


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
    return list(dict.fromkeys(subs[:n] + fuzzy))[:n]


MAX_USER_FILE_BYTES = 256 * 1024 * 1024
"""Largest config, GPU, price or calibration file read, bytes: a config.json is kilobytes, the shipped
calibration a few megabytes."""
SHOWN_NAME_CHARS = 120
"""Characters of a user's path or name shown in an error message."""


def shown(text: object) -> str:
    """A user's path or name for a one-line message: control characters escaped, long ones cut."""
    s = str(text).encode("unicode_escape", "backslashreplace").decode("ascii")
    return s if len(s) <= SHOWN_NAME_CHARS else s[:SHOWN_NAME_CHARS] + "..."


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words, from its stat mode."""
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "not a plain file"


def _path_text(path: object) -> str:
    return os.fspath(path) if isinstance(path, os.PathLike) else str(path)


def read_user_bytes(path: object, field: str, what: str = "file", max_bytes: int = MAX_USER_FILE_BYTES) -> bytes:
    """A user's file as bytes; InputError (naming `field`) for an empty path, a folder, a FIFO or a
    device, a missing or unreadable file, a name too long, or a file over `max_bytes`."""
    text = _path_text(path)
    if not text.strip():
        raise InputError(field, f"empty path: give a {what}")
    try:
        if os.path.isdir(text):
            raise InputError(field, f"'{shown(text)}' is a folder: give a {what}")
        # opened without blocking and checked to be a regular file before any read: a FIFO, a terminal
        # or a device would block (or never end) on read
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(field, f"'{shown(text)}' is not a regular file ({file_kind(st.st_mode)}): "
                                        f"give a {what}")
            if st.st_size > max_bytes:
                raise InputError(field, f"'{shown(text)}' is {st.st_size:,} bytes: too large for a {what} "
                                        f"(at most {max_bytes:,})")
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
        return load_bounded_json(text)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"'{shown(where)}' is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except TooComplexError as exc:
        raise InputError(field, f"'{shown(where)}' nests too deeply to be a config ({exc})") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(field, f"'{shown(where)}' holds a value that cannot be read: {exc}") from None


RUNS_SUFFIXES = (".csv", ".parquet", ".pq")
"""Suffixes of the runs files a folder given as input stands for."""


def _is_input(out: str, src: object) -> bool:
    """`out` is the input `src` (the same file, through links too) or, when `src` is a folder, a runs
    file inside it (a folder of runs stands for its runs files)."""
    src_text = _path_text(src)
    with contextlib.suppress(OSError):  # a path that does not exist yet is compared by name below
        if os.path.samefile(src_text, out):
            return True
    if os.path.realpath(src_text) == os.path.realpath(out):
        return True
    if os.path.isdir(src_text) and out.lower().endswith(RUNS_SUFFIXES):
        folder = os.path.realpath(src_text)
        return os.path.dirname(os.path.realpath(out)) in (folder, os.path.join(folder, "runs"))
    return False


def check_output_path(path: object, field: str, what: str = "file", inputs: Iterable[object] = (),
                      force: bool | None = None) -> str:
    """Refuse an output path that cannot be written (before any long work): empty, a folder, a FIFO
    or device, a missing or read-only parent folder, a name too long; one of the command's `inputs`
    (writing it would lose them, even with --force); with `force=False`, an existing file (the
    command's --force replaces it). Returns the path as text."""
    text = _path_text(path)
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
    for src in inputs:
        if src is not None and _is_input(text, src):
            raise InputError(field, f"'{shown(text)}' is also an input of this command: writing it would "
                                    "overwrite what it reads; give another file")
    if os.path.exists(text):
        try:
            st = os.stat(text)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise InputError(field, f"'{shown(text)}' is not a regular file ({file_kind(st.st_mode)}): "
                                    f"give a {what} to write")
        if force is False:
            raise InputError(field, f"'{shown(text)}' exists: give --force to replace it, or another file")
        if not os.access(text, os.W_OK):
            raise InputError(field, f"'{shown(text)}' is not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(field, f"folder '{shown(parent)}' is not writable")
    return text


@contextlib.contextmanager
def atomic_output(path: object, field: str, what: str = "file") -> Iterator[str]:
    """Write an output file all at once: yields a temporary path in the same folder (same suffix, so
    a writer that reads the format from it still does), then renames it over `path` (os.replace) when
    the block ends without an error. A crash, a full disk or an interrupt leaves the old file as it
    was, and two writers never interleave (the last rename wins). An OSError is one InputError."""
    import tempfile

    target = _path_text(path)
    if os.path.islink(target):  # written where the link points: the link stays a link
        target = os.path.realpath(target)
    folder = os.path.dirname(os.path.abspath(target))
    base = os.path.basename(target)
    suffix = os.path.splitext(base)[1]
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base[:100]}.", suffix=f".tmp{suffix}", dir=folder)
        os.close(fd)
    except OSError as exc:
        raise InputError(field, f"cannot write '{shown(target)}': {exc.strerror or exc}") from None
    try:
        yield tmp
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:  # a new file: the mode the user's umask gives
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(field, f"cannot write '{shown(target)}': {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            with contextlib.suppress(OSError):
                os.remove(tmp)


def write_user_text(path: object, text: str, field: str, what: str = "file", inputs: Iterable[object] = (),
                    force: bool | None = None) -> None:
    """Write a user's output file at once (`atomic_output`) after `check_output_path`."""
    target = check_output_path(path, field, what, inputs, force)
    with atomic_output(target, field, what) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


# --- structured text read with bounded nesting and alias expansion --------------------------------

MAX_NESTING = 64
"""Nesting levels of a user's YAML or JSON document (training configs nest 3-5 levels): deeper flow
collections make PyYAML's scanner quadratic and its composer, json and every walk over the result
recursive."""
MAX_EXPANDED_NODES = 200_000
"""Values of a YAML document once its aliases are expanded (a training config has hundreds): an alias
bomb (`b: [*a, *a, ...]`, nine levels) is a few hundred bytes that stand for 10^9 values."""


class TooComplexError(ValueError):
    """A document nested too deeply or expanding to too many values, with the line where it showed."""

    def __init__(self, line: int | None, message: str) -> None:
        self.line = line
        super().__init__(message)


def check_yaml_shape(text: str, refuse_tags: bool = False) -> None:
    """Walk a YAML text's events (lazily: the walk stops at the first problem, before the rest is
    scanned) and raise TooComplexError where it nests more than MAX_NESTING levels or its aliases
    expand to more than MAX_EXPANDED_NODES values; with `refuse_tags`, TooComplexError for any explicit
    tag too. yaml.YAMLError for bad syntax."""
    import yaml

    open_: list[list] = []  # [anchor, expanded values so far] of each open collection
    anchors: dict[str, int] = {}  # expanded values of each anchored node
    total = 0

    def line_of(ev) -> int | None:
        return ev.start_mark.line + 1 if ev.start_mark is not None else None

    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if refuse_tags:
            tag = getattr(ev, "tag", None)
            if tag is not None and not (isinstance(ev, yaml.ScalarEvent) and tag == "!" and ev.implicit[1]):
                raise TooComplexError(line_of(ev), f"YAML tag '{tag}' refused (tuneplan reads plain YAML only "
                                                   "and never constructs objects)")
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_.append([ev.anchor, 1])
            total += 1
            if len(open_) > MAX_NESTING:
                raise TooComplexError(line_of(ev), f"nested more than {MAX_NESTING} levels deep")
            continue
        if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = open_.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
            total += 1
        elif isinstance(ev, yaml.AliasEvent):
            anchor, n = None, anchors.get(ev.anchor, 1)
            total += n
        else:
            continue
        if total > MAX_EXPANDED_NODES:
            raise TooComplexError(line_of(ev), f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values "
                                               "(an alias bomb?)")
        if anchor is not None:
            anchors[anchor] = n
        if open_:
            open_[-1][1] += n


def check_nesting(data: object, limit: int = MAX_NESTING) -> None:
    """TooComplexError when parsed JSON/YAML data (dicts and lists) nests more than `limit` levels;
    an explicit stack, so no recursion."""
    stack = [(data, 1)] if isinstance(data, (dict, list)) else []
    while stack:
        x, depth = stack.pop()
        if depth > limit:
            raise TooComplexError(None, f"nested more than {limit} levels deep")
        stack.extend((c, depth + 1) for c in (x.values() if isinstance(x, dict) else x) if isinstance(c, (dict, list)))


def load_bounded_json(text: str) -> object:
    """json.loads bounded as `check_nesting`: TooComplexError for nesting too deep (also where json
    itself runs out of recursion), json.JSONDecodeError for bad syntax, ValueError for a number too
    long to convert."""
    import json

    try:
        data = json.loads(text)
    except RecursionError:
        raise TooComplexError(None, f"nested more than {MAX_NESTING} levels deep") from None
    check_nesting(data)
    return data


def load_bounded_yaml(text: str, refuse_tags: bool = False) -> object:
    """yaml.safe_load after `check_yaml_shape`: TooComplexError for nesting, alias expansion (or, with
    `refuse_tags`, a tag) beyond the bounds; yaml.YAMLError for bad syntax."""
    import yaml

    check_yaml_shape(text, refuse_tags)
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except RecursionError:
        raise TooComplexError(None, f"nested more than {MAX_NESTING} levels deep") from None
