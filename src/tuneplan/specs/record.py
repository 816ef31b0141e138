"""A frozen, validated record: the part of pydantic's BaseModel that JobSpec uses, without pydantic.

Importing pydantic and building JobSpec's schema took ~0.25 s of every `tuneplan estimate`; this
module is the same contract in ~250 lines of plain Python. Fields are class annotations with
defaults (a `FieldInfo` from `Field(...)` or a plain value); values are coerced as pydantic's lax
mode does for the types JobSpec declares (int, float, bool, str, Literal, `X | None`, `tuple[X, ...]`);
`field_validator` / `model_validator` run as pydantic runs them; a failure raises `RecordError`
(a ValueError) whose `errors()` and text have pydantic's shape (type, loc, msg, input, ctx). The
pydantic-facing API JobSpec's users call is kept: `model_fields`, `model_fields_set`,
`model_dump()`, `model_copy(update=...)`, equality, hashing and repr.
tests/test_record.py checks the coercion against pydantic itself, field by field.
"""

from __future__ import annotations

import itertools
import math
import sys
import types
import typing
from typing import Any

ERRORS_URL = "https://errors.pydantic.dev/2.14/v/"
"""Where pydantic's error text points for each error type (kept so the text reads as pydantic's did)."""
TRUE_WORDS = frozenset(("1", "on", "t", "true", "y", "yes"))
FALSE_WORDS = frozenset(("0", "off", "f", "false", "n", "no"))
"""The strings a bool field reads (case-insensitive), as pydantic's lax mode."""
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
"""What is stripped around a number given as text (Unicode White_Space, as pydantic-core's Rust `trim`;
Python's own `strip()` also strips the ASCII separators 0x1c-0x1f)."""
MAX_INT_DIGITS = 4300
"""Digits above which an int parsed from a string is refused (pydantic-core: int_parsing_size)."""


class FieldInfo:
    """A field: its default, help text and extra keys (what `tuneplan.specs.job.option` declares)."""

    __slots__ = ("default", "description", "json_schema_extra", "annotation")

    def __init__(self, default: Any = None, description: str | None = None,
                 json_schema_extra: dict | None = None) -> None:
        self.default = default
        self.description = description
        self.json_schema_extra = json_schema_extra
        self.annotation: Any = None

    def __repr__(self) -> str:
        return f"FieldInfo(annotation={self.annotation!r}, default={self.default!r})"


def Field(default: Any = None, *, description: str | None = None,  # noqa: N802 - pydantic's name
          json_schema_extra: dict | None = None) -> Any:
    return FieldInfo(default, description, json_schema_extra)


class ValidationInfo:
    """What a field validator taking a second argument receives (`info.field_name`)."""

    __slots__ = ("field_name", "data")

    def __init__(self, field_name: str, data: dict) -> None:
        self.field_name = field_name
        self.data = data


class RecordError(ValueError):
    """Validation failed: `errors()` lists each problem as pydantic does (type, loc, msg, input, ctx)."""

    def __init__(self, title: str, errors: list[dict]) -> None:
        self.title = title
        self._errors = errors
        super().__init__(self._text())

    def errors(self) -> list[dict]:
        return [dict(e) for e in self._errors]

    def error_count(self) -> int:
        return len(self._errors)

    def _text(self) -> str:
        n = len(self._errors)
        lines = [f"{n} validation error{'s' if n != 1 else ''} for {self.title}"]
        for e in self._errors:
            if e["loc"]:
                lines.append(".".join(str(x) for x in e["loc"]))
            shown = repr(e["input"])
            if len(shown) > 50:
                shown = shown[:24] + "..." + shown[-24:]
            lines.append(f"  {e['msg']} [type={e['type']}, input_value={shown}, "
                         f"input_type={type(e['input']).__name__}]")
            lines.append(f"    For further information visit {ERRORS_URL}{e['type']}")
        return "\n".join(lines)


class _Bad(Exception):
    """One coercion failure (turned into an error entry with its location)."""

    def __init__(self, kind: str, msg: str, ctx: dict | None = None, loc: tuple = ()) -> None:
        self.kind, self.msg, self.ctx, self.loc = kind, msg, ctx, loc


# ---- coercion, as pydantic's lax mode -----------------------------------------------------------

def _int(v: Any) -> int:
    if isinstance(v, int):  # bool included: True -> 1
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _Bad("finite_number", "Input should be a finite number")
        if v != int(v):
            raise _Bad("int_from_float", "Input should be a valid integer, got a number with a fractional part")
        if abs(v) >= 2.0 ** 63:
            raise _Bad("int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size")
        return int(v)
    if isinstance(v, (bytes, bytearray)):
        v = _decoded(v, "int_parsing", "Input should be a valid integer, unable to parse string as an integer")
    if isinstance(v, str):
        return _int_text(v)
    raise _Bad("int_type", "Input should be a valid integer")


def _decoded(v: bytes | bytearray, error: str, message: str) -> str:
    """Bytes read as UTF-8 text, as pydantic reads them for a number; `error` when they are not UTF-8."""
    try:
        return bytes(v).decode()
    except UnicodeDecodeError:
        raise _Bad(error, message) from None


def _int_text(text: str) -> int:
    s = text.strip(WHITESPACE)
    body = s[1:] if s[:1] in "+-" else s
    whole, dot, frac = body.partition(".")
    ok = whole.replace("_", "").isdigit() and "__" not in whole and not whole.startswith("_") \
        and not whole.endswith("_") and (not dot or (frac != "" and set(frac) <= {"0"}))
    if not ok or not whole.isascii():
        raise _Bad("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
    if len(whole) > MAX_INT_DIGITS:
        raise _Bad("int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size")
    n = int(whole.replace("_", ""))
    return -n if s.startswith("-") else n


def _float(v: Any) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        v = _decoded(v, "float_parsing", "Input should be a valid number, unable to parse string as a number")
    if isinstance(v, str):
        s = v.strip(WHITESPACE)
        try:
            if not s.isascii() or s.startswith("_") or s.endswith("_") or "__" in s or ("_" in s and s != v):
                raise ValueError(s)
            return float(s.replace("_", ""))
        except ValueError:
            raise _Bad("float_parsing", "Input should be a valid number, unable to parse string as a number") \
                from None
    raise _Bad("float_type", "Input should be a valid number")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v == int(v)):
        if v in (0, 1):
            return bool(v)
        if -2 ** 63 <= v < 2 ** 63:
            raise _Bad("bool_parsing", "Input should be a valid boolean, unable to interpret input")
        raise _Bad("bool_type", "Input should be a valid boolean")
    if isinstance(v, (bytes, bytearray)):
        try:
            v = bytes(v).decode()
        except UnicodeDecodeError:
            v = ""
    if isinstance(v, str):
        w = v.lower()
        if w in TRUE_WORDS:
            return True
        if w in FALSE_WORDS:
            return False
        raise _Bad("bool_parsing", "Input should be a valid boolean, unable to interpret input")
    raise _Bad("bool_type", "Input should be a valid boolean")


def _str(v: Any) -> str:
    if isinstance(v, str):
        return v if type(v) is str else str.__str__(v)
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode()
        except UnicodeDecodeError:
            raise _Bad("string_unicode", "Input should be a valid string, unable to parse raw data as a unicode "
                       "string") from None
    raise _Bad("string_type", "Input should be a valid string")


def _literal(choices: tuple) -> typing.Callable[[Any], Any]:
    shown = [repr(c) for c in choices]
    expected = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]

    def check(v: Any) -> Any:
        for c in choices:
            if type(v) is type(c) and v == c:
                return c
        raise _Bad("literal_error", f"Input should be {expected}", {"expected": expected})

    return check


def _nullable(inner: typing.Callable[[Any], Any]) -> typing.Callable[[Any], Any]:
    return lambda v: None if v is None else inner(v)


def _items(v: Any) -> list:
    if isinstance(v, (str, bytes, bytearray, dict)) or not hasattr(v, "__iter__"):
        raise _Bad("tuple_type", "Input should be a valid tuple")
    return list(v)


def _checked(checks: typing.Iterable[typing.Callable[[Any], Any]], xs: list) -> tuple:
    """Each item through its check; a failure located at the item's index, as pydantic locates it."""
    out = []
    for i, (check, x) in enumerate(zip(checks, xs, strict=True)):
        try:
            out.append(check(x))
        except _Bad as bad:
            raise _Bad(bad.kind, bad.msg, bad.ctx, (i, *bad.loc)) from None
    return tuple(out)


def _tuple_of(inner: typing.Callable[[Any], Any]) -> typing.Callable[[Any], tuple]:
    def check(v: Any) -> tuple:
        xs = _items(v)
        return _checked(itertools.repeat(inner, len(xs)), xs)

    return check


def _tuple_fixed(inners: list) -> typing.Callable[[Any], tuple]:
    def check(v: Any) -> tuple:
        xs = _items(v)
        n = len(inners)
        if len(xs) < n:
            raise _Bad("missing", "Field required", None, (len(xs),))
        if len(xs) > n:
            raise _Bad("too_long", f"Tuple should have at most {n} item{'s' if n != 1 else ''} after validation, "
                       f"not {len(xs)}", {"field_type": "Tuple", "max_length": n, "actual_length": len(xs)})
        return _checked(inners, xs)

    return check


SCALARS: dict[Any, typing.Callable[[Any], Any]] = {int: _int, float: _float, bool: _bool, str: _str}


def coercer(annotation: Any) -> typing.Callable[[Any], Any]:
    """The function that validates and converts a value of this annotation (pydantic's lax mode)."""
    if annotation in SCALARS:
        return SCALARS[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return _literal(args)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args):
            return _nullable(coercer(rest[0]))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _tuple_of(coercer(args[0]))
        return _tuple_fixed([coercer(a) for a in args])
    raise TypeError(f"record fields of type {annotation!r} are not supported")


# ---- validators --------------------------------------------------------------------------------

def field_validator(*names: str, mode: str = "after"):
    """Run the decorated classmethod on these fields' values (mode 'before': on the raw input)."""
    def mark(f):
        f.__record_field__ = (names, mode)
        return f

    return mark


def model_validator(*, mode: str):
    """'before': a classmethod on the input dict; 'after': a method on the built record (returns it)."""
    def mark(f):
        f.__record_model__ = mode
        return f

    return mark


def _function(v):
    return v.__func__ if isinstance(v, (classmethod, staticmethod)) else v


def _marks(v) -> tuple[Any, Any]:
    """The (model, field) validator marks of a class attribute (on a classmethod or its function)."""
    return (getattr(v, "__record_model__", None) or getattr(_function(v), "__record_model__", None),
            getattr(v, "__record_field__", None) or getattr(_function(v), "__record_field__", None))


class ConfigDict(dict):
    """Class options (only `frozen=True, extra='forbid'` are supported: the record's contract)."""


class Record:
    """Base class: subclasses declare annotated fields; instances are frozen and validated."""

    __slots__ = ("__dict__", "__weakref__", "__record_set__")
    model_fields: typing.ClassVar[dict[str, FieldInfo]] = {}
    __record_steps__: typing.ClassVar[tuple] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        env = vars(sys.modules[cls.__module__])
        fields: dict[str, FieldInfo] = {}
        for name, ann in cls.__dict__.get("__annotations__", {}).items():
            hint = eval(ann, env) if isinstance(ann, str) else ann  # noqa: S307 - the class's own annotations
            if typing.get_origin(hint) is typing.ClassVar or name == "model_config":
                continue
            value = cls.__dict__.get(name)
            info = value if isinstance(value, FieldInfo) else FieldInfo(value)
            info.annotation = hint
            fields[name] = info
            if name in cls.__dict__:
                delattr(cls, name)
        before_model, after_model, before, after = [], [], {}, {}
        for v in cls.__dict__.values():
            model_mode, field_mark = _marks(v)
            f = _function(v)
            if model_mode:
                (before_model if model_mode == "before" else after_model).append(f)
            elif field_mark:
                names, mode = field_mark
                for n in names:
                    (before if mode == "before" else after).setdefault(n, []).append(f)
        steps = tuple((n, coercer(i.annotation), tuple(before.get(n, ())), tuple(after.get(n, ())))
                      for n, i in fields.items())
        cls.model_fields = fields
        cls.__record_steps__ = (steps, tuple(before_model), tuple(after_model))

    def __init__(self, **data: Any) -> None:
        steps, before_model, after_model = self.__record_steps__
        title = type(self).__name__
        try:
            for f in before_model:
                data = f(type(self), data)
        except ValueError as exc:
            raise RecordError(title, [_value_error(exc, (), data)]) from None
        values: dict[str, Any] = {}
        errors: list[dict] = []
        for name, coerce, pre, post in steps:
            if name not in data:
                values[name] = self.model_fields[name].default
                continue
            raw = data[name]
            try:
                v = raw
                for f in pre:
                    v = _call(f, type(self), v, name, values)
                v = coerce(v)
                for f in post:
                    v = _call(f, type(self), v, name, values)
                values[name] = v
            except _Bad as bad:
                errors.append(_entry(bad.kind, (name, *bad.loc), bad.msg, raw, bad.ctx))
            except ValueError as exc:
                errors.append(_value_error(exc, (name,), raw))
        for name in data:
            if name not in self.model_fields:
                errors.append(_entry("extra_forbidden", (name,), "Extra inputs are not permitted", data[name]))
        if errors:
            raise RecordError(title, errors)
        object.__setattr__(self, "__dict__", values)
        object.__setattr__(self, "__record_set__", frozenset(k for k in data if k in self.model_fields))
        try:
            for f in after_model:
                f(self)
        except ValueError as exc:
            raise RecordError(title, [_value_error(exc, (), data)]) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise RecordError(type(self).__name__, [_entry("frozen_instance", (name,), "Instance is frozen", value)])

    def __delattr__(self, name: str) -> None:
        raise RecordError(type(self).__name__, [_entry("frozen_instance", (name,), "Instance is frozen", None)])

    @property
    def model_fields_set(self) -> set[str]:
        """The fields given when the record was built (or updated by `model_copy`)."""
        return set(self.__record_set__)

    def model_dump(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Record:
        """A copy with some fields replaced (not validated, as pydantic's)."""
        new = object.__new__(type(self))
        values = dict(self.__dict__)
        values.update(update or {})
        object.__setattr__(new, "__dict__", values)
        object.__setattr__(new, "__record_set__", self.__record_set__ | frozenset(update or ()))
        return new

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), tuple(self.__dict__.values())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def __reduce__(self):
        return (_rebuild, (type(self), dict(self.__dict__), self.__record_set__))


def _rebuild(cls, values: dict, fields_set: frozenset) -> Record:
    new = object.__new__(cls)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(new, "__record_set__", fields_set)
    return new


def _call(f, cls, v: Any, name: str, values: dict) -> Any:
    if f.__code__.co_argcount >= 3:
        return f(cls, v, ValidationInfo(name, values))
    return f(cls, v)


def _entry(kind: str, loc: tuple, msg: str, value: Any, ctx: dict | None = None) -> dict:
    e = {"type": kind, "loc": loc, "msg": msg, "input": value}
    if ctx is not None:
        e["ctx"] = ctx
    e["url"] = ERRORS_URL + kind
    return e


def _value_error(exc: ValueError, loc: tuple, value: Any) -> dict:
    return _entry("value_error", loc, f"Value error, {exc}", value, {"error": exc})
