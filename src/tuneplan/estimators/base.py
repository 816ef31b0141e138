"""An estimator by name and calibration: the shipped default, a calibration file, or none."""

from __future__ import annotations

from tuneplan.errors import InputError
from tuneplan.estimators.calibration import default_calibration, load_calibration
from tuneplan.estimators.registry import estimator_class

UNCALIBRATED = ("none", "physics", "uncalibrated")
"""Calibration names that ask for tuneplan's uncalibrated physics."""


def get_estimator(name: str, calibration=None):
    """An estimator by name, optionally with a fitted calibration (path, name or loaded object).
    Without one: tuneplan takes the shipped default calibration (the uncalibrated physics if none
    ships, or calibration 'none'), kavier and xia their published coefficients, slst refuses (it is
    learned from runs); the Run Planner seed has nothing to calibrate and ignores it."""
    cls = estimator_class(name)
    if name == "planner" or (name == "tuneplan" and isinstance(calibration, str)
                             and calibration.lower() in UNCALIBRATED):
        return cls()
    if calibration is None:
        if name == "slst":
            raise InputError("estimator", "slst is learned from runs: pass --calibration FILE "
                             "fitted with `tuneplan calibrate --learner slst`")
        cal = default_calibration() if name == "tuneplan" else None
        return cal.estimator() if cal is not None and cal.learner == name else cls()
    return load_calibration(calibration, expected=name).estimator()
