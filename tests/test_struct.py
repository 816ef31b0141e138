"""tuneplan.specs.struct: the dataclass forms the package uses, and the standard library's functions on them."""

from __future__ import annotations

import dataclasses

import pytest

from tuneplan.specs import struct


@struct.dataclass(frozen=True)
class Point:
    x: float
    y: float = 2.0
    tags: dict = struct.field(default_factory=dict, compare=False)


@struct.dataclass
class Box:
    a: Point
    items: list = struct.field(default_factory=list)


def test_init_defaults_eq_hash_and_frozen():
    p = Point(1.0)
    assert (p.x, p.y, p.tags) == (1.0, 2.0, {}) and Point(1.0, tags={"k": "v"}) == p  # tags not compared
    assert hash(p) == hash(Point(1.0, 2.0)) and p != Point(1.0, 3.0)
    assert repr(p) == "Point(x=1.0, y=2.0, tags={})"
    with pytest.raises(AttributeError):
        p.x = 3.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1.0, x=2.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point(1.0, z=2.0)  # type: ignore[call-arg]
    assert Box(p).items is not Box(p).items and Box.__hash__ is None


def test_replace_asdict_fields_here_and_in_the_standard_library():
    b = Box(Point(1.0), [Point(2.0, 3.0)])
    want = {"a": {"x": 1.0, "y": 2.0, "tags": {}}, "items": [{"x": 2.0, "y": 3.0, "tags": {}}]}
    assert struct.asdict(b) == want == dataclasses.asdict(b)
    assert struct.replace(b.a, y=5.0) == dataclasses.replace(b.a, y=5.0) == Point(1.0, 5.0)
    assert [f.name for f in struct.fields(Point)] == [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags"]
    assert dataclasses.is_dataclass(b)
