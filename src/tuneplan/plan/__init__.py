"""The planner: enumerate the configurations a user could choose, keep those that fit, cost them,
rank them, draw the Pareto front (`search.plan`), and the throughput/memory curve over the
micro-batch (`curve.curve`).

`tuneplan.plan(...)` calls `tuneplan.plan.search.plan(...)`: this module is callable, so the name
works whether or not the package has been imported.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["plan", "curve"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tuneplan.plan.search import plan as _plan

        return _plan(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "plan":
        from tuneplan.plan.search import plan as _plan

        return _plan
    if name == "curve":
        from tuneplan.plan.curve import curve as _curve

        return _curve
    raise AttributeError(f"module 'tuneplan.plan' has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallableModule
