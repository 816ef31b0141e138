"""Dataclasses that cost nothing to define: `dataclass` / `field` / `replace` / `asdict` / `fields`
with the standard library's meaning for the forms this package uses (`@dataclass`,
`@dataclass(frozen=True)`, defaults, `field(default=..., default_factory=..., compare=...)`).

The standard decorator writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and frozen
`__setattr__` as source text and compiles it (about 0.3 ms a class, 3 ms for one of 80 fields), and
importing it imports `inspect` (with `ast`, `dis`, `tokenize`): together a fifth of `tuneplan
estimate`'s start-up. Here those methods are shared functions that read the class's field list.
`dataclasses.fields / replace / asdict / is_dataclass` still work on these classes: their
`__dataclass_fields__` is built (importing dataclasses) the first time something asks for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """A field's name and default (or default factory)."""

    __slots__ = ("name", "type", "default", "default_factory", "compare")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.compare = compare  # part of == and the hash

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True) -> Any:
    """dataclasses.field, for `default`, `default_factory` and `compare`."""
    return Field(default, default_factory, compare)


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen instance (dataclasses.FrozenInstanceError's role)."""


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    fields_ = cls.__struct_fields__
    if len(args) > len(fields_):
        raise TypeError(f"{cls.__name__}.__init__() takes {len(fields_) + 1} positional arguments but "
                        f"{len(args) + 1} were given")
    d = self.__dict__
    for f, v in zip(fields_, args, strict=False):
        d[f.name] = v
    for f in fields_[len(args):]:
        name = f.name
        if name in kwargs:
            d[name] = kwargs.pop(name)
        elif f.default is not MISSING:
            d[name] = f.default
        elif f.default_factory is not MISSING:
            d[name] = f.default_factory()
        else:
            raise TypeError(f"{cls.__name__}.__init__() missing 1 required argument: '{name}'")
    if kwargs:
        name = next(iter(kwargs))
        taken = any(f.name == name for f in fields_)
        raise TypeError(f"{cls.__name__}.__init__() got " + (f"multiple values for argument '{name}'" if taken
                                                             else f"an unexpected keyword argument '{name}'"))


def _values(self: Any) -> tuple:
    """The compared fields' values (those == and the hash read)."""
    d = self.__dict__
    return tuple(d[name] for name in type(self).__struct_compared__)


def _repr(self: Any) -> str:
    d = self.__dict__
    return (f"{type(self).__qualname__}("
            + ", ".join(f"{f.name}={d[f.name]!r}" for f in type(self).__struct_fields__) + ")")


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field '{name}'")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field '{name}'")


class _StdlibFields:
    """`__dataclass_fields__`, built for the standard library's functions when first read."""

    def __get__(self, obj: Any, cls: type) -> dict:
        import dataclasses

        out = {}
        for f in cls.__struct_fields__:
            none = dataclasses.MISSING
            std = dataclasses.field(default=none if f.default is MISSING else f.default,  # type: ignore[call-overload]
                                    default_factory=none if f.default_factory is MISSING else f.default_factory,
                                    compare=f.compare)
            std.name, std.type = f.name, f.type
            std._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what dataclasses' own decorator sets
            out[f.name] = std
        cls.__dataclass_fields__ = out  # type: ignore[attr-defined]
        return out


def _process(cls: type, frozen: bool) -> type:
    own = cls.__dict__
    found: list[Field] = []
    for name, ann in own.get("__annotations__", {}).items():
        v = own.get(name, MISSING)
        f = v if isinstance(v, Field) else Field(default=v)
        f.name, f.type = name, ann
        if isinstance(v, Field):  # as dataclasses: the class attribute is the default, or none
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        if f.default is MISSING and f.default_factory is MISSING and any(
                g.default is not MISSING or g.default_factory is not MISSING for g in found):
            raise TypeError(f"non-default argument '{name}' follows default argument")
        found.append(f)
    cls.__struct_fields__ = tuple(found)  # type: ignore[attr-defined]
    cls.__struct_compared__ = tuple(f.name for f in found if f.compare)  # type: ignore[attr-defined]
    cls.__match_args__ = tuple(f.name for f in found)  # type: ignore[attr-defined]
    methods: dict[str, Callable[..., Any]] = {"__init__": _init, "__repr__": _repr, "__eq__": _eq}
    for name, fn in methods.items():
        if name not in own:
            setattr(cls, name, fn)
    if "__hash__" not in own or own["__hash__"] is None:
        cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]  # as eq=True, frozen=...
    if frozen:
        cls.__setattr__ = _frozen_setattr  # type: ignore[assignment]
        cls.__delattr__ = _frozen_delattr  # type: ignore[assignment]
    cls.__dataclass_fields__ = _StdlibFields()  # type: ignore[attr-defined]
    return cls


def dataclass(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """`@dataclass` or `@dataclass(frozen=True)`: fields from the class's annotations, in order."""
    if cls is None:
        return lambda c: _process(c, frozen)
    return _process(cls, frozen)


def _is_struct(obj: Any) -> bool:
    return hasattr(type(obj), "__struct_fields__") and not isinstance(obj, type)


def fields(obj: Any) -> tuple:
    """The fields of a struct class or instance (each with .name, .type, .default); any other
    dataclass's from the standard library."""
    cls = obj if isinstance(obj, type) else type(obj)
    if "__struct_fields__" in cls.__dict__:
        return cls.__struct_fields__
    import dataclasses

    return dataclasses.fields(obj)


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of `obj` with `changes` (dataclasses.replace)."""
    if not _is_struct(obj):
        import dataclasses

        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    d = obj.__dict__
    return type(obj)(**{f.name: d[f.name] for f in type(obj).__struct_fields__ if f.name not in changes},
                     **changes)


_PLAIN = frozenset((int, float, str, bool, type(None), bytes, complex))


def _plain(v: Any) -> Any:
    t = type(v)
    if t in _PLAIN:
        return v
    if _is_struct(v):
        return asdict(v)
    if t is dict:
        return {_plain(k): _plain(x) for k, x in v.items()}
    if t is list:
        return [_plain(x) for x in v]
    if t is tuple:
        return tuple(_plain(x) for x in v)
    if "dataclasses" in sys.modules and sys.modules["dataclasses"].is_dataclass(v) and not isinstance(v, type):
        return sys.modules["dataclasses"].asdict(v)
    if isinstance(v, tuple) and hasattr(v, "_fields"):  # a named tuple
        return t(*[_plain(x) for x in v])
    if isinstance(v, (list, tuple)):
        return t(_plain(x) for x in v)
    if isinstance(v, dict):
        return t((_plain(k), _plain(x)) for k, x in v.items())
    import copy

    return copy.deepcopy(v)


def asdict(obj: Any) -> dict[str, Any]:
    """The fields as a dict, nested structs and containers copied (dataclasses.asdict)."""
    if not _is_struct(obj):
        import dataclasses

        return dataclasses.asdict(obj)
    d = obj.__dict__
    return {f.name: _plain(d[f.name]) for f in type(obj).__struct_fields__}
