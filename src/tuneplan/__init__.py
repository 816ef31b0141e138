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

_LAZY = {"estimate": "tuneplan.api", "EstimateResult": "tuneplan.api", "plan_run": "tuneplan.plan.search",
         "plan": None}
"""Names `__getattr__` loads on first use, from their module (`plan`: the subpackage, whose search is
`plan_run`), so `import tuneplan` stays cheap."""


def __dir__() -> list[str]:
    # the lazy names too (a module-level __getattr__ hides them from the default dir())
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tuneplan' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(_LAZY[name] or "tuneplan.plan")
    return module if _LAZY[name] is None else getattr(module, name)
