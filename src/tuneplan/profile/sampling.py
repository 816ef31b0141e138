"""Smart sampling: which configurations to measure, in what order, within a time budget (docs/profiling.md,
"Smart sampling"): anchors that identify a log-space scaling law of step time, then the candidate with the
largest bootstrap spread per second of predicted cost that fits the budget left, until the budget is spent or
the leave-one-out error falls below the target. A failed (out-of-memory) configuration rules out every
candidate at least as large in every numeric setting.

The law: log(step_time) = b0 + sum_k b_k log(x_k) + sum_j d_j [category_j] (stage 0), + curvature terms
(stage 1), + pairwise products (stage 2); a robust (Huber) ridge fit, the richest stage the points support
kept when its leave-one-out error is lower.

No torch here: `measure` is injected, so the choice order can be tested on a planted function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneplan.errors import InputError

Config = Mapping[str, Any]


@dataclass
class Measurement:
    """What one measured configuration gave: step time (None when it failed) and its wall cost."""

    step_time_s: float | None
    cost_s: float
    status: str = "ok"
    row: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.step_time_s is not None and self.step_time_s > 0


MeasureFn = Callable[[dict[str, Any]], "Measurement | Mapping[str, Any] | float"]


def as_measurement(value: Measurement | Mapping[str, Any] | float, steps_per_run: float) -> Measurement:
    """Accept a Measurement, a row-like mapping (step_time_s, wall_s/cost_s, status) or a step time."""
    if isinstance(value, Measurement):
        return value
    if isinstance(value, (int, float)):
        return Measurement(float(value), float(value) * steps_per_run)
    step = value.get("step_time_s")
    step_f = float(step) if step not in (None, "") else None
    status = str(value.get("status") or ("ok" if step_f else "error"))
    cost = value.get("cost_s", value.get("wall_s"))
    if cost in (None, ""):
        cost = (step_f or 0.0) * steps_per_run
    return Measurement(step_f, float(cost), status, dict(value))


# ---------------------------------------------------------------- features


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class FeatureMap:
    """Numeric settings -> log features; categorical settings -> level indicators.

    Keys whose value is the same in every candidate are left out. A numeric key may be None in some
    candidates (e.g. LoRA rank of a full fine-tune): its log feature is then 0. The three nested
    feature stages are the module docstring's; curvature only for settings with 3 or more levels.
    """

    def __init__(self, candidates: Sequence[Config]) -> None:
        self.numeric: list[str] = []
        self.categorical: dict[str, list[Any]] = {}
        self.levels: dict[str, list[float]] = {}
        for k in dict.fromkeys(k for c in candidates for k in c):
            distinct = list(dict.fromkeys(c.get(k) for c in candidates))
            if len(distinct) < 2:
                continue
            nums = [v for v in distinct if v is not None]
            if nums and all(_is_num(v) and v > 0 for v in nums):
                self.numeric.append(k)
                self.levels[k] = sorted(float(v) for v in nums)
            else:
                self.categorical[k] = distinct
        self.quad_keys = [k for k in self.numeric if len(self.levels[k]) >= 3]
        self.centre = {k: float(np.mean(np.log(self.levels[k]))) for k in self.numeric}
        # the base terms of stage 2 products: (kind, key, level); no product of two levels of one key
        self._terms: list[tuple[str, Any]] = [("num", k) for k in self.numeric] + [
            ("cat", (k, lev)) for k, levels in self.categorical.items() for lev in levels[1:]]
        self._pairs = [(i, j) for i in range(len(self._terms)) for j in range(i + 1, len(self._terms))
                       if not (self._terms[i][0] == "cat" and self._terms[j][0] == "cat"
                               and self._terms[i][1][0] == self._terms[j][1][0])]
        self.n_features = [self.n_linear, self.n_linear + len(self.quad_keys),
                           self.n_linear + len(self.quad_keys) + len(self._pairs)]

    @property
    def keys(self) -> list[str]:
        return self.numeric + list(self.categorical)

    @property
    def n_linear(self) -> int:
        return 1 + len(self.numeric) + sum(len(v) - 1 for v in self.categorical.values())

    def _log(self, c: Config, k: str) -> float:
        v = c.get(k)
        return math.log(float(v)) if v is not None else 0.0

    def _centred(self, c: Config, k: str) -> float:
        return self._log(c, k) - self.centre[k] if c.get(k) is not None else 0.0

    def row(self, c: Config, stage: int = 0) -> list[float]:
        out = [1.0] + [self._log(c, k) for k in self.numeric]
        for k, levels in self.categorical.items():
            out += [1.0 if c.get(k) == lev else 0.0 for lev in levels[1:]]
        if stage >= 1:
            out += [self._centred(c, k) ** 2 for k in self.quad_keys]
        if stage >= 2:
            base = [self._centred(c, t[1]) if t[0] == "num" else (1.0 if c.get(t[1][0]) == t[1][1] else 0.0)
                    for t in self._terms]
            out += [base[i] * base[j] for i, j in self._pairs]
        return out

    def design(self, configs: Sequence[Config], stage: int = 0) -> np.ndarray:
        return np.array([self.row(c, stage) for c in configs], dtype=float).reshape(len(configs), -1)

    def proxy_cost(self, c: Config) -> float:
        """Prior cost proxy: log of the product of the numeric settings."""
        return sum(self._log(c, k) for k in self.numeric)

    def key_of(self, c: Config) -> tuple[Any, ...]:
        return tuple(c.get(k) for k in self.keys)


def _normal(x: np.ndarray, w: np.ndarray, ridge: float) -> np.ndarray:
    """X'WX plus the ridge on every coefficient but the intercept."""
    d = np.eye(x.shape[1]) * ridge
    d[0, 0] = 0.0
    return (x * w[:, None]).T @ x + d


def _weighted_solve(x: np.ndarray, y: np.ndarray, w: np.ndarray, ridge: float) -> np.ndarray:
    a, rhs = _normal(x, w, ridge), (x * w[:, None]).T @ y
    try:
        return np.linalg.solve(a, rhs)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(a, rhs, rcond=None)[0]


def robust_weights(x: np.ndarray, y: np.ndarray, ridge: float, robust: bool = True
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, weights) of a ridge fit with Huber reweighting.

    Ridge on every coefficient but the intercept. Huber: a few IRLS passes with the scale from the
    median absolute residual (at least 2% in log space), so one disturbed measurement (a busy machine)
    does not drag the whole law.
    """
    w = np.ones(len(y))
    b = _weighted_solve(x, y, w, ridge)
    if not robust or len(y) <= x.shape[1] + 1:
        return b, w
    for _ in range(8):
        r = y - x @ b
        k = 1.345 * max(1.4826 * float(np.median(np.abs(r - np.median(r)))), 0.02)
        a = np.abs(r)
        w_new = np.where(a <= k, 1.0, k / np.maximum(a, 1e-12))
        if np.allclose(w_new, w, atol=1e-3):
            break
        w = w_new
        b = _weighted_solve(x, y, w, ridge)
    return b, w


def loo_relative_errors(x: np.ndarray, y: np.ndarray, b: np.ndarray, w: np.ndarray, ridge: float) -> np.ndarray:
    """Leave-one-out |predicted / measured - 1| of each point (closed form at the fitted weights)."""
    a = _normal(x, w, ridge)
    try:
        ainv = np.linalg.inv(a)
    except np.linalg.LinAlgError:
        ainv = np.linalg.pinv(a)
    h = w * np.einsum("ij,jk,ik->i", x, ainv, x)
    loo = (y - x @ b) / np.maximum(1.0 - h, 1e-3)
    return np.abs(np.exp(-loo) - 1.0)


SPREAD_STAGE = 1
"""The least feature stage of the bootstrap ensemble that gives the spread."""
SPREAD_RIDGE = 0.05
"""The bootstrap fits' ridge when their stage is above the chosen one (few points per coefficient)."""


class Learner:
    """Robust ridge fit of log step time, the feature stage chosen by leave-one-out error, with a
    bootstrap ensemble (of the chosen stage) for the spread of each prediction."""

    def __init__(self, fmap: FeatureMap, n_boot: int = 32, ridge: float = 1e-3, seed: int = 0) -> None:
        self.fmap, self.n_boot, self.ridge, self.seed = fmap, n_boot, ridge, seed
        self._boot_stage = self.stage = 0
        self.coef: np.ndarray | None = None
        self.boot: np.ndarray | None = None
        self.loo: float | None = None
        """Leave-one-out mean relative error of step time of the chosen fit; None with fewer than
        n_params + 2 points."""

    def stages_for(self, n: int) -> list[int]:
        """Feature stages with enough points: n >= features + 2 (stage 0 is always fitted)."""
        out = [0]
        for s in (1, 2):
            if self.fmap.n_features[s] > self.fmap.n_features[s - 1] and n >= self.fmap.n_features[s] + 2:
                out.append(s)
        return out

    def fit(self, configs: Sequence[Config], step_times: Sequence[float]) -> Learner:
        y = np.log(np.asarray(step_times, dtype=float))
        n = len(y)
        best: tuple[float, int, np.ndarray, np.ndarray] | None = None
        for s in self.stages_for(n):
            x = self.fmap.design(configs, s)
            b, w = robust_weights(x, y, self.ridge)
            err = float(np.mean(loo_relative_errors(x, y, b, w, self.ridge))) if n >= x.shape[1] + 2 else math.inf
            if best is None or err < best[0]:
                best = (err, s, b, x)
        assert best is not None
        err, self.stage, self.coef, x = best
        self.loo = None if math.isinf(err) else err
        # the spread comes from a more flexible law (stage >= SPREAD_STAGE, ridge-regularised while points
        # are few): far from the measured points its curvature terms are unknown, so its bootstrap fits
        # disagree there even when the simpler chosen law is (over)confident
        self._boot_stage = max(self.stage, SPREAD_STAGE)
        ridge_b = self.ridge if self._boot_stage == self.stage else SPREAD_RIDGE
        xb = x if self._boot_stage == self.stage else self.fmap.design(configs, self._boot_stage)
        rng = np.random.default_rng(self.seed)
        idx = [rng.integers(0, n, size=n) for _ in range(self.n_boot)]
        self.boot = np.array([robust_weights(xb[i], y[i], ridge_b)[0] for i in idx]).reshape(self.n_boot, xb.shape[1])
        return self

    def predict(self, configs: Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted log step time and its bootstrap spread (std, log space)."""
        assert self.coef is not None and self.boot is not None, "fit first"
        x = self.fmap.design(configs, self.stage)
        mean = x @ self.coef
        if len(self.boot) > 1:
            xb = x if self._boot_stage == self.stage else self.fmap.design(configs, self._boot_stage)
            spread = (xb @ self.boot.T).std(axis=1)
        else:
            spread = np.zeros(len(configs))
        return mean, spread


# ---------------------------------------------------------------- anchors


def anchor_order(fmap: FeatureMap, candidates: Sequence[Config]) -> list[int]:
    """Anchors: the cheapest candidate, then one move from it along each axis, enough to identify the
    log-linear law: each numeric axis to its next level, each categorical level at the cheapest corner.
    Where the candidates are not a full grid, the remaining directions are filled greedily: the
    cheapest candidate (by the proxy) that raises the rank of the design matrix.
    """
    if not candidates:
        return []
    proxy = [fmap.proxy_cost(c) for c in candidates]
    order = sorted(range(len(candidates)), key=lambda i: (proxy[i], i))
    base_i = order[0]
    base = candidates[base_i]
    index = {fmap.key_of(c): i for i, c in reversed(list(enumerate(candidates)))}
    wanted: list[dict[str, Any]] = []
    for k in fmap.numeric:
        levels = fmap.levels[k]
        if base.get(k) is None:
            continue
        pos = levels.index(float(base[k])) if float(base[k]) in levels else 0
        if pos + 1 < len(levels):
            v = levels[pos + 1]
            wanted.append({**base, k: int(v) if float(v).is_integer() else v})
    for k, levels in fmap.categorical.items():
        wanted += [{**base, k: lev} for lev in levels if lev != base.get(k)]
    chosen = [base_i]
    rows = [fmap.row(base)]

    def add_if_it_raises_rank(i: int) -> bool:
        if i in chosen:
            return False
        row = fmap.row(candidates[i])
        if int(np.linalg.matrix_rank(np.array(rows + [row]))) > len(rows):
            chosen.append(i)
            rows.append(row)
            return True
        return False

    for w in wanted:
        i = index.get(fmap.key_of(w))
        if i is not None:
            add_if_it_raises_rank(i)
    while len(rows) < fmap.n_linear and any(add_if_it_raises_rank(i) for i in order):
        pass
    return chosen


# ---------------------------------------------------------------- the sampler


@dataclass
class Choice:
    index: int
    phase: str  # "anchor" or "uncertainty"
    score: float | None = None  # spread / predicted cost (uncertainty phase)
    spread: float | None = None
    pred_cost_s: float | None = None


@dataclass
class CurvePoint:
    n_runs: int
    n_ok: int
    cost_s: float
    loo_error: float | None
    index: int


@dataclass
class SamplingResult:
    candidates: list[dict[str, Any]]
    order: list[int] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    trace: list[Choice] = field(default_factory=list)
    curve: list[CurvePoint] = field(default_factory=list)
    spent_s: float = 0.0
    stop_reason: str = ""

    def ok_points(self) -> tuple[list[dict[str, Any]], list[float]]:
        ok = [(self.candidates[i], float(m.step_time_s)) for i, m in zip(self.order, self.measurements, strict=True)
              if m.ok]  # type: ignore[arg-type]
        return [c for c, _ in ok], [y for _, y in ok]


def estimate_overhead(measurements: Sequence[Measurement], steps_per_run: float) -> float:
    """Per-run cost not explained by the steps (model build, start-up), median over measured runs."""
    vals = [m.cost_s - steps_per_run * m.step_time_s for m in measurements if m.ok]  # type: ignore[operator]
    return max(0.0, float(np.median(vals))) if vals else 0.0


def score_candidates(learner: Learner, configs: Sequence[Config], overhead_s: float,
                     steps_per_run: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(score, spread, predicted cost) of each config: score = spread / predicted cost."""
    mean, spread = learner.predict(configs)
    cost = overhead_s + steps_per_run * np.exp(mean)
    cost = np.maximum(cost, 1e-9)
    return spread / cost, spread, cost


def _dominates(fmap: FeatureMap, big: Config, small: Config) -> bool:
    """`big` is at least `small` in every numeric setting, with the same categories."""
    if any(big.get(k) != small.get(k) for k in fmap.categorical):
        return False
    pairs = [(big.get(k), small.get(k)) for k in fmap.numeric]
    return all((a is None) == (b is None) and (a is None or float(a) >= float(b)) for a, b in pairs)


def smart_sample(candidates: Sequence[Config], measure: MeasureFn, budget_s: float,
                 target_error: float = 0.05, *, steps_per_run: float = 1.0, n_boot: int = 32,
                 ridge: float = 1e-3, seed: int = 0,
                 on_result: Callable[[int, Measurement, CurvePoint, Choice], None] | None = None) -> SamplingResult:
    """Measure candidates in the smart order until the budget is spent or the LOO error is small.

    `measure(config)` runs one configuration and returns a Measurement (or a row mapping with
    step_time_s, wall_s and status, or a bare step time). Budget is in the same seconds as the costs.
    `on_result(index, measurement, curve_point, choice)` is called after each run.
    """
    if budget_s <= 0:
        raise InputError("budget", "must be > 0; give e.g. --budget 10m")
    cands = [dict(c) for c in candidates]
    res = SamplingResult(candidates=cands)
    if not cands:
        res.stop_reason = "exhausted"
        return res
    fmap = FeatureMap(cands)
    pending = anchor_order(fmap, cands)
    measured: set[int] = set()
    infeasible: set[int] = set()

    while True:
        remaining_budget = budget_s - res.spent_s
        if remaining_budget <= 0:
            res.stop_reason = "budget"
            break
        left = [i for i in range(len(cands)) if i not in measured and i not in infeasible]
        if not left:
            res.stop_reason = "exhausted"
            break
        ok_cfgs, ok_y = res.ok_points()
        learner = Learner(fmap, n_boot=n_boot, ridge=ridge, seed=seed + len(res.order))
        fitted = len(ok_y) >= 2
        if fitted:
            learner.fit(ok_cfgs, ok_y)
        overhead = estimate_overhead(res.measurements, steps_per_run)
        pending = [i for i in pending if i in left]
        if pending:
            i = pending.pop(0)
            pred = None
            if fitted:
                _, _, cost = score_candidates(learner, [cands[i]], overhead, steps_per_run)
                pred = float(cost[0])
                if pred > remaining_budget:
                    infeasible.add(i)  # an anchor we cannot afford: skip it
                    continue
            choice = Choice(i, "anchor", pred_cost_s=pred)
        elif fitted:
            score, spread, cost = score_candidates(learner, [cands[i] for i in left], overhead, steps_per_run)
            fits = cost <= remaining_budget
            if not fits.any():
                res.stop_reason = "budget"
                break
            j = int(np.argmax(np.where(fits, score, -np.inf)))
            choice = Choice(left[j], "uncertainty", float(score[j]), float(spread[j]), float(cost[j]))
        else:
            # fewer than two successful anchors (failures): the cheapest remaining by the proxy
            j = min(left, key=lambda i: (fmap.proxy_cost(cands[i]), i))
            choice = Choice(j, "anchor")
        i = choice.index
        m = as_measurement(measure(dict(cands[i])), steps_per_run)
        measured.add(i)
        res.order.append(i)
        res.measurements.append(m)
        res.trace.append(choice)
        res.spent_s += m.cost_s
        if len(res.order) == 1 and m.ok and m.step_time_s > budget_s:  # type: ignore[operator]
            raise InputError("budget", f"{budget_s:g} s is under one step of the cheapest configuration "
                                       f"({m.step_time_s:.3g} s per step measured); raise --budget")
        if not m.ok:
            infeasible.update(k for k in left if k != i and _dominates(fmap, cands[k], cands[i]))
        ok_cfgs, ok_y = res.ok_points()
        loo = Learner(fmap, n_boot=0, ridge=ridge, seed=seed).fit(ok_cfgs, ok_y).loo if len(ok_y) >= 2 else None
        point = CurvePoint(len(res.order), len(ok_y), res.spent_s, loo, i)
        res.curve.append(point)
        if on_result is not None:
            on_result(i, m, point, choice)
        if loo is not None and loo < target_error and not pending:
            res.stop_reason = "target"
            break
    return res


def random_sample(candidates: Sequence[Config], cost_of: Callable[[int], float], budget_s: float,
                  seed: int = 0) -> list[int]:
    """Indices of a random sample whose total cost fits the budget (random order, skipping any run
    that would overshoot) -- the baseline smart sampling is compared with."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(candidates))
    spent = 0.0
    out = []
    for i in order:
        c = cost_of(int(i))
        if spent + c <= budget_s:
            out.append(int(i))
            spent += c
    return out


def heldout_error(fmap: FeatureMap, train: Sequence[Config], y_train: Sequence[float],
                  test: Sequence[Config], y_test: Sequence[float], ridge: float = 1e-3) -> float:
    """Mean relative error of the scaling-law fit on configurations it was not fitted on."""
    if len(y_train) < 2 or not len(y_test):
        return float("nan")
    learner = Learner(fmap, n_boot=0, ridge=ridge).fit(train, y_train)
    mean, _ = learner.predict(test)
    return float(np.mean(np.abs(np.exp(mean - np.log(np.asarray(y_test, dtype=float))) - 1.0)))
