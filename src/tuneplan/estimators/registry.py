"""The estimators by name: each one's class (with `from_payload` where a calibration file describes it)."""

from __future__ import annotations

ESTIMATOR_NAMES = ("tuneplan", "kavier", "xia", "planner", "slst")


def estimator_class(name: str):
    """The estimator class of a name (learned ones have `from_payload`)."""
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
