"""Measure real fine-tuning steps on this device (`tuneplan profile`) and the device itself
(`tuneplan probe`), writing rows in the runs schema that calibrate/predict read as they are.

Importing this package is cheap: torch and transformers are imported only when measuring.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {"profile_grid": "grid", "profile_auto": "grid", "run_one": "runner", "probe": "device",
              "smart_sample": "sampling", "ProfileConfig": "config"}
"""The public names, each imported from its module on first use."""
__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"tuneplan.profile.{_MODULE_OF[name]}"), name)
