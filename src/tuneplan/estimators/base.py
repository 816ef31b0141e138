"""The estimator contract, one for every estimator: `predict_arrays(arrays) -> dict of arrays` over
many configurations (the flat arrays of `tuneplan.physics.terms.build_arrays`).

Every estimator returns `step_s` (seconds per optimizer step), `tokens_per_step`, `compute_s`,
`memory_gib` (per GPU, as nvidia-smi shows it), `allocated_gib`, `reserved_gib`, `nvidia_smi_gib` and
`fits`, and `model_flops_per_step` when it counts FLOPs (the MFU is 0 otherwise); the parts of the step it models (keys of STEP_PARTS) and of memory (its own `memory_parts`, which add
up to `memory_gib`). It also says which `constants` the arrays are built with, which estimator's
`memory_model` answers "what is the largest micro-batch" and "what would make it fit" (None: it has no
model that depends on the batch), and `assumptions(job)`: what its figures assume for that job.
Estimators that predict time only borrow tuneplan's uncalibrated memory model (`BorrowsMemory`).
Learned estimators are built from a calibration file's payload (`from_payload`); the learners that
fit them live in `tuneplan.learn`.
"""

from __future__ import annotations

from typing import Protocol

from tuneplan.physics import xp
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants

Arrays = dict[str, xp.Array]

STEP_PARTS = ("forward_s", "backward_s", "recompute_s", "dequant_s", "elementwise_s", "overhead_s", "tensor_parallel_s",
              "pipeline_bubble_s", "optimizer_s", "communication_s", "vision_tower_s")
"""The parts of an optimizer step an estimator may report; those it reports add up to `step_s`."""
MEMORY_PARTS = ("weights_gib", "gradients_gib", "gradient_buckets_gib", "master_weights_gib", "optimizer_gib", "gathered_params_gib",
                "activations_gib", "logits_gib", "workspace_gib", "optimizer_step_gib", "calibration_gib", "allocator_gib",
                "cuda_context_gib")
"""The parts of tuneplan's memory model (they add up to `memory_gib`; gradients are those at the backward's peak:
physics/activations.backward_peak_bytes; `optimizer_step_gib` is the optimizer step's peak above the
backward's, where the step's is the higher: physics/memory.settle_peaks)."""


class Estimator(Protocol):
    name: str
    constants: PhysicsConstants
    memory_parts: tuple[str, ...]

    @property
    def memory_model(self) -> Estimator | None: ...

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False) -> Arrays: ...

    def assumptions(self, job=None) -> list[str]: ...


class BorrowsMemory:
    """For estimators that predict step time only (`time_arrays`, their own model): `predict_arrays`
    adds tuneplan's uncalibrated memory model's figures to it."""

    constants: PhysicsConstants = DEFAULT_CONSTANTS
    memory_parts = MEMORY_PARTS
    MEMORY_ASSUMPTION = "Memory figures from tuneplan's uncalibrated memory model (this estimator has none)."

    @property
    def memory_model(self):
        from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

        return TuneplanEstimator()

    def time_arrays(self, a: Arrays) -> Arrays:
        raise NotImplementedError

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False) -> Arrays:
        from tuneplan.physics.memory import memory

        m = memory(a, self.constants)
        return {**m, "memory_gib": m["nvidia_smi_gib"], **self.time_arrays(a)}


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
