"""Per-source and per-framework defaults for runs rows (`tuneplan/data/source_defaults.yaml`).

A default fills an EMPTY cell only; each fill is recorded in the row's `defaults_used`. The YAML
format is documented at the top of the file; every entry carries a `why` citing SOURCES.md or the
framework's code.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator

from tuneplan.errors import DataFileError
from tuneplan.runs.table import cell_str

FLAG_KEYS = ("usable_throughput", "usable_memory", "fits", "is_estimate", "full_length_samples",
             "step_time_is_micro_batch", "caveat")
"""What a `flags` entry may set."""


def cell_text(value: Any) -> str:
    """A cell as comparable text: `cell_str`'s, stripped and in lower case."""
    return cell_str(value).strip().lower()


def _listed(values: Any) -> list:
    return values if isinstance(values, list) else [values]


class Conditions(BaseModel):
    """`when` / `unless` (exact, case-insensitive) and `match` (regex search) on row cells."""

    when: dict[str, tuple[str, ...]] = {}
    unless: dict[str, tuple[str, ...]] = {}
    match: dict[str, re.Pattern[str]] = {}

    @field_validator("when", "unless", mode="before")
    @classmethod
    def _cells(cls, spec: Any) -> Any:
        if not isinstance(spec, dict):
            return spec or {}
        return {str(col): tuple(cell_text(v) for v in _listed(vals)) for col, vals in spec.items()}

    @field_validator("match", mode="before")
    @classmethod
    def _patterns(cls, spec: Any) -> Any:
        return {str(col): str(rx) for col, rx in spec.items()} if isinstance(spec, dict) else spec or {}

    def holds(self, ctx: dict[str, Any]) -> bool:
        return (all(cell_text(ctx.get(col)) in allowed for col, allowed in self.when.items())
                and not any(cell_text(ctx.get(col)) in banned for col, banned in self.unless.items())
                and all(ctx.get(col) is not None and rx.search(str(ctx[col])) for col, rx in self.match.items()))


def _why(text: str) -> str:
    if not text.strip():
        raise ValueError("needs a 'why' citing its source")
    return text.strip()


class DefaultEntry(Conditions):
    """One default for one column: `value`, or the value of `values` the cell of column `by` selects
    (`otherwise` for another cell)."""

    why: str
    value: Any = None
    by: str | None = None
    values: dict[str, Any] = {}
    otherwise: Any = None
    check_why = field_validator("why")(_why)

    @model_validator(mode="before")
    @classmethod
    def _value_or_by(cls, d: Any) -> Any:
        if isinstance(d, dict) and "value" not in d and "by" not in d:
            raise ValueError("needs 'value' or 'by'")
        return d

    @field_validator("values", mode="before")
    @classmethod
    def _keys(cls, values: Any) -> Any:
        return {cell_text(k): v for k, v in values.items()} if isinstance(values, dict) else values or {}

    def pick(self, ctx: dict[str, Any]) -> Any:
        """The value for this row, or None when the entry does not apply."""
        if not self.holds(ctx):
            return None
        if self.by is None:
            return self.value
        return self.values.get(cell_text(ctx.get(self.by)), self.otherwise)


class Flag(Conditions):
    """A doubt or property of some rows of a source (`settings`: the FLAG_KEYS it sets)."""

    model_config = ConfigDict(extra="forbid")
    why: str
    usable_throughput: Any = None
    usable_memory: Any = None
    fits: Any = None
    is_estimate: Any = None
    full_length_samples: Any = None
    step_time_is_micro_batch: Any = None
    caveat: Any = None
    check_why = field_validator("why")(_why)

    @property
    def settings(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in FLAG_KEYS if k in self.model_fields_set}

    @model_validator(mode="after")
    def _sets_something(self) -> Flag:
        if not self.settings:
            raise ValueError(f"nothing to set (allowed: {', '.join(FLAG_KEYS)})")
        return self


class GpuName(BaseModel):
    value: str
    why: str
    check_why = field_validator("value", "why")(_why)


class SourceRules(BaseModel):
    name: str
    defaults: dict[str, DefaultEntry] = {}
    gpu_names: dict[str, GpuName] = {}  # as the source writes it -> the catalog's name
    flags: tuple[Flag, ...] = ()

    @field_validator("defaults", "gpu_names", "flags", mode="before")
    @classmethod
    def _null_is_empty(cls, v: Any, info: ValidationInfo) -> Any:
        return cls.model_fields[info.field_name].default if v is None else v


class FrameworkRules(SourceRules):
    """Defaults of the rows whose `framework` cell contains one of `match` (case-insensitive)."""

    match: tuple[str, ...]

    @field_validator("match", mode="before")
    @classmethod
    def _lower(cls, match: Any) -> Any:
        if not (out := tuple(str(m).lower() for m in _listed(match) if m)):
            raise ValueError("needs the framework names it matches")
        return out

    def matches(self, framework: str) -> bool:
        low = framework.lower()
        return any(m in low for m in self.match)


class Defaults(BaseModel):
    frameworks: tuple[FrameworkRules, ...] = ()
    sources: dict[str, SourceRules] = {}
    path: str = ""

    @field_validator("sources", mode="before")
    @classmethod
    def _named(cls, sources: Any) -> Any:
        if not isinstance(sources, dict):
            return sources or {}
        return {str(n): {**(spec or {}), "name": str(n)} if isinstance(spec, dict | None) else spec
                for n, spec in sources.items()}

    def source(self, name: str) -> SourceRules:
        return self.sources.get(name) or SourceRules(name=name)


def parse_defaults(data: Any, path: str = "source_defaults.yaml") -> Defaults:
    """Validate the YAML mapping and build `Defaults`; the first problem is one DataFileError line."""
    if not isinstance(data, dict):
        raise DataFileError(path, None, "must be a mapping with 'frameworks' and 'sources'")
    try:
        return Defaults.model_validate({**data, "path": path})
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        raise DataFileError(path, None, f"{where}: {e['msg'].removeprefix('Value error, ')}") from None


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
