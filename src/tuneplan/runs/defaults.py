"""Per-source and per-framework defaults for runs rows (`tuneplan/data/source_defaults.yaml`).

A default fills an EMPTY cell only; each fill is recorded in the row's `defaults_used`. The YAML
format is documented at the top of the file; every entry carries a `why` citing SOURCES.md or the
framework's code.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tuneplan.errors import DataFileError

FLAG_KEYS = ("usable_throughput", "usable_memory", "fits", "is_estimate", "full_length_samples",
             "step_time_is_micro_batch", "caveat")
"""What a `flags` entry may set."""


def cell_text(value: Any) -> str:
    """A cell as comparable text: '' for empty/NaN, integers without '.0', lower case."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value).strip().lower()


@dataclass(frozen=True)
class Conditions:
    """`when` / `unless` (exact, case-insensitive) and `match` (regex search) on row cells."""

    when: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unless: dict[str, tuple[str, ...]] = field(default_factory=dict)
    match: dict[str, re.Pattern[str]] = field(default_factory=dict)

    def holds(self, ctx: dict[str, Any]) -> bool:
        for col, allowed in self.when.items():
            if cell_text(ctx.get(col)) not in allowed:
                return False
        for col, banned in self.unless.items():
            if cell_text(ctx.get(col)) in banned:
                return False
        for col, rx in self.match.items():
            raw = ctx.get(col)
            if raw is None or not rx.search(str(raw)):
                return False
        return True


@dataclass(frozen=True)
class DefaultEntry:
    """One default for one column."""

    column: str
    why: str
    value: Any = None
    by: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    otherwise: Any = None
    conditions: Conditions = field(default_factory=Conditions)

    def pick(self, ctx: dict[str, Any]) -> Any:
        """The value for this row, or None when the entry does not apply."""
        if not self.conditions.holds(ctx):
            return None
        if self.by is None:
            return self.value
        key = cell_text(ctx.get(self.by))
        if key in self.values:
            return self.values[key]
        return self.otherwise


@dataclass(frozen=True)
class Flag:
    """A doubt or property of some rows of a source (see FLAG_KEYS)."""

    settings: dict[str, Any]
    why: str
    conditions: Conditions = field(default_factory=Conditions)


@dataclass(frozen=True)
class SourceRules:
    name: str
    defaults: dict[str, DefaultEntry] = field(default_factory=dict)
    gpu_names: dict[str, tuple[str, str]] = field(default_factory=dict)  # written -> (catalog, why)
    flags: tuple[Flag, ...] = ()


@dataclass(frozen=True)
class FrameworkRules:
    name: str
    match: tuple[str, ...]
    defaults: dict[str, DefaultEntry] = field(default_factory=dict)

    def matches(self, framework: str) -> bool:
        low = framework.lower()
        return any(m in low for m in self.match)


@dataclass(frozen=True)
class Defaults:
    frameworks: tuple[FrameworkRules, ...] = ()
    sources: dict[str, SourceRules] = field(default_factory=dict)
    path: str = ""

    def source(self, name: str) -> SourceRules:
        return self.sources.get(name) or SourceRules(name=name)


def _fail(path: str, message: str) -> DataFileError:
    return DataFileError(path, None, message)


def _conditions(d: dict, path: str, where: str) -> Conditions:
    when: dict[str, tuple[str, ...]] = {}
    unless: dict[str, tuple[str, ...]] = {}
    match: dict[str, re.Pattern[str]] = {}
    for key, out in (("when", when), ("unless", unless)):
        spec = d.get(key) or {}
        if not isinstance(spec, dict):
            raise _fail(path, f"{where}: '{key}' must map columns to values")
        for col, vals in spec.items():
            vals = vals if isinstance(vals, list) else [vals]
            out[str(col)] = tuple(cell_text(v) for v in vals)
    spec = d.get("match") or {}
    if not isinstance(spec, dict):
        raise _fail(path, f"{where}: 'match' must map columns to regular expressions")
    for col, rx in spec.items():
        try:
            match[str(col)] = re.compile(str(rx))
        except re.error as exc:
            raise _fail(path, f"{where}: bad regex for {col}: {exc}") from None
    return Conditions(when=when, unless=unless, match=match)


def _entry(column: str, d: Any, path: str, where: str) -> DefaultEntry:
    if not isinstance(d, dict):
        raise _fail(path, f"{where}.{column}: must be a mapping with value/by and why")
    why = str(d.get("why") or "").strip()
    if not why:
        raise _fail(path, f"{where}.{column}: needs a 'why' citing its source")
    if "value" not in d and "by" not in d:
        raise _fail(path, f"{where}.{column}: needs 'value' or 'by'")
    values = d.get("values") or {}
    if "by" in d and not isinstance(values, dict):
        raise _fail(path, f"{where}.{column}: 'values' must be a mapping")
    return DefaultEntry(
        column=column,
        why=why,
        value=d.get("value"),
        by=str(d["by"]) if d.get("by") else None,
        values={cell_text(k): v for k, v in values.items()},
        otherwise=d.get("otherwise"),
        conditions=_conditions(d, path, f"{where}.{column}"),
    )


def _entries(d: Any, path: str, where: str) -> dict[str, DefaultEntry]:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise _fail(path, f"{where}: 'defaults' must be a mapping of columns")
    return {str(col): _entry(str(col), spec, path, where) for col, spec in d.items()}


def parse_defaults(data: Any, path: str = "source_defaults.yaml") -> Defaults:
    """Validate the YAML mapping and build `Defaults`."""
    if not isinstance(data, dict):
        raise _fail(path, "must be a mapping with 'frameworks' and 'sources'")
    frameworks = []
    for i, fw in enumerate(data.get("frameworks") or []):
        if not isinstance(fw, dict) or not fw.get("name") or not fw.get("match"):
            raise _fail(path, f"frameworks[{i}]: needs name and match")
        match = fw["match"] if isinstance(fw["match"], list) else [fw["match"]]
        frameworks.append(FrameworkRules(
            name=str(fw["name"]),
            match=tuple(str(m).lower() for m in match),
            defaults=_entries(fw.get("defaults"), path, f"frameworks.{fw['name']}"),
        ))
    sources: dict[str, SourceRules] = {}
    for name, spec in (data.get("sources") or {}).items():
        spec = spec or {}
        where = f"sources.{name}"
        gpu_names: dict[str, tuple[str, str]] = {}
        for written, g in (spec.get("gpu_names") or {}).items():
            if not isinstance(g, dict) or not g.get("value") or not g.get("why"):
                raise _fail(path, f"{where}.gpu_names.{written}: needs value and why")
            gpu_names[str(written)] = (str(g["value"]), str(g["why"]))
        flags = []
        for j, f in enumerate(spec.get("flags") or []):
            if not isinstance(f, dict) or not f.get("why"):
                raise _fail(path, f"{where}.flags[{j}]: needs a 'why'")
            settings = {k: f[k] for k in FLAG_KEYS if k in f}
            unknown = set(f) - set(FLAG_KEYS) - {"why", "when", "unless", "match"}
            if unknown or not settings:
                raise _fail(path, f"{where}.flags[{j}]: unknown keys {sorted(unknown)} or nothing to set "
                                  f"(allowed: {', '.join(FLAG_KEYS)})")
            flags.append(Flag(settings=settings, why=str(f["why"]),
                              conditions=_conditions(f, path, f"{where}.flags[{j}]")))
        sources[str(name)] = SourceRules(
            name=str(name),
            defaults=_entries(spec.get("defaults"), path, where),
            gpu_names=gpu_names,
            flags=tuple(flags),
        )
    return Defaults(frameworks=tuple(frameworks), sources=sources, path=path)


def load_defaults(path: str | Path | None = None) -> Defaults:
    """The shipped defaults, or those of a user's YAML file."""
    if path is None:
        return _shipped_defaults()
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DataFileError(str(p), None, f"cannot read defaults: {exc}".splitlines()[0]) from None
    return parse_defaults(data, str(p))


@lru_cache(maxsize=1)
def _shipped_defaults() -> Defaults:
    from tuneplan.data import load_yaml

    return parse_defaults(load_yaml("source_defaults.yaml"), "tuneplan/data/source_defaults.yaml")
