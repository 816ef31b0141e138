"""Xia et al. (2024), "Understanding the Performance and Estimating the Cost of LLM Fine-Tuning".

  Eq. (1)  Max_BSZ = floor(C0 (GPU_mem - model_mem) / (seq_len ((1 - C1) + C1 sparsity)))
  Eq. (2)  Throughput = C2 log(batch_size / (sparsity C3)) + C4      (queries/s, natural log)
  §V-C     Cost = queries x epochs / Throughput / 3600 x $ per GPU-hour

Eq. (1)'s coefficients are published for Mixtral (C0 = 82, C1 = 0.95) and BlackMamba (C0 = 83,
C1 = 0.88). Eq. (2)'s C2..C4 are fitted per (model, GPU, dataset) from measurements (the paper did
so with scipy; `tuneplan calibrate --learner xia` does the same). Uncalibrated, tuneplan anchors
Eq. (2) to its own physics: C4 = the physics throughput at batch 1 and C2 from the physics at a
reference batch (16), C3 = 1/sparsity — the paper's shape, not its fitted numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tuneplan.estimators.tuneplan_physics import BorrowsMemory

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class MaxBatchCoefficients:
    c0: float
    c1: float
    model_mem_gb: float  # Table I memory consumption (GB)


PUBLISHED_EQ1 = {
    "mistralai/Mixtral-8x7B-v0.1": MaxBatchCoefficients(82.0, 0.95, 23.35),
    "Zyphra/BlackMamba-2.8B": MaxBatchCoefficients(83.0, 0.88, 5.6),
}
"""Published C0, C1 (§V-A) and Table I model memory, by tuneplan catalog name."""
REFERENCE_BATCH = 16.0
"""Batch at which the uncalibrated Eq. (2) is anchored to the physics (the slope's second point)."""


def max_batch_size(gpu_mem_gb: float, model_mem_gb: float, seq_len: float, sparsity_: float,
                   c0: float, c1: float) -> int:
    """Eq. (1)."""
    denom = seq_len * ((1.0 - c1) + c1 * sparsity_)
    return int(math.floor(c0 * (gpu_mem_gb - model_mem_gb) / denom))


def throughput(batch_size, sparsity_, c2, c3, c4):
    """Eq. (2), queries per second."""
    return c2 * np.log(np.asarray(batch_size, dtype=float) / (sparsity_ * c3)) + c4


def fine_tuning_cost(queries: float, epochs: float, throughput_qps: float, usd_per_hour: float) -> float:
    """§V-C: dollars to fine-tune `queries` x `epochs` at a throughput in queries/s."""
    return queries * epochs / throughput_qps / 3600.0 * usd_per_hour


# Effective sequence lengths under which Eq. (1) with the published coefficients reproduces Table III
# (A40, 48 GB): the intervals of seq_len where floor(...) gives both the dense and the sparse entry;
# tuneplan uses the midpoint. See docs/estimators.md, "xia", for the derivation.
TABLE_III = {
    ("mistralai/Mixtral-8x7B-v0.1", "commonsense_15k"): {"dense": 2, "sparse": 8, "median_len": 79},
    ("mistralai/Mixtral-8x7B-v0.1", "math_14k"): {"dense": 1, "sparse": 3, "median_len": 174},
    ("Zyphra/BlackMamba-2.8B", "commonsense_15k"): {"dense": 6, "sparse": 20, "median_len": 79},
    ("Zyphra/BlackMamba-2.8B", "math_14k"): {"dense": 2, "sparse": 8, "median_len": 174},
}


def effective_seq_interval(model: str, dataset: str, gpu_mem_gb: float = 48.0) -> tuple[float, float]:
    """The (low, high] interval of seq_len for which Eq. (1) gives Table III's dense and sparse
    entries at once."""
    co = PUBLISHED_EQ1[model]
    entry = TABLE_III[(model, dataset)]
    num = co.c0 * (gpu_mem_gb - co.model_mem_gb)
    lo, hi = 0.0, float("inf")
    for mode, bsz in (("dense", entry["dense"]), ("sparse", entry["sparse"])):
        f = (1.0 - co.c1) + co.c1 * (1.0 if mode == "dense" else 0.25)
        # floor(num / (s f)) == bsz  <=>  bsz <= num/(s f) < bsz + 1  <=>  num/(f(bsz+1)) < s <= num/(f bsz)
        lo = max(lo, num / (f * (bsz + 1)))
        hi = min(hi, num / (f * bsz))
    return lo, hi


@dataclass
class XiaCoefficients:
    """Fitted Eq. (2) coefficients keyed by 'model|gpu|dataset' (or 'model|gpu|*')."""

    eq2: dict[str, tuple[float, float, float]] = field(default_factory=dict)


class XiaEstimator(BorrowsMemory):
    """Eq. (2); `fit(X, y)` fits C2..C4 per (model, GPU, dataset) and per (model, GPU) with scipy's curve_fit
    (X the rows' arrays with model, GPU and `_datasets` names, y tokens/s). Fitted: `coefficients_`."""

    name = "xia"

    def __init__(self, coefficients: XiaCoefficients | None = None, calibration_name: str | None = None) -> None:
        self.coefficients_ = coefficients or XiaCoefficients()
        self.calibration_name = calibration_name

    @classmethod
    def from_payload(cls, d: dict, name: str | None = None) -> XiaEstimator:
        """The estimator a calibration payload describes (`payload()`)."""
        return cls(XiaCoefficients({k: tuple(v) for k, v in d["eq2"].items()}), calibration_name=name)

    def payload(self) -> dict:
        return {"eq2": {k: list(v) for k, v in self.coefficients_.eq2.items()}}

    def fit(self, X: Arrays, y: np.ndarray) -> XiaEstimator:
        import warnings

        from scipy.optimize import OptimizeWarning, curve_fit

        from tuneplan.estimators.residual_fit import MIN_ROWS, NotEnoughData

        if len(y) < MIN_ROWS:
            raise NotEnoughData(f"xia learner: {len(y)} throughput rows; at least {MIN_ROWS} needed")
        datasets = X.get("_datasets", np.full(len(y), "*", dtype=object))
        groups: dict[str, list[int]] = {}
        for i, (model, gpu, ds) in enumerate(zip(X["_model_names"], X["_gpu_names"], datasets, strict=True)):
            for key in (f"{model}|{gpu}|{ds}", f"{model}|{gpu}|*"):
                groups.setdefault(key, []).append(i)
        sp_all = np.where(X["n_experts"] > 0, X["top_k"] / np.maximum(X["n_experts"], 1.0), 1.0)
        q_all = y / X["seq_len"] / X["dp"]  # queries/s per data-parallel replica
        eq2: dict[str, tuple[float, float, float]] = {}
        warnings.simplefilter("ignore", OptimizeWarning)
        for key, idx in sorted(groups.items()):
            b, sp, q = X["micro_batch"][idx], sp_all[idx], q_all[idx]
            if len(set(b)) < 2:
                continue
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
        self.coefficients_ = XiaCoefficients(eq2)
        return self

    def time_arrays(self, a: Arrays) -> Arrays:
        """Eq. (2) throughput as step time (memory from `BorrowsMemory`)."""
        from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

        phys = TuneplanEstimator()
        sp = np.where(a["n_experts"] > 0, np.maximum(a["top_k"], 1.0) / np.maximum(a["n_experts"], 1.0), 1.0)
        # anchor: physics throughput (samples/s per data-parallel replica) at batch 1 and REFERENCE_BATCH
        q1, qr = (a["grad_accum"] * b / phys.physics({**a, "micro_batch": np.full_like(a["micro_batch"], b)})["step_s"]
                  for b in (1.0, REFERENCE_BATCH))
        c2, c3, c4 = (qr - q1) / math.log(REFERENCE_BATCH), 1.0 / sp, q1
        models, gpus, fitted = a.get("_model_names"), a.get("_gpu_names"), self.coefficients_.eq2
        if fitted and models is not None and gpus is not None:
            datasets = a.get("_datasets", np.full(len(c4), "*", dtype=object))
            for i, (model, gpu, ds) in enumerate(zip(models, gpus, datasets, strict=True)):
                key = next((k for k in (f"{model}|{gpu}|{ds}", f"{model}|{gpu}|*") if k in fitted), None)
                if key is not None:
                    c2[i], c3[i], c4[i] = fitted[key]
        q = throughput(a["micro_batch"], sp, c2, c3, c4)  # queries/s per replica
        q = np.maximum(q, 1e-9)
        samples_per_step = a["micro_batch"] * a["grad_accum"] * a["dp"]
        step = samples_per_step / (q * a["dp"])
        tokens = samples_per_step * a["seq_len"]
        return {"step_s": step, "compute_s": step, "tokens_per_step": tokens, "xia_c2": c2, "xia_c3": c3, "xia_c4": c4}

    def assumptions(self, job=None) -> list[str]:
        src = (f"Eq. (2) coefficients fitted per (model, GPU, dataset) in '{self.calibration_name}'."
               if self.calibration_name else
               "Uncalibrated: Eq. (2) anchored to tuneplan's physics at batch 1 and 16 (C3 = 1/sparsity); "
               "the paper fits C2..C4 per (model, GPU, dataset) from measurements.")
        return [
            "Xia et al. Eq. (2): throughput = C2 ln(batch / (sparsity C3)) + C4 queries/s, one GPU, "
            "scaled linearly over data-parallel replicas.",
            src,
            "Eq. (1) maximum batch with published C0, C1 for Mixtral and BlackMamba only.",
            "Cost (§V-C) = queries x epochs / throughput / 3600 x $ per GPU-hour.",
            self.MEMORY_ASSUMPTION,
        ]
