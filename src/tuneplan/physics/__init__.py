"""Pure functions of specs: FLOPs, bytes, communication, time and memory. No I/O, no fitting."""

from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.memory import max_micro_batch, memory
from tuneplan.physics.step import model_flops_per_step, step_time, tokens_per_step

__all__ = ["DEFAULT_CONSTANTS", "PhysicsConstants", "max_micro_batch", "memory", "model_flops_per_step",
           "step_time", "tokens_per_step"]
