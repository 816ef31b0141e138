"""The tuneplan learner: the physics' named constants fitted by bounded least squares on log-error with
an L2 pull to their priors (every source weighing the same), then the residual correction."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from tuneplan.estimators.features import (
    MEMORY_FEATURES,
    THROUGHPUT_FEATURES,
    feature_matrix,
)
from tuneplan.estimators.residual import Residual, TuneplanCorrection
from tuneplan.estimators.residual_fit import (
    INNER_NFEV,
    INNER_SOURCE_GROUPS,
    L2_PRIOR_WEIGHT,
    MEMORY_CONSTANTS,
    MEMORY_PRIOR_GRID,
    MEMORY_PRIOR_WEIGHT,
    MIN_RESIDUAL_ROWS,
    MIN_ROWS,
    NEIGHBOUR_SHARE,
    RESIDUAL_MAX_SOURCES,
    THROUGHPUT_CONSTANTS,
    THROUGHPUT_PRIOR_GRID,
    NotEnoughData,
    _log,
    fit_residual,
    source_weights,
)
from tuneplan.learn.dataset import arrays_for
from tuneplan.learn.measured import TrainingSet
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants


def source_centring(sources: np.ndarray | None):
    """A function removing each source's own mean log-error, relative to the mean over sources, from the
    log-errors of the rows (None with fewer than two sources). The throughput constants are fitted on
    what the sources share — how throughput moves with the work's shape — while each source's overall
    offset (its stack: framework, kernels, data loader, clocks) is left out: a new stack's offset is one
    number, which its first runs give (`tuneplan.learn.adapt`), and fitted into the constants it bent
    their shape (two sources 1.5x and 0.7x off: 13% by source after three runs revealed, against 1.1%
    with the shape kept). The mean level over sources stays in the constants."""
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


class TuneplanLearner:
    name = "tuneplan"

    def __init__(self, max_nfev: int = 150, shrink: tuple | None = None,
                 memory: bool = True, pull: float | None | bool = False) -> None:
        self.constants = DEFAULT_CONSTANTS
        self.thr_residual: Residual | None = None
        self.mem_residual: Residual | None = None
        self.notes: list[str] = []
        self.max_nfev = max_nfev  # least-squares budget for the constants
        self.fixed_shrink = shrink  # ((far, near, tau) throughput, memory); None: chosen on held-out data
        self.memory = memory  # False: throughput only (the interval cross-fits of throughput)
        self.fixed_pull: float | None | bool = pull  # the throughput pull; False: chosen on held-out sources
        self.thr_pull_: float | None = None  # the pull used (None: priors kept)
        self.choices: dict = {}  # what was chosen on held-out training sources, with the scores

    # physics with given constants -> predicted throughput / memory on the training arrays
    @staticmethod
    def _phys(a: dict, c: PhysicsConstants) -> dict:
        from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

        return TuneplanEstimator(c).physics(a)

    @staticmethod
    def _mem_for_kind(out: dict, kinds: list[str]) -> np.ndarray:
        from tuneplan.learn.predict_table import memory_for_kind

        return memory_for_kind(out, kinds)

    def _fit_constants(self, a: dict, y: np.ndarray, names: dict, target: str, kinds=None,
                       weight: float | None = None, sources: np.ndarray | None = None,
                       max_nfev: int | None = None) -> PhysicsConstants:
        from scipy.optimize import least_squares

        base = self.constants
        keys = list(names)
        x0 = np.array([math.log(getattr(base, k)) if getattr(base, k) > 0 else math.log(names[k][0] + 1e-3)
                       for k in keys])
        prior = np.array([math.log(max(getattr(DEFAULT_CONSTANTS, k), names[k][0])) for k in keys])
        if weight is None:
            weight = L2_PRIOR_WEIGHT if target == "throughput" else MEMORY_PRIOR_WEIGHT
        pull = np.sqrt(weight * np.array([names[k][2] if len(names[k]) > 2 else 1.0 for k in keys]))
        lo = np.array([math.log(max(names[k][0], 1e-9)) for k in keys])
        hi = np.array([math.log(names[k][1]) for k in keys])
        x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
        row_w = source_weights(sources, len(y))
        centre = source_centring(sources) if target == "throughput" else None

        def consts(x):
            return base.with_(**{k: float(math.exp(v)) for k, v in zip(keys, x, strict=True)})

        def resid(x):
            out = self._phys(a, consts(x))
            pred = (out["tokens_per_step"] / out["step_s"]) if target == "throughput" else self._mem_for_kind(out, kinds)
            e = _log(pred) - _log(y)
            if centre is not None:
                e = centre(e)
            return np.concatenate([e * row_w, pull * (x - prior)])

        sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", max_nfev=max_nfev or self.max_nfev, x_scale="jac",
                            ftol=1e-5, xtol=1e-5, gtol=1e-6)
        return consts(sol.x)

    def _throughput_weight(self, a: dict, y: np.ndarray, sources: np.ndarray) -> float | None:
        """The throughput constants' prior pull, chosen on the training sources alone: groups of them held
        out in turn (INNER_SOURCE_GROUPS), each candidate of THROUGHPUT_PRIOR_GRID fitted on the others
        and scored by the mean over held-out sources of their median absolute log error (every source
        weighing the same). None: the priors transfer best, keep them. Ties go to the stronger pull."""
        src = np.asarray(sources).astype(str)
        uniq = sorted(set(src.tolist()))
        if len(uniq) < 3:
            return L2_PRIOR_WEIGHT
        group = {s: i % INNER_SOURCE_GROUPS for i, s in enumerate(uniq)}
        g = np.array([group[s] for s in src])
        per_source: dict = {w: [] for w in THROUGHPUT_PRIOR_GRID}
        for k in sorted(set(g.tolist())):
            test = g == k
            if (~test).sum() < MIN_ROWS:
                continue
            tr = {key: v[~test] for key, v in a.items()}
            te = {key: v[test] for key, v in a.items()}
            for w in THROUGHPUT_PRIOR_GRID:
                c = self.constants if w is None else self._fit_constants(
                    tr, y[~test], THROUGHPUT_CONSTANTS, "throughput", weight=w, sources=src[~test],
                    max_nfev=INNER_NFEV)
                out = self._phys(te, c)
                err = np.abs(_log(out["tokens_per_step"] / out["step_s"]) - _log(y[test]))
                per_source[w].extend(float(np.median(err[src[test] == s])) for s in sorted(set(src[test].tolist())))
        scores = {w: float(np.mean(e)) for w, e in per_source.items() if e}
        if not scores:
            return L2_PRIOR_WEIGHT
        order = {w: i for i, w in enumerate(THROUGHPUT_PRIOR_GRID)}  # later entries pull harder
        best = min(scores, key=lambda w: (round(scores[w], 6), -order[w]))
        # the scores at the 6 digits they are compared at: their last bits move with the BLAS threads'
        # summation order, and the file is regenerated byte for byte
        self.choices["throughput_pull"] = {"chosen": best, "scores": {str(k): float(f"{v:.6g}") for k, v in scores.items()}}
        return best

    def _memory_weight(self, a: dict, y: np.ndarray, kinds: list[str], sources: np.ndarray) -> float | None:
        """The memory constants' prior pull, chosen by leave-one-source-out error among
        MEMORY_PRIOR_GRID (None: keep the priors): a calibration is applied to machines and frameworks it
        has not seen, so the pull that transfers best across sources wins."""
        uniq = sorted(set(np.asarray(sources).tolist()))
        if len(uniq) < 3:
            return MEMORY_PRIOR_WEIGHT
        base = self.constants
        errs: dict = {w: [] for w in MEMORY_PRIOR_GRID}
        for src in uniq:
            test = np.asarray(sources) == src
            if (~test).sum() < MIN_ROWS:
                continue
            tr = {k: v[~test] for k, v in a.items()}
            te = {k: v[test] for k, v in a.items()}
            k_tr = [k for k, t in zip(kinds, test, strict=True) if not t]
            k_te = [k for k, t in zip(kinds, test, strict=True) if t]
            for w in MEMORY_PRIOR_GRID:
                c = base if w is None else self._fit_constants(tr, y[~test], MEMORY_CONSTANTS, "memory", k_tr, w,
                                                               np.asarray(sources)[~test])
                pred = self._mem_for_kind(self._phys(te, c), k_te)
                errs[w].extend(np.abs(_log(pred) - _log(y[test])).tolist())
        scores = {w: float(np.median(e)) for w, e in errs.items() if e}
        return min(scores, key=lambda w: (scores[w], 0 if w is None else 1)) if scores else MEMORY_PRIOR_WEIGHT

    def fit(self, ts: TrainingSet) -> TuneplanLearner:
        thr_mask = ts.has_throughput
        mem_mask = ts.has_memory if self.memory else np.zeros(len(ts), dtype=bool)
        if thr_mask.sum() + mem_mask.sum() < MIN_ROWS:
            raise NotEnoughData(f"tuneplan learner: {int(thr_mask.sum())} throughput and {int(mem_mask.sum())} "
                                f"memory rows; at least {MIN_ROWS} needed")
        a_all = arrays_for(ts.configs)
        if thr_mask.sum() >= MIN_ROWS:
            a = {k: v[thr_mask] for k, v in a_all.items()}
            y, src = ts.tokens_per_s[thr_mask], ts.source[thr_mask]
            weight = self.fixed_pull if self.fixed_pull is not False else self._throughput_weight(a, y, src)
            self.thr_pull_ = weight
            if weight is not None:
                self.constants = self._fit_constants(a, y, THROUGHPUT_CONSTANTS, "throughput", weight=weight,
                                                     sources=src)
            else:
                self.notes.append("throughput constants kept at their priors (fitted ones did worse on held-out "
                                  "training sources)")
        else:
            self.notes.append("throughput constants not fitted (too few rows)")
        if mem_mask.sum() >= MIN_ROWS:
            a = {k: v[mem_mask] for k, v in a_all.items()}
            kinds = [k for k, m in zip(ts.mem_kind, mem_mask, strict=True) if m]
            y = ts.peak_mem_gib[mem_mask]
            weight = self._memory_weight(a, y, kinds, ts.source[mem_mask])
            if weight is not None:
                self.constants = self._fit_constants(a, y, MEMORY_CONSTANTS, "memory", kinds, weight,
                                                     ts.source[mem_mask])
            else:
                self.notes.append("memory constants kept at their priors (fitted ones did worse on held-out sources)")
        else:
            self.notes.append("memory constants not fitted (too few rows)")
        out = self._phys(a_all, self.constants)
        thr_sources = len(set(np.asarray(ts.source[thr_mask]).astype(str).tolist()))
        if thr_mask.sum() >= MIN_RESIDUAL_ROWS and thr_sources > RESIDUAL_MAX_SOURCES:
            self.notes.append(f"throughput residual not fitted: rows of {thr_sources} sources (a calibration for "
                              "a new stack keeps the physics' shape; fitted across sources it beat the physics on "
                              "fewer than half of the held-out ones)")
        elif thr_mask.sum() >= MIN_RESIDUAL_ROWS:
            X = feature_matrix(a_all, out, THROUGHPUT_FEATURES)[thr_mask]
            pred = (out["tokens_per_step"] / out["step_s"])[thr_mask]
            self.thr_residual = fit_residual(X, _log(ts.tokens_per_s[thr_mask]) - _log(pred), THROUGHPUT_FEATURES,
                                             ts.source[thr_mask], self.fixed_shrink[0] if self.fixed_shrink else None,
                                             neighbour_share=NEIGHBOUR_SHARE)
        mem_sources = len(set(np.asarray(ts.source[mem_mask]).astype(str).tolist()))
        if mem_mask.sum() >= MIN_RESIDUAL_ROWS and mem_sources > RESIDUAL_MAX_SOURCES:
            self.notes.append(f"memory residual not fitted: rows of {mem_sources} sources (a calibration for a new "
                              "stack keeps the physics' memory; fitted across sources it did worse on held-out ones)")
        elif mem_mask.sum() >= MIN_RESIDUAL_ROWS:
            X = feature_matrix(a_all, out, MEMORY_FEATURES)[mem_mask]
            kinds = [k for k, m in zip(ts.mem_kind, mem_mask, strict=True) if m]
            pred = self._mem_for_kind({k: v[mem_mask] for k, v in out.items()}, kinds)
            self.mem_residual = fit_residual(X, _log(ts.peak_mem_gib[mem_mask]) - _log(pred), MEMORY_FEATURES,
                                             ts.source[mem_mask], self.fixed_shrink[1] if self.fixed_shrink else None)
        return self

    def estimator(self, name: str | None = None):
        from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

        corr = None
        if self.thr_residual is not None or self.mem_residual is not None:
            corr = TuneplanCorrection(self.thr_residual, self.mem_residual)
        return TuneplanEstimator(self.constants, corr, calibration_name=name or "fitted")

    def shrinks(self) -> tuple:
        """(far, near, tau, tree capacity) of the throughput and the memory residuals."""
        def one(r):
            return (r.shrink, r.near, r.tau, r.capacity) if r else (0.0, 0.0, 1.0)

        return (one(self.thr_residual), one(self.mem_residual))

    def payload(self) -> dict:
        return {
            "constants": {f.name: getattr(self.constants, f.name) for f in fields(PhysicsConstants)},
            "throughput_residual": self.thr_residual.to_dict() if self.thr_residual else None,
            "memory_residual": self.mem_residual.to_dict() if self.mem_residual else None,
            "notes": self.notes,
            "choices": self.choices,
        }
