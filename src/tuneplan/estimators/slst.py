"""The SLST seed's predictor: a scaling law in active parameters, tokens per step, GPUs, peak FLOP/s,
method and sequence length (log-linear), times exp(a boosted correction on its log-residuals), in
step time. `fit` is the SLST seed's learner: the law by ridge on log step time, then boosted trees on
its log-residuals (`residual_fit.fit_residual`)."""

from __future__ import annotations

import numpy as np

from tuneplan.estimators.residual import Residual
from tuneplan.estimators.residual_fit import _log
from tuneplan.estimators.tuneplan_physics import BorrowsMemory
from tuneplan.physics.codes import lora_family

SLST_LAW_FEATURES = ("log_params_active", "log_tokens_per_step", "log_gpus", "log_peak_tflops", "is_lora_family",
                     "log_seq_len")
SLST_GB_FEATURES = ("log_params_active", "log_params_total", "log_tokens_per_step", "log_micro_batch",
                    "log_seq_len", "log_gpus", "log_nodes", "log_peak_tflops", "log_bandwidth_gbs",
                    "method_code", "grad_ckpt", "log_grad_accum", "trainable_fraction")


def slst_features(a: dict, names: tuple[str, ...]) -> np.ndarray:
    tokens = a["micro_batch"] * a["seq_len"] * a["grad_accum"] * a["dp"]
    f = {
        "log_params_active": _log(a["params_active"]), "log_params_total": _log(a["params_total"]),
        "log_tokens_per_step": _log(tokens), "log_micro_batch": _log(a["micro_batch"]),
        "log_seq_len": _log(a["seq_len"]), "log_gpus": _log(a["gpus"]), "log_nodes": _log(a["nodes"]),
        "log_peak_tflops": _log(a["peak_flops"] / 1e12), "log_bandwidth_gbs": _log(a["mem_bw"] / 1e9),
        "method_code": a["method_code"], "grad_ckpt": a["grad_ckpt"], "log_grad_accum": _log(a["grad_accum"]),
        "is_lora_family": lora_family(a["method_code"]).astype(float),
        "trainable_fraction": a["params_trainable"] / np.maximum(a["params_total"], 1.0),
    }
    return np.column_stack([np.asarray(f[n], dtype=float) for n in names])


class SLSTEstimator(BorrowsMemory):
    """The SLST seed's predictor: scaling law x exp(boosted residual), in step time. `fit(X, y, groups)`:
    X the physics' arrays of the rows, y their tokens/s, groups their sources (the residual's shares are
    chosen on held-out sources). Fitted: `coef_` (intercept first), `residual_` (None: too few rows)."""

    name = "slst"

    def __init__(self, coef: np.ndarray | None = None, residual: Residual | None = None,
                 calibration_name: str | None = None) -> None:
        self.coef_ = None if coef is None else np.asarray(coef, dtype=float)
        self.residual_ = residual
        self.calibration_name = calibration_name

    def fit(self, X: dict, y: np.ndarray, groups: np.ndarray | None = None) -> SLSTEstimator:
        from tuneplan.estimators.residual_fit import MIN_RESIDUAL_ROWS, MIN_ROWS, NotEnoughData, fit_residual

        if len(y) < MIN_ROWS:
            raise NotEnoughData(f"slst learner: {len(y)} throughput rows; at least {MIN_ROWS} needed")
        log_step = _log(X["micro_batch"] * X["seq_len"] * X["grad_accum"] * X["dp"] / y)
        A = np.column_stack([np.ones(len(y)), slst_features(X, SLST_LAW_FEATURES)])
        ridge = 1e-3 * np.eye(A.shape[1])
        ridge[0, 0] = 0.0
        self.coef_ = np.linalg.solve(A.T @ A + ridge, A.T @ log_step)
        self.residual_ = None
        if len(y) >= MIN_RESIDUAL_ROWS:
            self.residual_ = fit_residual(slst_features(X, SLST_GB_FEATURES), log_step - A @ self.coef_,
                                          SLST_GB_FEATURES, groups)
        return self

    def payload(self) -> dict:
        return {"law_features": list(SLST_LAW_FEATURES), "coef": [float(c) for c in self.coef_],
                "residual": self.residual_.to_dict() if self.residual_ else None}

    def time_arrays(self, a: dict) -> dict:
        """The scaling law and its correction, in step time (memory from `BorrowsMemory`)."""
        X = slst_features(a, SLST_LAW_FEATURES)
        log_step = self.coef_[0] + X @ self.coef_[1:]
        if self.residual_ is not None:
            r, _ = self.residual_(slst_features(a, SLST_GB_FEATURES))
            log_step = log_step + r
        step = np.exp(log_step)
        tokens = a["micro_batch"] * a["seq_len"] * a["grad_accum"] * a["dp"]
        return {"step_s": step, "compute_s": step, "tokens_per_step": tokens}

    def assumptions(self, job=None) -> list[str]:
        return ["SLST: log step time = scaling law in active parameters, tokens per step, GPUs, peak FLOP/s, "
                "method and sequence length, plus gradient boosting on its log-residuals, fitted on measured runs"
                + (f" ('{self.calibration_name}')." if self.calibration_name else "."),
                "Memory figures from tuneplan's memory model (SLST predicts time only).",
                self.MEMORY_ASSUMPTION]

    @classmethod
    def from_payload(cls, d: dict, name: str | None = None) -> SLSTEstimator:
        """The estimator a calibration payload describes (`payload()`)."""
        residual = Residual.from_dict(d["residual"]) if d.get("residual") else None
        return cls(np.asarray(d["coef"], dtype=float), residual, calibration_name=name)
