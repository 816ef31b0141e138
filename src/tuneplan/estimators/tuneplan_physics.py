"""tuneplan's own estimator: the physics (physics/step.py, physics/memory.py) with a calibration's fitted
constants and gradient-boosted correction on the log-residuals. `fit` learns both from measured runs: the
named constants by bounded least squares on log-error with an L2 pull to their priors (every source
weighing the same), then the residual correction (`residual_fit`)."""

from __future__ import annotations

import math

import numpy as np

from tuneplan.estimators.contract import MEMORY_PARTS, STEP_PARTS
from tuneplan.physics.comm_domains import domain_seconds
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants
from tuneplan.physics.memory import backward_peak_gib, memory, settle_peaks
from tuneplan.physics.run import batch_lengths
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


def source_centring(sources: np.ndarray | None):
    """A function removing each source's own mean log-error, relative to the mean over sources, from the
    rows' log-errors (None with fewer than two sources): the throughput constants are fitted on how
    throughput moves with the work's shape, not on each stack's overall offset (one number, which a new
    stack's first runs give: `tuneplan.learn.adapt`)."""
    if sources is None:
        return None
    _, inv, counts = np.unique(np.asarray(sources).astype(str), return_inverse=True, return_counts=True)
    if len(counts) < 2:
        return None
    inv = np.asarray(inv).reshape(-1)

    def centre(e: np.ndarray) -> np.ndarray:
        means = np.bincount(inv, weights=e, minlength=len(counts)) / counts
        return e - (means - means.mean())[inv]

    return centre


def memory_for_kind(mem: dict, kinds: list[str]) -> np.ndarray:
    """The predicted peak in the measurement's own terms: torch allocated, reserved, or nvidia-smi
    (reserved + CUDA context; also used when the kind is unknown)."""
    kinds = np.asarray(kinds, dtype=object)
    return np.select([kinds == "allocated", kinds == "reserved"],
                     [np.asarray(mem[k], dtype=float) for k in ("allocated_gib", "reserved_gib")],
                     np.asarray(mem["nvidia_smi_gib"], dtype=float))


def _physics_with(a: Arrays, c: PhysicsConstants) -> Arrays:
    return TuneplanEstimator(c).physics(a)


class TuneplanEstimator:
    name = "tuneplan"
    memory_parts = MEMORY_PARTS

    def __init__(self, constants: PhysicsConstants = DEFAULT_CONSTANTS, residual=None,
                 calibration_name: str | None = None, stack=None, max_nfev: int = 150, shrink: tuple | None = None,
                 memory: bool = True, pull: float | None | bool = False) -> None:
        self.constants = constants
        self.residual = residual  # object with .correct(arrays, physics_out) -> (throughput factor, mem factor, info)
        self.calibration_name = calibration_name
        self.stack = stack  # a StackAdapter: what a user's own first runs taught on top (None: nothing)
        # how `fit` fits: the least-squares budget for the constants; the residuals' shares ((far, near, tau)
        # throughput, memory; None: chosen on held-out data); memory (False: throughput only, the interval
        # cross-fits'); the throughput constants' pull (False: chosen on held-out sources)
        self.max_nfev, self.shrink, self.memory, self.pull = max_nfev, shrink, memory, pull

    @property
    def memory_model(self) -> TuneplanEstimator:
        return self

    @classmethod
    def from_payload(cls, d: dict, name: str | None = None) -> TuneplanEstimator:
        """The estimator a calibration payload describes (`payload()`): fitted
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

    def _fit_constants(self, a: dict, y: np.ndarray, names: dict, target: str, kinds=None,
                       weight: float | None = None, sources: np.ndarray | None = None,
                       max_nfev: int | None = None) -> PhysicsConstants:
        from scipy.optimize import least_squares

        from tuneplan.estimators import residual_fit as rf

        base = self.constants
        keys = list(names)
        x0 = np.array([math.log(getattr(base, k)) if getattr(base, k) > 0 else math.log(names[k][0] + 1e-3)
                       for k in keys])
        prior = np.array([math.log(max(getattr(DEFAULT_CONSTANTS, k), names[k][0])) for k in keys])
        if weight is None:
            weight = rf.L2_PRIOR_WEIGHT if target == "throughput" else rf.MEMORY_PRIOR_WEIGHT
        pull = np.sqrt(weight * np.array([names[k][2] if len(names[k]) > 2 else 1.0 for k in keys]))
        lo = np.array([math.log(max(names[k][0], 1e-9)) for k in keys])
        hi = np.array([math.log(names[k][1]) for k in keys])
        x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
        row_w = rf.source_weights(sources, len(y))
        centre = source_centring(sources) if target == "throughput" else None

        def consts(x):
            return base.with_(**{k: float(math.exp(v)) for k, v in zip(keys, x, strict=True)})

        def resid(x):
            out = _physics_with(a, consts(x))
            pred = (out["tokens_per_step"] / out["step_s"]) if target == "throughput" else memory_for_kind(out, kinds)
            e = rf._log(pred) - rf._log(y)
            if centre is not None:
                e = centre(e)
            return np.concatenate([e * row_w, pull * (x - prior)])

        sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", max_nfev=max_nfev or self.max_nfev, x_scale="jac",
                            ftol=1e-5, xtol=1e-5, gtol=1e-6)
        return consts(sol.x)

    def _throughput_weight(self, a: dict, y: np.ndarray, sources: np.ndarray) -> float | None:
        """The throughput constants' prior pull (None: keep the priors), chosen on the training sources alone:
        each THROUGHPUT_PRIOR_GRID candidate fitted with INNER_SOURCE_GROUPS groups of them held out in turn,
        scored by the mean over held-out sources of their median absolute log error; ties to the stronger pull."""
        from tuneplan.estimators import residual_fit as rf

        src = np.asarray(sources).astype(str)
        uniq = sorted(set(src.tolist()))
        if len(uniq) < 3:
            return rf.L2_PRIOR_WEIGHT
        group = {s: i % rf.INNER_SOURCE_GROUPS for i, s in enumerate(uniq)}
        g = np.array([group[s] for s in src])
        per_source: dict = {w: [] for w in rf.THROUGHPUT_PRIOR_GRID}
        for k in sorted(set(g.tolist())):
            test = g == k
            if (~test).sum() < rf.MIN_ROWS:
                continue
            tr = {key: v[~test] for key, v in a.items()}
            te = {key: v[test] for key, v in a.items()}
            for w in rf.THROUGHPUT_PRIOR_GRID:
                c = self.constants if w is None else self._fit_constants(
                    tr, y[~test], rf.THROUGHPUT_CONSTANTS, "throughput", weight=w, sources=src[~test],
                    max_nfev=rf.INNER_NFEV)
                out = _physics_with(te, c)
                err = np.abs(rf._log(out["tokens_per_step"] / out["step_s"]) - rf._log(y[test]))
                per_source[w].extend(float(np.median(err[src[test] == s])) for s in sorted(set(src[test].tolist())))
        scores = {w: float(np.mean(e)) for w, e in per_source.items() if e}
        if not scores:
            return rf.L2_PRIOR_WEIGHT
        order = {w: i for i, w in enumerate(rf.THROUGHPUT_PRIOR_GRID)}  # later entries pull harder
        best = min(scores, key=lambda w: (round(scores[w], 6), -order[w]))
        # the scores at the 6 digits they are compared at: their last bits move with the BLAS threads'
        # summation order, and the file is regenerated byte for byte
        self.choices_ = {"throughput_pull": {"chosen": best, "scores": {str(k): float(f"{v:.6g}") for k, v in scores.items()}}}
        return best

    def _memory_weight(self, a: dict, y: np.ndarray, kinds: list[str], sources: np.ndarray) -> float | None:
        """The memory constants' prior pull, chosen by leave-one-source-out error among MEMORY_PRIOR_GRID
        (None: keep the priors): the pull that transfers best across sources wins."""
        from tuneplan.estimators import residual_fit as rf

        uniq = sorted(set(np.asarray(sources).tolist()))
        if len(uniq) < 3:
            return rf.MEMORY_PRIOR_WEIGHT
        base = self.constants
        errs: dict = {w: [] for w in rf.MEMORY_PRIOR_GRID}
        for src in uniq:
            test = np.asarray(sources) == src
            if (~test).sum() < rf.MIN_ROWS:
                continue
            tr = {k: v[~test] for k, v in a.items()}
            te = {k: v[test] for k, v in a.items()}
            k_tr = [k for k, t in zip(kinds, test, strict=True) if not t]
            k_te = [k for k, t in zip(kinds, test, strict=True) if t]
            for w in rf.MEMORY_PRIOR_GRID:
                c = base if w is None else self._fit_constants(tr, y[~test], rf.MEMORY_CONSTANTS, "memory", k_tr, w,
                                                               np.asarray(sources)[~test])
                pred = memory_for_kind(_physics_with(te, c), k_te)
                errs[w].extend(np.abs(rf._log(pred) - rf._log(y[test])).tolist())
        scores = {w: float(np.median(e)) for w, e in errs.items() if e}
        return min(scores, key=lambda w: (scores[w], 0 if w is None else 1)) if scores else rf.MEMORY_PRIOR_WEIGHT

    def fit(self, X: Arrays, y: np.ndarray, groups: np.ndarray) -> TuneplanEstimator:
        """Fit on X (the physics' arrays, `_mem_kinds`: what each measured peak counts), y (tokens/s, peak
        GiB; NaN where not measured) and groups (sources). Fitted: `constants`, `residual`, `thr_residual_`,
        `mem_residual_`, `thr_pull_`, `notes_`, `choices_`."""
        from tuneplan.estimators import residual_fit as rf
        from tuneplan.estimators.features import MEMORY_FEATURES, THROUGHPUT_FEATURES, feature_matrix
        from tuneplan.estimators.residual import TuneplanCorrection

        tokens_per_s, peak_mem_gib = np.asarray(y, dtype=float).T
        source, mem_kind = np.asarray(groups), list(X.get("_mem_kinds", []))
        thr_mask = np.isfinite(tokens_per_s)
        mem_mask = np.isfinite(peak_mem_gib) if self.memory else np.zeros(len(tokens_per_s), dtype=bool)
        if thr_mask.sum() + mem_mask.sum() < rf.MIN_ROWS:
            raise rf.NotEnoughData(f"tuneplan learner: {int(thr_mask.sum())} throughput and "
                                   f"{int(mem_mask.sum())} memory rows; at least {rf.MIN_ROWS} needed")
        self.constants, self.residual, self.thr_residual_, self.mem_residual_ = DEFAULT_CONSTANTS, None, None, None
        self.thr_pull_, self.notes_, self.choices_ = None, [], {}
        a_all = {k: v for k, v in X.items() if k != "_mem_kinds"}
        if thr_mask.sum() >= rf.MIN_ROWS:
            a = {k: v[thr_mask] for k, v in a_all.items()}
            y, src = tokens_per_s[thr_mask], source[thr_mask]
            weight = self.pull if self.pull is not False else self._throughput_weight(a, y, src)
            self.thr_pull_ = weight
            if weight is not None:
                self.constants = self._fit_constants(a, y, rf.THROUGHPUT_CONSTANTS, "throughput", weight=weight,
                                                     sources=src)
            else:
                self.notes_.append("throughput constants kept at their priors (fitted ones did worse on held-out "
                                   "training sources)")
        else:
            self.notes_.append("throughput constants not fitted (too few rows)")
        if mem_mask.sum() >= rf.MIN_ROWS:
            a = {k: v[mem_mask] for k, v in a_all.items()}
            kinds = [k for k, m in zip(mem_kind, mem_mask, strict=True) if m]
            y = peak_mem_gib[mem_mask]
            weight = self._memory_weight(a, y, kinds, source[mem_mask])
            if weight is not None:
                self.constants = self._fit_constants(a, y, rf.MEMORY_CONSTANTS, "memory", kinds, weight,
                                                     source[mem_mask])
            else:
                self.notes_.append("memory constants kept at their priors (fitted ones did worse on held-out sources)")
        else:
            self.notes_.append("memory constants not fitted (too few rows)")
        out = _physics_with(a_all, self.constants)
        thr_sources = len(set(np.asarray(source[thr_mask]).astype(str).tolist()))
        if thr_mask.sum() >= rf.MIN_RESIDUAL_ROWS and thr_sources > rf.RESIDUAL_MAX_SOURCES:
            self.notes_.append(f"throughput residual not fitted: rows of {thr_sources} sources (a calibration for "
                               "a new stack keeps the physics' shape; fitted across sources it beat the physics on "
                               "fewer than half of the held-out ones)")
        elif thr_mask.sum() >= rf.MIN_RESIDUAL_ROWS:
            X = feature_matrix(a_all, out, THROUGHPUT_FEATURES)[thr_mask]
            pred = (out["tokens_per_step"] / out["step_s"])[thr_mask]
            self.thr_residual_ = rf.fit_residual(X, rf._log(tokens_per_s[thr_mask]) - rf._log(pred),
                                                 THROUGHPUT_FEATURES, source[thr_mask],
                                                 self.shrink[0] if self.shrink else None,
                                                 neighbour_share=rf.NEIGHBOUR_SHARE)
        mem_sources = len(set(np.asarray(source[mem_mask]).astype(str).tolist()))
        if mem_mask.sum() >= rf.MIN_RESIDUAL_ROWS and mem_sources > rf.RESIDUAL_MAX_SOURCES:
            self.notes_.append(f"memory residual not fitted: rows of {mem_sources} sources (a calibration for a new "
                               "stack keeps the physics' memory; fitted across sources it did worse on held-out ones)")
        elif mem_mask.sum() >= rf.MIN_RESIDUAL_ROWS:
            X = feature_matrix(a_all, out, MEMORY_FEATURES)[mem_mask]
            kinds = [k for k, m in zip(mem_kind, mem_mask, strict=True) if m]
            pred = memory_for_kind({k: v[mem_mask] for k, v in out.items()}, kinds)
            self.mem_residual_ = rf.fit_residual(X, rf._log(peak_mem_gib[mem_mask]) - rf._log(pred), MEMORY_FEATURES,
                                                 source[mem_mask], self.shrink[1] if self.shrink else None)
        if self.thr_residual_ is not None or self.mem_residual_ is not None:
            self.residual = TuneplanCorrection(self.thr_residual_, self.mem_residual_)
        return self

    def shrinks(self) -> tuple:
        """(far, near, tau, tree capacity) of the throughput and the memory residuals."""
        def one(r):
            return (r.shrink, r.near, r.tau, r.capacity) if r else (0.0, 0.0, 1.0)

        return (one(self.thr_residual_), one(self.mem_residual_))

    def payload(self) -> dict:
        return {
            "constants": self.constants.to_dict(),
            "throughput_residual": self.thr_residual_.to_dict() if self.thr_residual_ else None,
            "memory_residual": self.mem_residual_.to_dict() if self.mem_residual_ else None,
            "notes": self.notes_,
            "choices": self.choices_,
        }

    def with_stack(self, stack) -> TuneplanEstimator:
        """The same estimator with a stack adapter on top (replacing any it had)."""
        return TuneplanEstimator(self.constants, self.residual, self.calibration_name, stack)

    def physics(self, a: Arrays) -> Arrays:
        c = self.constants
        run, mean = batch_lengths(a)  # the length each micro-step computes; memory at the cap
        t = step_time(run, c)
        m = memory(a, c)
        out: Arrays = {**t, **m}
        out["tokens_per_step"] = tokens_per_step({**run, "seq_len": mean})
        out["model_flops_per_step"] = model_flops_per_step(run)
        out["memory_gib"] = m["nvidia_smi_gib"]
        return out

    def predict_arrays(self, a: Arrays, with_max_batch: bool = False) -> Arrays:
        """The physics' figures with the calibration's corrections."""
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
        for k in STEP_PARTS + ("step_s", "compute_s", "communication_total_s") + domain_seconds(out):
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
        backward = backward_peak_gib(out)
        corrected = np.maximum(backward * mem_factor + mem_offset_gib, static + out["workspace_gib"])
        out["calibration_gib"] = corrected - backward
        # the cached blocks of other batch shapes (memory()'s variable_shape_gib) are not rescaled
        settle_peaks(out, corrected, self.constants)
        out["memory_gib"] = out["nvidia_smi_gib"]

    def max_micro_batch(self, a: Arrays) -> np.ndarray:
        """The largest micro-batch that fits, per row, by the (corrected) memory's halvings of [0, 4097),
        several per call when few rows are searched."""
        n = len(a["micro_batch"])
        lo = np.zeros(n)
        hi = np.full(n, 4097.0)
        done = 0
        while done < BISECTION_STEPS:
            # few rows (an estimate): LOOKAHEAD halvings per call, every micro-batch they may try at once
            k = min(LOOKAHEAD if n <= LOOKAHEAD_MAX_ROWS else 1, BISECTION_STEPS - done)
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
        offset = self.stack.memory_offset_gib if self.stack is not None else 0.0
        self._apply_memory_correction(a, out, self.residual.memory_factor(a, out), offset)
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
        trial = {key: (np.tile(v, reps) if getattr(v, "shape", ())[:1] == (n,) else v) for key, v in a.items()}
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
