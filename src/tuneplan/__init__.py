"""tuneplan: how long a fine-tuning run takes, whether it fits, what it costs — from first principles,
calibrated on real measurements.

    >>> import tuneplan
    >>> r = tuneplan.estimate("meta-llama/Llama-3.1-8B", "H100-SXM5-80GB", method="lora", gpus=4,
    ...                       examples=30000, tokens_per_example=1000, epochs=3, micro_batch=4)
    >>> r.wall_clock_s, r.fits
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "estimate", "plan_run"]

_LAZY = ("estimate", "plan_run", "plan", "EstimateResult")
"""Names `__getattr__` loads on first use."""


def __dir__() -> list[str]:
    # the lazy names too (a module-level __getattr__ hides them from the default dir())
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str):
    # lazy: `import tuneplan` stays cheap; heavy modules load on first use
    if name == "estimate":
        from tuneplan.api import estimate

        return estimate
    if name == "plan_run":
        from tuneplan.plan.search import plan_run

        return plan_run
    if name == "plan":  # the subpackage (its search is tuneplan.plan_run)
        import importlib

        return importlib.import_module("tuneplan.plan")
    if name in ("EstimateResult",):
        from tuneplan import api

        return getattr(api, name)
    raise AttributeError(f"module 'tuneplan' has no attribute {name!r}")
