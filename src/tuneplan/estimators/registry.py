"""The estimators by name: each one's class (with `from_payload` where a calibration file describes it)."""

from __future__ import annotations

ESTIMATOR_NAMES = ("tuneplan", "kavier", "xia", "planner", "slst")


def estimator_class(name: str):
    """The estimator class of a name (learned ones have `from_payload`), imported when asked for."""
    from tuneplan.errors import InputError

    if name == "tuneplan":
        from tuneplan.estimators.tuneplan_physics import TuneplanEstimator as cls
    elif name == "kavier":
        from tuneplan.estimators.kavier import KavierEstimator as cls
    elif name == "xia":
        from tuneplan.estimators.xia import XiaEstimator as cls
    elif name == "planner":
        from tuneplan.estimators.planner import PlannerEstimator as cls
    elif name == "slst":
        from tuneplan.estimators.slst import SLSTEstimator as cls
    else:
        raise InputError("estimator", f"unknown estimator '{name}'", ESTIMATOR_NAMES)
    return cls
