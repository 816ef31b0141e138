"""The estimator contract: `predict_arrays(arrays) -> dict of arrays` over the flat arrays of
`tuneplan.physics.terms.build_arrays`, returning `step_s` (per optimizer step), `tokens_per_step`,
`compute_s`, `memory_gib` (per GPU, as nvidia-smi shows it), `allocated_gib`, `reserved_gib`,
`nvidia_smi_gib`, `fits`, `model_flops_per_step` when it counts FLOPs, and the parts it models (STEP_PARTS,
its `memory_parts`). It names its `constants`, the `memory_model` that answers "largest micro-batch" and
"what would make it fit" (None: none depends on the batch), and `assumptions(job)`. Time-only estimators
borrow tuneplan's memory model (`tuneplan_physics.BorrowsMemory`); learned ones load from a calibration
payload (`from_payload` / `payload()`) and `fit(X, y) -> self`; `estimators.base.get_estimator` gives one.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tuneplan.physics.constants import PhysicsConstants

Arrays = dict[str, np.ndarray]

STEP_PARTS = ("forward_s", "backward_s", "recompute_s", "dequant_s", "elementwise_s", "overhead_s", "tensor_parallel_s",
              "pipeline_bubble_s", "optimizer_s", "communication_s", "vision_tower_s")
"""The parts of an optimizer step an estimator may report; those it reports add up to `step_s`."""
MEMORY_PARTS = ("weights_gib", "gradients_gib", "gradient_buckets_gib", "master_weights_gib", "optimizer_gib", "gathered_params_gib",
                "activations_gib", "logits_gib", "workspace_gib", "optimizer_step_gib", "eval_pass_gib", "calibration_gib", "allocator_gib",
                "cuda_context_gib")
"""The parts of tuneplan's memory model (they add up to `memory_gib`; gradients are those at the backward's peak:
physics/activations.backward_peak_bytes; `optimizer_step_gib` is the optimizer step's peak above the
backward's, where the step's is the higher, and `eval_pass_gib` an evaluation pass's above both:
physics/memory.settle_peaks)."""


class Estimator(Protocol):
    name: str
    constants: PhysicsConstants
    memory_parts: tuple[str, ...]

    @property
    def memory_model(self) -> Estimator | None: ...

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False) -> Arrays: ...

    def assumptions(self, job=None) -> list[str]: ...
