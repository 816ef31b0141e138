"""Measure real fine-tuning steps on this device (`tuneplan profile`) and the device itself
(`tuneplan probe`), writing rows in the runs schema that calibrate/predict read as they are.

Importing this package is cheap: torch and transformers are imported only when measuring.
"""

from __future__ import annotations

from typing import Any

__all__ = ["profile_grid", "profile_auto", "run_one", "probe", "smart_sample", "ProfileConfig"]


def __getattr__(name: str) -> Any:
    if name in ("profile_grid", "profile_auto"):
        from tuneplan.profile import grid

        return getattr(grid, name)
    if name == "run_one":
        from tuneplan.profile.runner import run_one

        return run_one
    if name == "probe":
        from tuneplan.profile.device import probe

        return probe
    if name == "smart_sample":
        from tuneplan.profile.sampling import smart_sample

        return smart_sample
    if name == "ProfileConfig":
        from tuneplan.profile.config import ProfileConfig

        return ProfileConfig
    raise AttributeError(name)
