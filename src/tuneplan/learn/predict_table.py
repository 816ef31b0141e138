"""Predict a table of measured runs with any estimator: the `pred_*` columns that `tuneplan predict`
writes and that calibration and validation compare against the measurements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tuneplan.learn.dataset import RowConfig, arrays_for, configs_from_rows

PRED_COLUMNS = ("pred_tokens_per_s", "pred_samples_per_s", "pred_step_time_s", "pred_peak_mem_gib",
                "pred_fits", "pred_max_micro_batch", "pred_estimator", "error")


def memory_for_kind(mem: dict, kinds: list[str]) -> np.ndarray:
    """The predicted peak in the measurement's own terms: torch allocated, reserved, or nvidia-smi
    (reserved + CUDA context; also used when the kind is unknown)."""
    out = np.asarray(mem["nvidia_smi_gib"], dtype=float).copy()
    alloc = np.asarray(mem["allocated_gib"], dtype=float)
    res = np.asarray(mem["reserved_gib"], dtype=float)
    for i, k in enumerate(kinds):
        if k == "allocated":
            out[i] = alloc[i]
        elif k == "reserved":
            out[i] = res[i]
    return out


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
        "fits": np.asarray(out["fits"], dtype=bool),
    }
    if with_max_batch and mb_source is not None:
        res["max_micro_batch"] = np.asarray(mb_source.max_micro_batch(a), dtype=int)
    return res


def predict_frame(df: pd.DataFrame, estimator, with_max_batch: bool = True) -> pd.DataFrame:
    """Every row back with pred_* columns; rows that cannot be predicted get an `error`."""
    rows = df.to_dict("records")
    configs, errors = configs_from_rows(rows)
    ok = [i for i, c in enumerate(configs) if c is not None]
    out = df.copy()
    for col in PRED_COLUMNS:
        out[col] = np.nan if col not in ("pred_estimator", "error", "pred_fits") else None
    out["pred_estimator"] = estimator.name
    out["error"] = errors
    if ok:
        pred = predict_configs([configs[i] for i in ok], estimator, with_max_batch)
        kinds = [str(rows[i].get("mem_kind") or "unknown") for i in ok]
        idx = out.index[ok]
        out.loc[idx, "pred_tokens_per_s"] = pred["tokens_per_s"]
        out.loc[idx, "pred_samples_per_s"] = pred["samples_per_s"]
        out.loc[idx, "pred_step_time_s"] = pred["step_s"]
        out.loc[idx, "pred_peak_mem_gib"] = memory_for_kind(pred, kinds)
        out.loc[idx, "pred_fits"] = pred["fits"]
        if "max_micro_batch" in pred:
            out.loc[idx, "pred_max_micro_batch"] = pred["max_micro_batch"]
        out.loc[idx, "pred_defaults_used"] = ["; ".join(configs[i].defaults_used) for i in ok]
    return out
