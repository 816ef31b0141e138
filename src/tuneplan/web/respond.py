"""What the web API's endpoints share: their errors as 422 details located at a body field, their work
run in a lane of `tuneplan.web.pool`, and their answers as plain JSON."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from tuneplan.errors import AmbiguousNameError, InputError, TuneplanError, UnknownNameError
from tuneplan.web.pool import Busy, lane

log = logging.getLogger("tuneplan.web")


class RequestError(Exception):
    """A 422 located at one body field (or the whole body)."""

    def __init__(self, loc: Iterable[str | int], msg: str, kind: str = "value_error", **extra: Any) -> None:
        super().__init__(msg)
        self.loc = ["body", *loc]
        self.msg = msg
        self.kind = kind
        self.extra = extra

    def detail(self) -> dict[str, Any]:
        return {"loc": self.loc, "msg": self.msg, "type": self.kind, **self.extra}


_CLI_FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def input_error_detail(err: InputError) -> dict[str, Any]:
    msg = str(err).removeprefix(f"{err.field}: ")
    msg = _CLI_FLAG.sub(lambda m: m.group(1).replace("-", "_"), msg)  # the page's field names, not flags
    field = (err.field or "").replace("-", "_")  # its body location: `tokens-per-example` -> tokens_per_example
    field = {"rate_usd_per_gpu_hour": "rate", "job": "", "gpu_file": "gpu"}.get(field, field)
    d: dict[str, Any] = {"loc": ["body", *([field] if field else [])], "msg": msg, "type": "value_error"}
    if err.allowed:
        d["allowed"] = list(err.allowed)
    if isinstance(err, UnknownNameError):
        d.update(type="unknown_name", closest=list(err.close))
    elif isinstance(err, AmbiguousNameError):
        d.update(type="ambiguous_name", candidates=list(err.candidates))
    return d


def jsonable(obj: Any) -> Any:
    """Plain JSON values: non-finite floats become null, numpy scalars and tuples plain Python."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str | int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        try:
            return jsonable(obj.item())
        except (TypeError, ValueError):
            pass
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    if hasattr(obj, "model_dump"):
        return jsonable(obj.model_dump())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    return str(obj)


def compute(fn: Callable[[], Any], rename: dict[str, str] | None = None, kind: str = "light") -> Any:
    """Run an estimate / a plan; arithmetic that an absurd (but well-typed) input breaks is a 422.
    `rename`: body field names for InputError fields that differ (the planner's `gpu` is `gpus`).
    Each computation holds a slot of its lane (tuneplan.web.pool): plans one at a time."""
    try:
        with lane(kind):
            return fn()
    except Busy as exc:
        raise RequestError([], str(exc), kind="busy") from None
    except InputError as exc:
        d = input_error_detail(exc)
        field = d["loc"][1] if len(d["loc"]) > 1 else ""
        if rename and field in rename:
            extra = {k: v for k, v in d.items() if k not in ("loc", "msg", "type")}
            raise RequestError([rename[field]], d["msg"], d["type"], **extra) from None
        raise
    except (TuneplanError, RequestError):
        raise
    except (ZeroDivisionError, OverflowError, FloatingPointError, ValueError, MemoryError) as exc:
        log.info("rejected input: %s: %s", type(exc).__name__, exc)
        raise RequestError([], f"cannot compute this configuration: {exc}", kind="value_error") from None
