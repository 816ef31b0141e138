"""Xia et al.'s Eq. (2) fitted per (model, GPU, dataset) with scipy's curve_fit."""

from __future__ import annotations

import numpy as np

from tuneplan.learn.learners.residual_fit import (
    MIN_ROWS,
    NotEnoughData,
)
from tuneplan.learn.measured import TrainingSet


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
