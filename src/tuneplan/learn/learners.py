"""The learners, one fit/predict contract (scikit-learn style): `fit(training_set)`, then
`estimator()` gives an estimator with `predict_arrays`; `payload()` is what a calibration file
stores, read back by the estimator's own `from_payload` (so estimating never imports this module).

- `tuneplan`: fit the physics' named constants (efficiency curve, overheads, communication,
  dequantisation; memory overheads) on log-error with an L2 pull to their priors, then a
  gradient-boosted correction on the log-residuals over physical features, shrunk back toward the
  physics outside the range it was trained on.
- `kavier`: the Kavier seed's two tiers — global scales by Powell with an L2 pull toward 1 (weight
  chosen on a validation split), then per (model, method, GPU, count) median ratios.
- `xia`: Eq. (2) fitted per (model, GPU, dataset) with scipy.
- `slst`: a scaling law in parameters, tokens and the other size variables, then gradient boosting
  on its log-residuals (the SLST seed).
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from tuneplan.errors import TuneplanError
from tuneplan.estimators.features import (
    MEMORY_FEATURES,
    THROUGHPUT_FAR_FEATURES,
    THROUGHPUT_FEATURES,
    feature_matrix,
)
from tuneplan.estimators.residual import Residual, TuneplanCorrection, nearest_distance
from tuneplan.estimators.slst import SLST_GB_FEATURES, SLST_LAW_FEATURES, SLSTEstimator, slst_features
from tuneplan.estimators.trees import export_hgb
from tuneplan.learn.dataset import arrays_for
from tuneplan.learn.measured import TrainingSet
from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants

MIN_ROWS = 8
"""Fewer measured rows than this: a learner refuses to fit (the physics result stands)."""
L2_PRIOR_WEIGHT = 0.0005
"""tuneplan learner: weight of the pull of each fitted constant's log toward its prior, against the
mean squared log error of the rows: a weak prior (about the noise variance, 0.1^2, over a prior spread
of a factor e, over a few tens of rows). With 0.02 the priors, set for datacenter GPUs, held the
constants away from what a CPU's 24 profiled rows showed (closed loop: 7-8% held-out error against
4-5%), and the reference data's random-split error did not depend on it (5.1-5.4%, seed 0)."""
MEMORY_PRIOR_WEIGHT = 0.005
"""The same pull for the memory constants when there are fewer than three memory sources to choose by.
With more, the pull is chosen by leave-one-source-out error among MEMORY_PRIOR_GRID, priors kept
included: memory sources disagree more than throughput sources (the frameworks hold different loss
buffers), and on the reference data the fitted memory constants transferred worse to a source they had
not seen than the byte-counted priors (by-source memory MdAPE 19.3% fitted at 0.005, 12.8% chosen)."""
HGB_PARAMS = {"max_iter": 150, "learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 8,
              "l2_regularization": 1.0, "early_stopping": False, "random_state": 0}
"""Gradient-boosting settings for the residual models (deterministic: no early stopping)."""
CAPACITY_GRID = tuple({"max_iter": n, "min_samples_leaf": leaf, "loss": loss}
                      for loss in ("squared_error", "absolute_error") for n, leaf in ((150, 8), (300, 4)))
"""Candidate residual trees over HGB_PARAMS: size (rounds, smallest leaf) and loss (squared error, or
absolute error, which a few rows far off — a source counting something else — cannot pull), chosen in
each fit on out-of-fold errors of the training rows (never on rows held out from the fit): see
fit_residual."""
MEMORY_PRIOR_GRID = (0.0005, 0.005, 0.02, None)
"""Candidate pulls for the memory constants, chosen by leave-one-source-out error (None: priors kept)."""
LOOSE_PRIOR = 0.01
"""Relative pull toward the prior of the constants that vary by an order of magnitude between devices."""
MIN_RESIDUAL_ROWS = 30
"""Rows needed before a residual model is fitted on top of the constants."""

THROUGHPUT_CONSTANTS = {
    "mfu_max": (0.05, 2.0), "tokens_half": (16.0, 65536.0), "hidden_half": (16.0, 65536.0),
    "overhead_s_per_layer": (1e-6, 0.05), "comm_efficiency": (0.05, 1.0), "overlap_fraction": (0.0, 0.99),
    "dequant_bytes_nf4": (0.5, 40.0), "dequant_bytes_gptq": (0.25, 40.0),
    "loss_bytes_per_logit": (2.0, 200.0), "elementwise_passes": (0.1, 30.0),
    "adapter_passes": (0.1, 30.0), "dora_bytes_per_weight": (0.1, 200.0),
    # device-dependent by an order of magnitude (GPU launch ~5 us, CPU op dispatch ~20 us; fused versus
    # for-each AdamW): a loose prior
    "kernel_launch_s": (1e-7, 1e-3, LOOSE_PRIOR), "optimizer_bytes_adamw": (8.0, 400.0, LOOSE_PRIOR),
}
MEMORY_CONSTANTS = {
    "activation_scale": (0.2, 5.0), "logits_bytes_per_element": (2.0, 24.0), "allocator_overhead": (0.0, 0.6),
    "workspace_gib": (0.01, 8.0), "cuda_context_gib": (0.1, 3.0), "variable_shape_reserve": (0.05, 5.0),
}


class NotEnoughData(TuneplanError):
    """Too few usable rows to fit a learner."""


def _log(x):
    return np.log(np.maximum(np.asarray(x, dtype=float), 1e-30))


# ---------------------------------------------------------------------------------------------
SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Candidate shares of a residual correction kept for unseen sources, chosen by leave-one-source-out."""


def _hgb(X: np.ndarray, y: np.ndarray, capacity: dict | None = None):
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(**{**HGB_PARAMS, **(capacity or {})}).fit(X, y)


def group_out_predictions(X: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int = 0,
                          capacity: dict | None = None) -> np.ndarray:
    """Each row's residual predicted by a model fitted without its group (source); random 5-fold
    when there are fewer than 3 groups."""
    keys = np.asarray(groups)
    uniq = sorted(set(keys.tolist()))
    if len(uniq) < 3:
        keys = np.random.default_rng(seed).permutation(len(y)) % 5
        uniq = sorted(set(keys.tolist()))
    out = np.zeros(len(y))
    for g in uniq:
        test = keys == g
        if test.all() or (~test).sum() < MIN_ROWS:
            continue
        out[test] = _hgb(X[~test], y[~test], capacity).predict(X[test])
    return out


def weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    """The median of x with weights w (the smallest x whose cumulative weight reaches half)."""
    order = np.argsort(x)
    cw = np.cumsum(np.asarray(w, dtype=float)[order])
    return float(np.asarray(x)[order][np.searchsorted(cw, 0.5 * cw[-1])])


MIN_SCORING_ROWS = 5
"""Rows a source needs to vote in the choice of a residual's far share (it still trains the trees)."""

TAU_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)
"""Candidate distance scales (summed feature differences, in training spans) over which the near share
fades to the far share."""


def fit_residual(X: np.ndarray, y: np.ndarray, names: tuple[str, ...], groups: np.ndarray | None = None,
                 fixed: tuple | None = None, far_names: tuple[str, ...] | None = None) -> Residual:
    """Boosted trees on log-residuals. The trees' size (CAPACITY_GRID) and how much of the correction
    applies (`near` share next to a measured configuration, `far` share away from all of them, fading
    with the distance to the nearest training row over `tau`) are chosen together on held-out data:
    rows predicted by trees fitted without their random fold (rows of the sources seen: a sibling
    configuration is usually near), and rows predicted by trees fitted without their whole source (a new
    framework or machine), each row's share computed from its distance to the rows that fit lacked.
    Score: median absolute log error, the two halves weighed equally, the source half with every source
    weighing the same (a large source must not decide how a correction transfers to a new one).
    Without groups (or with fewer than 3) only the size is chosen. `fixed` (far, near, tau[, capacity]) skips the choices
    (cross-fits reuse the full fit's). With `far_names` (a subset of `names`), the far share applies
    trees fitted on those features only (see features.THROUGHPUT_FAR_FEATURES); the near share, trees on
    all of them."""
    lo, hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
    span = np.maximum(hi - lo, 1e-9)
    n_groups = 0 if groups is None else len(set(np.asarray(groups).tolist()))
    far_idx = [list(names).index(n) for n in far_names] if far_names and n_groups >= 3 else None
    Xf = X if far_idx is None else X[:, far_idx]

    def fitted(capacity: dict, shares: tuple) -> Residual:
        m = _hgb(X, y, capacity)
        far = None if far_idx is None else export_hgb(_hgb(Xf, y, capacity), list(far_names))
        return Residual(export_hgb(m, list(names)), lo.tolist(), hi.tolist(), shares[0], shares[1], shares[2],
                        None, capacity, X.tolist(), far)

    if fixed is not None:
        return fitted(dict(fixed[3]) if len(fixed) > 3 else dict(CAPACITY_GRID[0]), tuple(fixed[:3]))
    folds = np.random.default_rng(1).permutation(len(y)) % 5
    if n_groups < 3:  # no sources to hold out
        errs = [(float(np.median(np.abs(y - group_out_predictions(X, y, folds, capacity=c)))), i)
                for i, c in enumerate(CAPACITY_GRID)]
        return fitted(dict(CAPACITY_GRID[min(errs)[1]]), (1.0, 1.0, 1.0))
    g = np.asarray(groups).astype(str)
    w_src = source_weights(g, len(y)) ** 2  # every source weighing the same
    # ... among the sources with enough rows to have a median: a source of one or two rows scores
    # its correction by one or two residuals, which must not outvote a source of a hundred rows
    _, inv, counts = np.unique(g, return_inverse=True, return_counts=True)
    if (counts >= MIN_SCORING_ROWS).sum() >= 2:
        w_src = np.where(counts[inv] >= MIN_SCORING_ROWS, w_src, 0.0)
    d_near, d_far = np.empty(len(y)), np.empty(len(y))
    for k in set(folds.tolist()):  # distance to the rows the row's held-out fit had
        m = folds == k
        d_near[m] = nearest_distance(X[m], X[~m], span)
    for src in set(g.tolist()):
        m = g == src
        d_far[m] = nearest_distance(X[m], X[~m], span)
    best = (float("inf"), CAPACITY_GRID[0], (0.0, 0.0, 1.0))
    for capacity in CAPACITY_GRID:
        near_pred = group_out_predictions(X, y, folds, capacity=capacity)
        far_pred = group_out_predictions(X, y, g, capacity=capacity)
        # the far share's trees (on the far features when they differ)
        near_pred_f = near_pred if far_idx is None else group_out_predictions(Xf, y, folds, capacity=capacity)
        far_pred_f = far_pred if far_idx is None else group_out_predictions(Xf, y, g, capacity=capacity)
        for near in SHRINK_GRID:
            for far in SHRINK_GRID:
                for tau in TAU_GRID:
                    g_near, g_far = np.exp(-d_near / tau), np.exp(-d_far / tau)
                    p_near = g_near * near * near_pred + (1.0 - g_near) * far * near_pred_f
                    p_far = g_far * near * far_pred + (1.0 - g_far) * far * far_pred_f
                    e = (0.5 * float(np.median(np.abs(y - p_near)))
                         + 0.5 * weighted_median(np.abs(y - p_far), w_src))
                    if e < best[0] - 1e-12:
                        best = (e, capacity, (far, near, tau))
    return fitted(dict(best[1]), best[2])


SOURCE_BALANCE = 1.0
"""Exponent of the sources' balance in the constants' fit (0: every row the same; 1: every source)."""


def source_weights(sources: np.ndarray | None, n: int) -> np.ndarray:
    """Square roots of the rows' weights in the constants' fit, summing to 1 over the rows. Each row
    weighs 1 / (its source's row count) ** SOURCE_BALANCE: with 1, every source counts the same
    however many rows it published, so one large source (llm-foundry's 300 rows of one framework) does
    not set the constants every other framework is predicted with."""
    if sources is None or n == 0:
        return np.full(n, 1.0 / math.sqrt(max(n, 1)))
    _, inv, counts = np.unique(np.asarray(sources).astype(str), return_inverse=True, return_counts=True)
    w = counts[inv].astype(float) ** -SOURCE_BALANCE
    return np.sqrt(w / w.sum())


# ---------------------------------------------------------------------------------------------
class TuneplanLearner:
    name = "tuneplan"

    def __init__(self, max_nfev: int = 150, shrink: tuple | None = None,
                 memory: bool = True) -> None:
        self.constants = DEFAULT_CONSTANTS
        self.thr_residual: Residual | None = None
        self.mem_residual: Residual | None = None
        self.notes: list[str] = []
        self.max_nfev = max_nfev  # least-squares budget for the constants
        self.fixed_shrink = shrink  # ((far, near, tau) throughput, memory); None: chosen on held-out data
        self.memory = memory  # False: throughput only (the interval cross-fits of throughput)

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
                       weight: float | None = None, sources: np.ndarray | None = None) -> PhysicsConstants:
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

        def consts(x):
            return base.with_(**{k: float(math.exp(v)) for k, v in zip(keys, x, strict=True)})

        def resid(x):
            out = self._phys(a, consts(x))
            pred = (out["tokens_per_step"] / out["step_s"]) if target == "throughput" else self._mem_for_kind(out, kinds)
            r = (_log(pred) - _log(y)) * row_w
            return np.concatenate([r, pull * (x - prior)])

        sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", max_nfev=self.max_nfev, x_scale="jac",
                            ftol=1e-5, xtol=1e-5, gtol=1e-6)
        return consts(sol.x)

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
            self.constants = self._fit_constants(a, ts.tokens_per_s[thr_mask], THROUGHPUT_CONSTANTS, "throughput",
                                                 sources=ts.source[thr_mask])
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
        if thr_mask.sum() >= MIN_RESIDUAL_ROWS:
            X = feature_matrix(a_all, out, THROUGHPUT_FEATURES)[thr_mask]
            pred = (out["tokens_per_step"] / out["step_s"])[thr_mask]
            self.thr_residual = fit_residual(X, _log(ts.tokens_per_s[thr_mask]) - _log(pred), THROUGHPUT_FEATURES,
                                             ts.source[thr_mask], self.fixed_shrink[0] if self.fixed_shrink else None,
                                             THROUGHPUT_FAR_FEATURES)
        if mem_mask.sum() >= MIN_RESIDUAL_ROWS:
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
        }



# ---------------------------------------------------------------------------------------------
class KavierLearner:
    name = "kavier"
    LAMBDAS = (0.0, 0.001, 0.01, 0.1, 1.0)

    def __init__(self) -> None:
        from tuneplan.estimators.kavier import KavierScales

        self.scales = KavierScales()
        self.lam = None

    @staticmethod
    def _parts(a: dict) -> dict:
        from tuneplan.estimators.kavier import KavierEstimator

        base = KavierEstimator().time_arrays(a)
        return {"tf3": base["forward_s"] + base["backward_s"], "to": base["optimizer_s"],
                "tc": base["communication_s"], "tokens": base["tokens_per_step"]}

    @staticmethod
    def _keys(ts: TrainingSet, mask: np.ndarray) -> dict:
        idx = np.flatnonzero(mask)
        cf = [ts.configs[i] for i in idx]
        return {
            "gpu": [c.gpu.name for c in cf], "method": [c.job.method for c in cf],
            "model": [c.model.name for c in cf], "count": [str(c.job.gpus) for c in cf],
        }

    def _tier1(self, parts, keys, y, lam):
        from scipy.optimize import minimize

        groups = {g: sorted(set(keys[g])) for g in ("gpu", "method", "model", "count")}
        layout = [(g, v) for g in ("gpu", "method", "model", "count") for v in groups[g]] + [("comm", "")]
        index = {g: np.array([groups[g].index(v) for v in keys[g]]) for g in groups}
        offs = {}
        o = 0
        for g in ("gpu", "method", "model", "count"):
            offs[g] = o
            o += len(groups[g])
        ly = _log(y)

        def predict(x):
            s = np.exp(x)
            eg = s[offs["gpu"] + index["gpu"]]
            cm = s[offs["method"] + index["method"]]
            co = s[offs["model"] + index["model"]]
            mg = s[offs["count"] + index["count"]]
            cc = s[-1]
            ts_ = parts["tf3"] / eg + parts["to"] + cc * parts["tc"]
            return parts["tokens"] / (mg * ts_) * cm * co

        def loss(x):
            return float(np.mean((_log(predict(x)) - ly) ** 2) + lam * np.sum(x**2))

        x0 = np.zeros(len(layout))
        res = minimize(loss, x0, method="Powell", options={"maxiter": 20000, "xtol": 1e-4, "ftol": 1e-8})
        return layout, res.x, predict

    def fit(self, ts: TrainingSet) -> KavierLearner:

        mask = ts.has_throughput
        if mask.sum() < MIN_ROWS:
            raise NotEnoughData(f"kavier learner: {int(mask.sum())} throughput rows; at least {MIN_ROWS} needed")
        a = arrays_for([ts.configs[i] for i in np.flatnonzero(mask)])
        parts = self._parts(a)
        keys = self._keys(ts, mask)
        y = ts.tokens_per_s[mask]
        # choose the L2 weight on a 70/30 validation split (the seed's 70% training share)
        rng = np.random.default_rng(0)
        n = len(y)
        perm = rng.permutation(n)
        tr, va = perm[: int(0.7 * n)], perm[int(0.7 * n):]
        best = (float("inf"), self.LAMBDAS[0])
        if len(va) >= 3:
            for lam in self.LAMBDAS:
                sub = {k: v[tr] for k, v in parts.items()}
                subk = {k: [v[i] for i in tr] for k, v in keys.items()}
                layout, x, _ = self._tier1(sub, subk, y[tr], lam)
                sc = self._scales_from(layout, x)
                pred = self._predict_with(sc, {k: v[va] for k, v in parts.items()},
                                          {k: [v[i] for i in va] for k, v in keys.items()})
                err = float(np.median(np.abs(pred / y[va] - 1)))
                if err < best[0]:
                    best = (err, lam)
        self.lam = best[1]
        layout, x, predict = self._tier1(parts, keys, y, self.lam)
        sc = self._scales_from(layout, x)
        # tier 2: per (model, method, GPU, count) median of measured / tier-1 prediction
        p1 = self._predict_with(sc, parts, keys)
        ratio = y / p1
        groups: dict[str, list[float]] = {}
        for i in range(n):
            k = f"{keys['model'][i]}|{keys['method'][i]}|{keys['gpu'][i]}|{keys['count'][i]}"
            groups.setdefault(k, []).append(float(ratio[i]))
        sc.interaction = {k: float(np.median(v)) for k, v in groups.items()}
        self.scales = sc
        return self

    @staticmethod
    def _scales_from(layout, x):
        from tuneplan.estimators.kavier import KavierScales

        sc = KavierScales()
        for (g, v), val in zip(layout, np.exp(x), strict=True):
            if g == "gpu":
                sc.gpu[v] = float(val)
            elif g == "method":
                sc.method[v] = float(val)
            elif g == "model":
                sc.model[v] = float(val)
            elif g == "count":
                sc.gpu_count[v] = float(val)
            else:
                sc.comm = float(val)
        return sc

    @staticmethod
    def _predict_with(sc, parts, keys):
        eg = np.array([sc.gpu.get(v, 1.0) for v in keys["gpu"]])
        cm = np.array([sc.method.get(v, 1.0) for v in keys["method"]])
        co = np.array([sc.model.get(v, 1.0) for v in keys["model"]])
        mg = np.array([sc.gpu_count.get(v, 1.0) for v in keys["count"]])
        ts_ = parts["tf3"] / eg + parts["to"] + sc.comm * parts["tc"]
        return parts["tokens"] / (mg * ts_) * cm * co

    def estimator(self, name: str | None = None):
        from tuneplan.estimators.kavier import KavierEstimator

        return KavierEstimator(self.scales, calibration_name=name or "fitted")

    def payload(self) -> dict:
        s = self.scales
        return {"gpu": s.gpu, "method": s.method, "model": s.model, "gpu_count": s.gpu_count, "comm": s.comm,
                "interaction": s.interaction, "overhead_s": s.overhead_s, "l2_weight": self.lam}



# ---------------------------------------------------------------------------------------------
class XiaLearner:
    name = "xia"

    def __init__(self) -> None:
        from tuneplan.estimators.xia import XiaCoefficients

        self.coefficients = XiaCoefficients()

    def fit(self, ts: TrainingSet) -> XiaLearner:
        from scipy.optimize import curve_fit

        from tuneplan.estimators.xia import XiaCoefficients, throughput

        mask = ts.has_throughput
        if mask.sum() < MIN_ROWS:
            raise NotEnoughData(f"xia learner: {int(mask.sum())} throughput rows; at least {MIN_ROWS} needed")
        groups: dict[str, list[int]] = {}
        for i in np.flatnonzero(mask):
            c = ts.configs[i]
            ds = str(ts.df.iloc[i].get("dataset") or "*") if "dataset" in ts.df.columns else "*"
            if ds == "nan":
                ds = "*"
            for key in (f"{c.model.name}|{c.gpu.name}|{ds}", f"{c.model.name}|{c.gpu.name}|*"):
                groups.setdefault(key, []).append(i)
        import warnings

        from scipy.optimize import OptimizeWarning

        eq2: dict[str, tuple[float, float, float]] = {}
        warnings.simplefilter("ignore", OptimizeWarning)
        for key, idx in sorted(groups.items()):
            cf = [ts.configs[i] for i in idx]
            b = np.array([c.job.micro_batch for c in cf], dtype=float)
            if len(set(b)) < 2:
                continue
            sp = np.array([(c.model.experts_per_token / c.model.n_experts) if (c.model.is_moe and
                           c.job.moe_mode == "sparse") else 1.0 for c in cf])
            q = np.array([ts.tokens_per_s[i] / c.seq_len / c.job.dp for i, c in zip(idx, cf, strict=True)])
            try:
                if len(set(sp)) > 1:
                    p, _ = curve_fit(lambda x, c2, c3, c4: throughput(x[0], x[1], c2, c3, c4), np.vstack([b, sp]), q,
                                     p0=(q.mean() / 2, 1.0, q.min()), bounds=([-np.inf, 1e-6, -np.inf], np.inf),
                                     maxfev=20000)
                    eq2[key] = (float(p[0]), float(p[1]), float(p[2]))
                else:
                    s0 = float(sp[0])
                    p, _ = curve_fit(lambda x, c2, c4, s0=s0: throughput(x, s0, c2, 1.0 / s0, c4), b, q,
                                     p0=(q.mean() / 2, q.min()), maxfev=20000)
                    eq2[key] = (float(p[0]), 1.0 / s0, float(p[1]))
            except (RuntimeError, ValueError):
                continue
        self.coefficients = XiaCoefficients(eq2)
        return self

    def estimator(self, name: str | None = None):
        from tuneplan.estimators.xia import XiaEstimator

        return XiaEstimator(self.coefficients, calibration_name=name or "fitted")

    def payload(self) -> dict:
        return {"eq2": {k: list(v) for k, v in self.coefficients.eq2.items()}}



# ---------------------------------------------------------------------------------------------
class SLSTLearner:
    name = "slst"

    def __init__(self) -> None:
        self.coef: np.ndarray | None = None
        self.residual: Residual | None = None

    def fit(self, ts: TrainingSet) -> SLSTLearner:
        mask = ts.has_throughput
        if mask.sum() < MIN_ROWS:
            raise NotEnoughData(f"slst learner: {int(mask.sum())} throughput rows; at least {MIN_ROWS} needed")
        a = arrays_for([ts.configs[i] for i in np.flatnonzero(mask)])
        tokens = a["micro_batch"] * a["seq_len"] * a["grad_accum"] * a["dp"]
        y = _log(tokens / ts.tokens_per_s[mask])  # log step time
        X = slst_features(a, SLST_LAW_FEATURES)
        A = np.column_stack([np.ones(len(y)), X])
        ridge = 1e-3 * np.eye(A.shape[1])
        ridge[0, 0] = 0.0
        self.coef = np.linalg.solve(A.T @ A + ridge, A.T @ y)
        if mask.sum() >= MIN_RESIDUAL_ROWS:
            r = y - A @ self.coef
            self.residual = fit_residual(slst_features(a, SLST_GB_FEATURES), r, SLST_GB_FEATURES,
                                         ts.source[mask])
        return self

    def estimator(self, name: str | None = None):
        return SLSTEstimator(self.coef, self.residual, calibration_name=name or "fitted")

    def payload(self) -> dict:
        return {"law_features": list(SLST_LAW_FEATURES), "coef": [float(c) for c in self.coef],
                "residual": self.residual.to_dict() if self.residual else None}



LEARNERS = {"tuneplan": TuneplanLearner, "kavier": KavierLearner, "xia": XiaLearner, "slst": SLSTLearner}
