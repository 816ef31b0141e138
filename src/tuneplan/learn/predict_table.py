"""Predict a table of measured runs with any estimator: the `pred_*` columns that `tuneplan predict`
writes and that calibration and validation compare against the measurements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tuneplan.estimators.tuneplan_physics import memory_for_kind
from tuneplan.learn.dataset import RowConfig, arrays_for, configs_from_rows
from tuneplan.learn.intervals import add_interval_columns, comm_share

PRED_COLUMNS = ("pred_tokens_per_s", "pred_samples_per_s", "pred_step_time_s", "pred_peak_mem_gib",
                "pred_peak_mem_allocated_gib", "pred_peak_mem_reserved_gib", "pred_fits", "pred_max_micro_batch",
                "pred_estimator", "error")
"""`pred_peak_mem_gib` is the peak in the row's own terms (`memory_for_kind` of its `mem_kind`: torch's
allocated, its reserved, else nvidia-smi's); the allocated and reserved peaks stand beside it."""
PRED_FROM = {"pred_tokens_per_s": "tokens_per_s", "pred_samples_per_s": "samples_per_s", "pred_step_time_s": "step_s",
             "pred_peak_mem_allocated_gib": "allocated_gib", "pred_peak_mem_reserved_gib": "reserved_gib",
             "pred_fits": "fits", "pred_max_micro_batch": "max_micro_batch"}
"""The `pred_*` columns set from `predict_configs`' arrays of the same name."""


def predict_configs(configs: list[RowConfig], estimator, with_max_batch: bool = True) -> dict[str, np.ndarray]:
    """Arrays of predictions for valid configurations (tokens/s, samples/s, step, memory parts)."""
    a = arrays_for(configs, estimator.constants)
    out = estimator.predict_arrays(a)
    mb_source = estimator.memory_model  # None: no memory model that depends on the batch
    step = np.asarray(out["step_s"], dtype=float)
    tokens = np.asarray(out["tokens_per_step"], dtype=float)
    res = {
        "step_s": step,
        "tokens_per_s": tokens / step,
        "samples_per_s": a["micro_batch"] * a["grad_accum"] * a["dp"] / step,
        "allocated_gib": np.asarray(out["allocated_gib"], dtype=float),
        "reserved_gib": np.asarray(out["reserved_gib"], dtype=float),
        "nvidia_smi_gib": np.asarray(out["nvidia_smi_gib"], dtype=float),
        # the peak the fit is judged on: without the blocks cached for other batch shapes (torch frees them)
        "fit_gib": np.asarray(out["nvidia_smi_gib"], dtype=float) - np.asarray(out.get("variable_shape_gib", 0.0)),
        "fits": np.asarray(out["fits"], dtype=bool),
        "capacity_gib": np.broadcast_to(np.asarray(out.get("capacity_gib", np.nan), dtype=float), step.shape),
        "comm_share": np.asarray(comm_share(out, "_s"), dtype=float) * np.ones_like(step),  # a communication-bound step
    }
    if with_max_batch and mb_source is not None:
        res["max_micro_batch"] = np.asarray(mb_source.max_micro_batch(a), dtype=int)
    return res


def predict_frame(df: pd.DataFrame, estimator, with_max_batch: bool = True, interval: float = 0.0,
                  calibration=None) -> pd.DataFrame:
    """Every row back with pred_* columns; rows that cannot be predicted get an `error`; with an
    `interval` coverage, the interval columns of `calibration`'s residuals (`add_interval_columns`)."""
    rows = df.to_dict("records")
    configs, errors = configs_from_rows(rows)
    ok = [i for i, e in enumerate(errors) if e is None]
    out = df.copy()
    for col in PRED_COLUMNS:
        out[col] = np.nan if col not in ("pred_estimator", "error", "pred_fits") else None
    out["pred_estimator"] = estimator.name
    out["error"] = errors
    if ok:
        cfgs = [configs[i] for i in ok]
        pred = predict_configs(cfgs, estimator, with_max_batch)
        idx = out.index[ok]
        for col, key in PRED_FROM.items():
            if key in pred:
                out.loc[idx, col] = pred[key]
        out.loc[idx, "pred_peak_mem_gib"] = memory_for_kind(pred, [str(rows[i].get("mem_kind") or "unknown") for i in ok])
        used = ["; ".join(c.defaults_used) for c in cfgs]
        out.loc[idx, "pred_defaults_used"] = used
        if interval:
            add_interval_columns(out, estimator.name, interval, calibration, (idx, np.arange(len(ok)), cfgs, used, pred))
    return out
