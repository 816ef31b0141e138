"""What reading a training config produces: JobSpec keyword arguments, the model id, and where every
value came from (file and key), which keys were ignored and which framework defaults were assumed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneplan.configs.maps import truthy
from tuneplan.errors import InputError

FORMATS = ("axolotl", "llamafactory", "torchtune", "trl", "litgpt", "accelerate", "deepspeed", "verl", "nemo-rl",
           "openrlhf")
"""The training-config formats `--from` reads (`--format` forces one)."""

NO_EFFECT = "a training hyper-parameter or output setting: no effect on time or memory"
"""Why a key such as the learning rate or the output folder is ignored."""

class ConfigError(InputError):
    """A config file tuneplan cannot read: one line naming the file, the key and the reason."""

    def __init__(self, path: str | Path, key: str, reason: str) -> None:
        where = f"{path}" + (f": {key}" if key else "")
        InputError.__init__(self, "from", f"{where}: {reason}")
        self.path = str(path)
        self.key = key


@dataclass
class Value:
    """One extracted setting: the tuneplan field, its value, and where it came from."""

    field: str
    value: Any
    file: str
    key: str
    stated: bool  # False: a framework default assumed (the file does not say)
    note: str = ""

    def describe(self) -> str:
        shown = ",".join(self.value) if isinstance(self.value, tuple) else self.value
        where = f"{self.file}:{self.key}" if self.key else self.file
        text = f"{self.field}={shown} <- {where}" if self.stated else f"{self.field}={shown} ({self.note})"
        return text + (f" ({self.note})" if self.note and self.stated else "")


class Doc:
    """A parsed config mapping that remembers which (dotted) keys were read, so the rest can be listed
    as ignored."""

    def __init__(self, data: dict, path: str, where: str | None = None) -> None:
        self.data = data
        self.path = path  # the label values are attributed to (the file name)
        self.where = where or path  # the file as given, for error messages
        self.read: set[str] = set()

    def has(self, key: str) -> bool:
        return self._lookup(key)[0]

    def get(self, key: str, default: Any = None) -> Any:
        found, v = self._lookup(key)
        if found:
            self.read.add(key)
            return v
        return default

    def int(self, key: str, minimum: int | None = 1) -> int | None:
        """An integer setting (None when absent or null); anything else is a one-line ConfigError."""
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v.strip())
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or (minimum is not None and v < minimum):
            want = "an integer" if minimum is None else f"an integer >= {minimum}"
            raise ConfigError(self.where, key, f"'{v}' is not {want}")
        return v

    def steps(self, key: str) -> int | None:
        """A step count where 0 or a negative value means "not set" (transformers' max_steps=-1)."""
        v = self.int(key, minimum=None)
        return v if v is not None and v > 0 else None

    def flag(self, key: str) -> bool | None:
        """A yes/no setting (`truthy`), None when absent or null."""
        v = self.get(key)
        return None if v is None else truthy(v)

    def strs(self, key: str, split: bool = True) -> list[str] | None:
        """A list of names (a string is split on commas unless `split` is False, for regular
        expressions; None when absent or empty); other types are a one-line ConfigError."""
        v = self.get(key)
        if v is None or v == "" or v == []:
            return None
        if isinstance(v, str):
            return [x.strip() for x in v.split(",") if x.strip()] if split else [v]
        if isinstance(v, list) and all(isinstance(x, str | int | float) and not isinstance(x, bool) for x in v):
            return [str(x) for x in v]
        raise ConfigError(self.where, key, f"'{v}' is not a list of names")

    def num(self, key: str) -> float | None:
        """A positive number (None when absent or null); anything else is a one-line ConfigError."""
        v = self.get(key)
        if v is None:
            return None
        try:
            x = float(v) if not isinstance(v, bool) else float("nan")
        except (TypeError, ValueError):
            x = float("nan")
        if not x > 0 or x == float("inf"):
            raise ConfigError(self.where, key, f"'{v}' is not a positive number")
        return x

    def touch(self, *keys: str) -> None:
        """Mark keys as read without using their value (they are accounted for elsewhere)."""
        self.read.update(keys)

    def _lookup(self, key: str) -> tuple[bool, Any]:
        cur: Any = self.data
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                return False, None
            cur = cur[part]
        return True, cur

    def unread(self) -> list[str]:
        """Keys never read: a whole sub-mapping once when none of it was read, else its unread leaves."""
        out: list[str] = []

        def walk(d: dict, prefix: str) -> None:
            for k, v in d.items():
                key = f"{prefix}{k}"
                if key in self.read:
                    continue
                touched = any(r.startswith(key + ".") for r in self.read)
                if isinstance(v, dict) and touched:
                    walk(v, key + ".")
                else:
                    out.append(key)

        walk(self.data, "")
        return out


@dataclass
class ConfigRead:
    """What one or more config files say about a fine-tuning job."""

    files: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    ignored: list[tuple[str, str, str]] = field(default_factory=list)  # (file, key, why)
    notes: list[str] = field(default_factory=list)  # assumptions that are not one field's value
    nulls: dict[str, str] = field(default_factory=dict)  # job field -> "file: key" that sets it to null

    # ---- recording --------------------------------------------------------------------------
    def set(self, fld: str, value: Any, file: str, key: str, note: str = "") -> None:
        """A value the file states. The first stated value of a field wins; a later different one is
        recorded as ignored (a conflict), a later stated one replaces an assumed default."""
        old = self._get(fld)
        if old is not None and old.stated:
            if old.value != value:
                self.ignored.append((file, key, f"{fld}={value} conflicts with {old.file}:{old.key} "
                                                f"({old.value}), which is used"))
            return
        if old is not None:
            self.values.remove(old)
        self.values.append(Value(fld, value, file, key, True, note))

    def assume(self, fld: str, value: Any, file: str, why: str) -> None:
        """A framework default for a field the file does not set (never replaces a stated value)."""
        if self._get(fld) is None:
            self.values.append(Value(fld, value, file, "", False, why))

    def take(self, fld: str, value: Any, file: str, key: str, default: Any = None, why: str = "",
             note: str = "") -> None:
        """`set` a value the file states (not None), else `assume` `default` (when not None) for `why`."""
        if value is not None:
            self.set(fld, value, file, key, note)
        elif default is not None:
            self.assume(fld, default, file, why)

    def ignore(self, file: str, key: str, why: str) -> None:
        self.ignored.append((file, key, why))

    def _get(self, fld: str) -> Value | None:
        return next((v for v in self.values if v.field == fld), None)

    def value(self, fld: str, default: Any = None) -> Any:
        v = self._get(fld)
        return default if v is None else v.value

    def stated(self, fld: str) -> bool:
        v = self._get(fld)
        return v is not None and v.stated

    # ---- results ----------------------------------------------------------------------------
    @property
    def model(self) -> str | None:
        return self.value("model")

    def job_kwargs(self) -> dict[str, Any]:
        """JobSpec keyword arguments (fields of `INFO_FIELDS` are reported but not passed on)."""
        return {v.field: v.value for v in self.values if v.field not in INFO_FIELDS}

    def used(self) -> list[str]:
        return [v.describe() for v in self.values if v.stated]

    def assumed(self) -> list[str]:
        return [v.describe() for v in self.values if not v.stated] + list(self.notes)

    def ignored_lines(self) -> list[str]:
        return [f"{f}:{k}: {why}" for f, k, why in self.ignored]

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files, "formats": self.formats, "model": self.model,
            "job": self.job_kwargs(),
            "info": {v.field: v.value for v in self.values if v.field in INFO_FIELDS and v.field != "model"},
            "used": [{"field": v.field, "value": v.value, "file": v.file, "key": v.key, "note": v.note}
                     for v in self.values if v.stated],
            "assumed": self.assumed(),
            "ignored": [{"file": f, "key": k, "why": why} for f, k, why in self.ignored],
        }


INFO_FIELDS = ("model", "lora_alpha", "global_batch", "modules_to_save", "attention", "max_steps",
               "activation_offload", "gpu_ids")
"""Settings read and reported that are not JobSpec fields (they do not change the estimate, or are
folded into other fields: the global batch into GPUs or gradient accumulation)."""
