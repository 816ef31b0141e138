"""The estimator contract: `predict_arrays(arrays) -> dict of arrays` over many configurations.

Every estimator returns at least `step_s` (seconds per optimizer step) and `memory_gib` (per GPU);
the physics-based ones add the step-time and memory breakdowns. Learned estimators (see
`tuneplan.learn`) also `fit(runs)` and save/load a calibration file.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

Arrays = dict[str, np.ndarray]


class Estimator(Protocol):
    name: str

    def predict_arrays(self, a: Arrays) -> Arrays: ...

    def assumptions(self) -> list[str]: ...


ESTIMATOR_NAMES = ("tuneplan", "kavier", "xia", "planner", "slst")


def estimator_class(name: str):
    """The estimator class of a name (each has `from_calibration` and, when learned, `from_payload`)."""
    from tuneplan.errors import InputError

    if name == "tuneplan":
        from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

        return TuneplanEstimator
    if name == "kavier":
        from tuneplan.estimators.kavier import KavierEstimator

        return KavierEstimator
    if name == "xia":
        from tuneplan.estimators.xia import XiaEstimator

        return XiaEstimator
    if name == "planner":
        from tuneplan.estimators.planner import PlannerEstimator

        return PlannerEstimator
    if name == "slst":
        from tuneplan.estimators.slst import SLSTEstimator

        return SLSTEstimator
    raise InputError("estimator", f"unknown estimator '{name}'", ESTIMATOR_NAMES)


def get_estimator(name: str, calibration=None):
    """An estimator by name, optionally with a fitted calibration (path, name or loaded object)."""
    return estimator_class(name).from_calibration(calibration)
