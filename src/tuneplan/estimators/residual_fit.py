"""Fitting a residual correction (shared by the tuneplan and slst learners): gradient-boosted trees on
log-residuals, their capacity and shares chosen on held-out sources (rows of several sources) or on
random folds (one or two); per-source weights; the learners' row minimums and constant bounds."""

from __future__ import annotations

import math

import numpy as np

from tuneplan.errors import TuneplanError
from tuneplan.estimators.residual import Residual, nearest_distance
from tuneplan.estimators.trees import export_hgb

MIN_ROWS = 8
"""Fewer measured rows than this: a learner refuses to fit (the physics result stands)."""
L2_PRIOR_WEIGHT = 0.0005
"""tuneplan learner: weight of each fitted constant's log pull toward its prior, against the rows' mean
squared log error: weak (noise variance 0.1^2 over a prior spread of a factor e, over a few tens of rows),
so a CPU's few tens of profiled rows can move constants set for datacenter GPUs (docs/learning.md)."""
MEMORY_PRIOR_WEIGHT = 0.005
"""The same pull for the memory constants with fewer than three memory sources; with more it is chosen
by leave-one-source-out error among MEMORY_PRIOR_GRID (priors kept included: frameworks hold different
loss buffers, and fitted memory constants can transfer worse than the byte-counted priors; docs/learning.md)."""
HGB_PARAMS = {"max_iter": 150, "learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 8,
              "l2_regularization": 1.0, "early_stopping": False, "random_state": 0}
"""Gradient-boosting settings for the residual models (deterministic: no early stopping)."""
CAPACITY_GRID = tuple({"max_iter": n, "min_samples_leaf": leaf, "loss": loss}
                      for loss in ("squared_error", "absolute_error") for n, leaf in ((150, 8), (300, 4)))
"""Candidate residual trees over HGB_PARAMS: size (rounds, smallest leaf) and loss (absolute error: a few
rows far off cannot pull it), chosen in each fit on out-of-fold errors of the training rows (fit_residual)."""
THROUGHPUT_PRIOR_GRID = (L2_PRIOR_WEIGHT, 0.02, None)
"""Candidate pulls for the throughput constants with three or more sources, chosen on held-out groups of
the training sources (None: priors kept, when fitted ones do not transfer)."""
INNER_SOURCE_GROUPS = 4
"""Groups of training sources the throughput pull is chosen on (each held out in turn)."""
INNER_NFEV = 40
"""Least-squares budget of the inner fits that choose a pull (the chosen pull is then fitted in full)."""
MEMORY_PRIOR_GRID = (0.0005, 0.005, 0.02, None)
"""Candidate pulls for the memory constants, chosen by leave-one-source-out error (None: priors kept)."""
LOOSE_PRIOR = 0.01
"""Relative pull toward the prior of the constants that vary by an order of magnitude between devices."""
MIN_RESIDUAL_ROWS = 30
"""Rows needed before a residual model is fitted on top of the constants."""
NEIGHBOUR_SHARE = 0.5
"""Share of a user's own-stack throughput correction that is the residual of the nearest measured
configuration (the rest: the trees'): a source of a few tens of rows is better told by its nearest
sibling than by trees that need rows to split on (benchmarks/own_stack_residual.py, docs/learning.md)."""
RESIDUAL_MAX_SOURCES = 2
"""The residual trees are fitted for a user's own stack only (rows of at most this many sources): fitted on
several sources they did not beat the uncalibrated physics on most held-out ones
(benchmarks/learning_by_source.py, docs/learning.md), so the shipped default leaves them out."""

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


SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Candidate shares of a residual correction kept for unseen sources, chosen by leave-one-source-out."""


def one_thread(fn):
    """Run `fn` with OpenMP on one thread (scikit-learn's boosted trees use it): on a few hundred rows its
    threads gain nothing, and on busy cores their spin-waits slow each fit many times over."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            return fn(*args, **kwargs)

    return wrapper


def _hgb(X: np.ndarray, y: np.ndarray, capacity: dict | None = None):
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(**{**HGB_PARAMS, **(capacity or {})}).fit(X, y)


@one_thread
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


RESIDUAL_SOURCE_GROUPS = 6
"""Groups of training sources held out in turn when a residual's far share is chosen (GroupKFold style)."""


@one_thread
def fit_residual(X: np.ndarray, y: np.ndarray, names: tuple[str, ...], groups: np.ndarray | None = None,
                 fixed: tuple | None = None, far_names: tuple[str, ...] | None = None,
                 neighbour_share: float = 0.0) -> Residual:
    """Boosted trees on log-residuals. With rows of three or more sources, the trees' size (CAPACITY_GRID)
    and the shares (`near` next to a measured configuration, `far` away from all, fading with the distance
    to the nearest training row over `tau`) are chosen together on sources held out in
    RESIDUAL_SOURCE_GROUPS groups, by median absolute log error with every source weighing the same (a
    large source must not decide how a correction transfers to a new one). Rows of one or two sources (a
    user's own stack): random folds choose the size only, and the correction applies in full, with
    `neighbour_share` of it the nearest training row's residual. `fixed` (far, near, tau[, capacity])
    skips the choices (cross-fits reuse the full fit's); with `far_names` the far share applies trees
    fitted on those features only (the shape of the work, not what it ran on)."""
    lo, hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
    span = np.maximum(hi - lo, 1e-9)
    n_groups = 0 if groups is None else len(set(np.asarray(groups).tolist()))
    far_idx = [list(names).index(n) for n in far_names] if far_names and n_groups >= 3 else None
    Xf = X if far_idx is None else X[:, far_idx]

    def fitted(capacity: dict, shares: tuple) -> Residual:
        m = _hgb(X, y, capacity)
        far = None if far_idx is None else export_hgb(_hgb(Xf, y, capacity), list(far_names))
        own = neighbour_share > 0.0 and n_groups < 3
        return Residual(export_hgb(m, list(names)), lo.tolist(), hi.tolist(), shares[0], shares[1], shares[2],
                        None, capacity, X.tolist(), far, y.tolist() if own else None, neighbour_share if own else 0.0)

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
    # the sources held out together in the far half's fits: sorted by name, dealt round-robin into groups
    group_of = {s: i % RESIDUAL_SOURCE_GROUPS for i, s in enumerate(sorted(set(g.tolist())))}
    gk = np.array([group_of[s] for s in g])
    d_far = np.empty(len(y))
    for k in set(gk.tolist()):  # distance to the rows the row's held-out fit had
        m = gk == k
        d_far[m] = nearest_distance(X[m], X[~m], span)
    best = (float("inf"), CAPACITY_GRID[0], (0.0, 0.0, 1.0))
    for capacity in CAPACITY_GRID:
        far_pred = group_out_predictions(X, y, gk, capacity=capacity)
        # the far share's trees (on the far features when they differ)
        far_pred_f = far_pred if far_idx is None else group_out_predictions(Xf, y, gk, capacity=capacity)
        for near in SHRINK_GRID:
            for far in SHRINK_GRID:
                for tau in TAU_GRID:
                    g_far = np.exp(-d_far / tau)
                    p_far = g_far * near * far_pred + (1.0 - g_far) * far * far_pred_f
                    e = weighted_median(np.abs(y - p_far), w_src)
                    if e < best[0] - 1e-12:
                        best = (e, capacity, (far, near, tau))
    return fitted(dict(best[1]), best[2])


SOURCE_BALANCE = 1.0
"""Exponent of the sources' balance in the constants' fit (0: every row the same; 1: every source)."""


def source_weights(sources: np.ndarray | None, n: int) -> np.ndarray:
    """Square roots of the rows' weights in the constants' fit, summing to 1: each row weighs 1 / (its
    source's row count) ** SOURCE_BALANCE, so one large source does not set every framework's constants."""
    if sources is None or n == 0:
        return np.full(n, 1.0 / math.sqrt(max(n, 1)))
    _, inv, counts = np.unique(np.asarray(sources).astype(str), return_inverse=True, return_counts=True)
    w = counts[inv].astype(float) ** -SOURCE_BALANCE
    return np.sqrt(w / w.sum())
