"""tuneplan's own estimator: FLOPs per layer from the config, the backward pass costed by method,
recompute, dequantisation, optimizer traffic, overlapped communication, an efficiency curve in the
tokens per micro-step — then, when a calibration is loaded, its fitted constants and a
gradient-boosted correction on the log-residuals."""

from __future__ import annotations

import numpy as np

from tuneplan.estimators.contract import MEMORY_PARTS, STEP_PARTS
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.memory import memory, settle_peaks
from tuneplan.physics.step import model_flops_per_step, step_time, tokens_per_step

Arrays = dict[str, np.ndarray]

MFU_CEILING = 0.80
"""No configuration is predicted above this model-FLOPs utilisation, whatever a learned correction
says (the best published large-model training MFUs are ~0.5-0.6 of dense peak; 0.8 leaves room)."""



BISECTION_STEPS = 14
"""Halvings of [0, 4097) in the search for the largest micro-batch that fits (at least log2 4097)."""
LOOKAHEAD = 5
"""Halvings evaluated per predict_arrays call when few rows are searched (31 micro-batches per row: the
14 halvings in 3 calls; one estimate's search is quickest so, 64 rows' as quick as with 4 halvings a call)."""
LOOKAHEAD_MAX_ROWS = 64
"""Rows up to which the look-ahead pays (each call's fixed cost dominates); more rows: one halving a call."""

def _tiled(a: Arrays, n: int, reps: int) -> Arrays:
    """`a` with each per-row array repeated `reps` times end to end."""
    return {key: (np.tile(v, reps) if getattr(v, "shape", ())[:1] == (n,) else v) for key, v in a.items()}


class TuneplanEstimator:
    name = "tuneplan"
    memory_parts = MEMORY_PARTS

    def __init__(self, constants: PhysicsConstants = DEFAULT_CONSTANTS, residual=None,
                 calibration_name: str | None = None, stack=None) -> None:
        self.constants = constants
        self.residual = residual  # object with .correct(arrays, physics_out) -> (throughput factor, mem factor, info)
        self.calibration_name = calibration_name
        self.stack = stack  # a StackAdapter: what a user's own first runs taught on top (None: nothing)

    @property
    def memory_model(self) -> TuneplanEstimator:
        return self

    @classmethod
    def from_payload(cls, d: dict, name: str | None = None) -> TuneplanEstimator:
        """The estimator a calibration payload describes (`TuneplanLearner.payload()`): fitted
        constants and the residual correction (no fitting code imported)."""
        from tuneplan.estimators.residual import Residual, TuneplanCorrection

        thr = Residual.from_dict(d["throughput_residual"]) if d.get("throughput_residual") else None
        mem = Residual.from_dict(d["memory_residual"]) if d.get("memory_residual") else None
        corr = TuneplanCorrection(thr, mem) if (thr or mem) else None
        stack = None
        if d.get("stack"):
            from tuneplan.estimators.stack_adapter import StackAdapter

            stack = StackAdapter.from_dict(d["stack"])
        return cls(PhysicsConstants.from_dict(d["constants"]), corr, calibration_name=name, stack=stack)

    def with_stack(self, stack) -> TuneplanEstimator:
        """The same estimator with a stack adapter on top (replacing any it had)."""
        return TuneplanEstimator(self.constants, self.residual, self.calibration_name, stack)

    def physics(self, a: Arrays) -> Arrays:
        c = self.constants
        t = step_time(a, c)
        m = memory(a, c)
        out: Arrays = {**t, **m}
        out["tokens_per_step"] = tokens_per_step(a)
        out["model_flops_per_step"] = model_flops_per_step(a)
        out["memory_gib"] = m["nvidia_smi_gib"]
        return out

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False, represents: int | None = None) -> Arrays:
        """The physics' figures with the calibration's corrections. `represents`: the rows these distinct
        configurations stand for (a table predicts its repeated configurations once; the figures do not
        depend on it)."""
        out = self.physics(a)
        if self.residual is not None or self.stack is not None:
            n = len(out["step_s"])
            thr_factor, mem_factor, info = (self.residual.correct(a, out) if self.residual is not None
                                            else (np.ones(n), np.ones(n), {}))
            offset = 0.0
            if self.stack is not None:
                thr_factor = thr_factor * self.stack.throughput_factor(a, n)
                offset = self.stack.memory_offset_gib
            self._apply_correction(a, out, thr_factor, mem_factor, offset)
            out.update(info)
        if with_max_batch:
            out["max_micro_batch"] = self.max_micro_batch(a)
        return out

    def _apply_correction(self, a: Arrays, out: Arrays, thr_factor: np.ndarray, mem_factor: np.ndarray,
                          mem_offset_gib: float) -> None:
        """Learned throughput factors and memory factors / offset applied to the physics' parts."""
        # never faster than the model FLOPs at MFU_CEILING of dense peak: a learned correction
        # must not promise what no GPU delivers
        floor = out["model_flops_per_step"] / (a["gpus"] * a["peak_flops"] * MFU_CEILING)
        thr_factor = np.minimum(thr_factor, out["step_s"] / np.maximum(floor, 1e-30))
        thr_factor = np.maximum(thr_factor, 1e-6)
        # time: every part scales with the learned factor, so the parts still add up to the step
        for k in STEP_PARTS + ("step_s", "compute_s", "communication_total_s"):
            if k in out:
                out[k] = out[k] / thr_factor
        self._apply_memory_correction(a, out, mem_factor, mem_offset_gib)

    def _apply_memory_correction(self, a: Arrays, out: Arrays, mem_factor: np.ndarray, mem_offset_gib: float) -> None:
        """The memory half of `_apply_correction` (all `fits` depends on)."""
        # memory: the byte-counted states (weights, gradients, master, optimizer) are a floor the
        # learned factor never goes below; the difference is reported as its own part
        static = (out["weights_gib"] + out["gradients_gib"] + out["gradient_buckets_gib"] + out["master_weights_gib"]
                  + out["optimizer_gib"] + out["gathered_params_gib"])
        # the backward's peak is corrected; the optimizer step's (byte-counted states and temporaries) is not
        backward = out["allocated_gib"] - out["optimizer_step_gib"]
        corrected = np.maximum(backward * mem_factor + mem_offset_gib, static + out["workspace_gib"])
        out["calibration_gib"] = corrected - backward
        # the cached blocks of other batch shapes (memory()'s variable_shape_gib) are not rescaled
        settle_peaks(out, corrected, self.constants)
        out["memory_gib"] = out["nvidia_smi_gib"]

    def max_micro_batch(self, a: Arrays, represents: int | None = None) -> np.ndarray:
        """The largest micro-batch that fits, per row. `represents`: the rows these stand for (a
        table's rows with each distinct configuration searched once): the search runs as it would
        over them all (its steps per call follow that count).
        The halvings of `physics.memory.max_micro_batch`, several per call when few rows are searched."""
        # search with the (corrected) memory: 14 halvings of [0, 4097)
        n = len(a["micro_batch"])
        rows = n if represents is None else represents
        lo = np.zeros(n)
        hi = np.full(n, 4097.0)
        done = 0
        while done < BISECTION_STEPS:
            # few rows (an estimate): LOOKAHEAD halvings per call, every micro-batch they may try at once
            k = min(LOOKAHEAD if rows <= LOOKAHEAD_MAX_ROWS else 1, BISECTION_STEPS - done)
            lo, hi = self._halvings(a, lo, hi, k)
            done += k
        return lo.astype(int)

    def _fits(self, a: Arrays) -> np.ndarray:
        """`predict_arrays(a)["fits"]`, without the throughput correction (fits does not read it)."""
        if type(self).predict_arrays is TuneplanEstimator.predict_arrays and self.residual is None and self.stack is None:
            return np.asarray(memory(a, self.constants)["fits"], dtype=bool)  # no correction: the physics' fit
        if (type(self).predict_arrays is not TuneplanEstimator.predict_arrays
                or not hasattr(self.residual or self, "memory_factor")):
            return np.asarray(self.predict_arrays(a)["fits"], dtype=bool)  # a correction of another shape
        # the memory correction's features may read the step's parts; without one, memory alone decides
        out = self.physics(a) if getattr(self.residual, "memory_reads_step", True) else memory(a, self.constants)
        n = len(out["fits"])
        mem_factor = np.ones(n)
        if self.residual is not None:
            mem_factor = self.residual.memory_factor(a, out)
        offset = self.stack.memory_offset_gib if self.stack is not None else 0.0
        self._apply_memory_correction(a, out, mem_factor, offset)
        return np.asarray(out["fits"], dtype=bool)

    def _halvings(self, a: Arrays, lo: np.ndarray, hi: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """k steps of the bisection on `fits` in one predict_arrays call: the 2^k - 1 micro-batches the
        next k steps may try (node i's children: 2i+1 when it fits, 2i+2 when not), then the walk."""
        n = len(lo)
        nodes = [(lo, hi)]
        mids = []
        for i in range(2**k - 1):
            n_lo, n_hi = nodes[i]
            mid = np.maximum(np.floor((n_lo + n_hi) / 2.0), 1.0)
            mids.append(mid)
            nodes.append((np.where(mid > n_lo, mid, n_lo), n_hi))  # fits: lo moves up
            nodes.append((n_lo, mid))  # does not fit: hi comes down
        reps = len(mids)
        trial = _tiled(a, n, reps) if reps > 1 else dict(a)
        mid_at = np.concatenate(mids)  # node i's micro-batches at [i n, (i + 1) n)
        trial["micro_batch"] = mid_at
        ok = self._fits(trial)
        if len(ok) != reps * n:  # a fit that did not depend on the micro-batch
            ok = ok & np.full(reps * n, True)
        node = np.zeros(n).astype(int)
        cols = np.arange(n)
        for _ in range(k):
            at = node * n + cols
            fits, mid = ok[at], mid_at[at]
            lo = np.where(fits & (mid > lo), mid, lo)
            hi = np.where(~fits, mid, hi)
            node = 2 * node + np.where(fits, 1, 2)
        return lo, hi

    def assumptions(self, job=None) -> list[str]:
        c = self.constants
        base = [
            "FLOPs counted per layer from the model config: attention projections (GQA), the quadratic "
            "attention term, MLP or gated MLP, MoE top-k experts plus router, and the LM head.",
            "Backward = 2x forward for trained weights; LoRA-family methods skip frozen weights' "
            "gradients (input gradients only) and add the adapters' own FLOPs.",
            f"Achieved efficiency = {c.mfu_max:.2f} x t/(t+{c.tokens_half:.0f}) x h/(h+{c.hidden_half:.0f}) "
            "of dense peak (t: tokens per GPU micro-step, h: hidden width per tensor-parallel rank), times "
            "the GPU's measured matmul efficiency / 0.80 where the catalog has one (0.80 otherwise).",
            "Optimizer time from the bytes its states move over memory bandwidth; data-parallel "
            f"communication over ring collectives, {c.overlap_fraction:.0%} overlappable with backward.",
            "Memory: weights by storage, gradients, fp32 master and optimizer states (sharded as the "
            "sharding divides them), activations per layer, logits with their fp32 loss copy, "
            f"CUDA context {c.cuda_context_gib:.2f} GiB and {c.allocator_overhead:.0%} allocator overhead.",
        ]
        if self.calibration_name:
            consts = "fitted constants" if self.constants != DEFAULT_CONSTANTS else "the physics' prior constants"
            corr = "a residual correction" if self.residual is not None else "no residual correction"
            if getattr(getattr(self.residual, "thr", None), "value_share", 0.0) > 0.0:
                share = self.residual.thr.value_share
                corr += f" (throughput: {share:.0%} of it the nearest measured run's error, the rest boosted trees')"
            base.append(f"Calibration '{self.calibration_name}': {consts} and {corr}.")
        if self.stack is not None:
            base.append(f"Adapted to your own runs ({self.stack.describe()}).")
        if not self.calibration_name and self.stack is None:
            base.append("Uncalibrated physics (prior constants, not fitted to measurements).")
        if job is not None and job.is_lora_family:
            kernels = c.dora_kernels_per_module if job.method == "dora" else c.lora_kernels_per_module
            base.append(
                f"Adapters: {kernels:.0f} small kernels per adapted module per micro-step at "
                f"{c.kernel_launch_s * 1e6:.1f} us each, and {c.adapter_passes:.1f} element-wise passes "
                "over each adapted module's input and output per token.")
        return base


class BorrowsMemory:
    """For estimators that predict step time only (`time_arrays`, their own model): `predict_arrays`
    adds tuneplan's uncalibrated memory model's figures to it."""

    constants: PhysicsConstants = DEFAULT_CONSTANTS
    memory_parts = MEMORY_PARTS
    MEMORY_ASSUMPTION = "Memory figures from tuneplan's uncalibrated memory model (this estimator has none)."

    @property
    def memory_model(self) -> TuneplanEstimator:
        return TuneplanEstimator()

    def time_arrays(self, a: Arrays) -> Arrays:
        raise NotImplementedError

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False) -> Arrays:
        m = memory(a, self.constants)
        return {**m, "memory_gib": m["nvidia_smi_gib"], **self.time_arrays(a)}
