"""Predict a table of measured runs with any estimator: the `pred_*` columns that `tuneplan predict`
writes and that calibration and validation compare against the measurements."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tuneplan.estimators.tuneplan_physics import memory_for_kind
from tuneplan.learn.dataset import RowConfig, arrays_for
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
    return predict_configs_arrays(arrays_for(configs, estimator.constants), estimator, with_max_batch)


def predict_configs_arrays(a: dict[str, np.ndarray], estimator, with_max_batch: bool = True,
                           represents: int | None = None) -> dict[str, np.ndarray]:
    """`predict_configs` from the configurations' arrays (`represents`: `TuneplanEstimator.predict_arrays`)."""
    out = estimator.predict_arrays(a) if represents is None else estimator.predict_arrays(a, represents=represents)
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
    `interval` coverage, the interval columns of `calibration`'s residuals (`add_interval_columns`).

    The configurations are built per distinct setting (`frame_configs`), the predictions made once
    per distinct configuration and the largest micro-batch searched once per distinct configuration
    but its micro-batch: the same figures as predicting each row on its own."""
    from tuneplan.learn.frame_configs import frame_configs

    fc = frame_configs(df)
    ok = [i for i, e in enumerate(fc.errors) if e is None]
    out = df.copy()
    for col in PRED_COLUMNS:
        out[col] = np.nan if col not in ("pred_estimator", "error", "pred_fits") else None
    out["pred_estimator"] = estimator.name
    out["error"] = fc.errors
    if ok:
        rows = np.asarray(ok)
        pred = _predict_distinct(fc, rows, estimator, with_max_batch)
        kinds = [fc.mem_kinds[j] for j in fc.group[rows].tolist()]
        idx = out.index[ok]
        for col, key in PRED_FROM.items():
            if key in pred:
                out.loc[idx, col] = pred[key]
        out.loc[idx, "pred_peak_mem_gib"] = memory_for_kind(pred, kinds)
        used = [fc.defaults_used[i] for i in ok]
        out.loc[idx, "pred_defaults_used"] = used
        if interval:
            add_interval_columns(out, estimator.name, interval, calibration, (idx, fc.group[rows], fc.configs, used, pred))
    return out


def _predict_distinct(fc, rows: np.ndarray, estimator, with_max_batch: bool) -> dict[str, np.ndarray]:
    """`predict_configs` of the rows' configurations: the predictions on all rows at once (as one
    call over the rows gives them), the largest micro-batch searched once per distinct configuration
    but its micro-batch."""
    from tuneplan.learn.frame_configs import frame_arrays, group_arrays

    groups = np.unique(fc.group[rows])
    built = (groups, group_arrays(fc, groups, estimator.constants))  # each group's arrays, built once
    shape = np.stack([fc.group[rows], fc.micro_batch[rows], fc.grad_accum[rows]], axis=1)
    first, inverse = _distinct(shape)
    if _distinct_pays(estimator, len(first), len(rows)):
        a = frame_arrays(fc, rows[first], estimator.constants, built)
        pred = predict_configs_arrays(a, estimator, False, represents=len(rows))
        out = {k: v[inverse] for k, v in pred.items()}
    else:
        out = predict_configs_arrays(frame_arrays(fc, rows, estimator.constants, built), estimator, False)
    if with_max_batch and estimator.memory_model is not None:
        # the search sets the micro-batch itself: once per distinct configuration but its micro-batch
        first, inverse = _distinct(shape[:, [0, 2]])
        a = frame_arrays(fc, rows[first], estimator.constants, built)
        out["max_micro_batch"] = np.asarray(estimator.memory_model.max_micro_batch(a, represents=len(rows)),
                                           dtype=int)[inverse]
    return out


def _distinct_pays(estimator, distinct: int, rows: int) -> bool:
    """Whether to predict each distinct configuration once: when some repeat, and the estimator takes
    `represents` (so that its choices follow the rows the distinct ones stand for, and the figures are
    those of all rows at once)."""
    import inspect

    return distinct < rows and "represents" in inspect.signature(estimator.predict_arrays).parameters


def _distinct(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct row of `table` and each row's distinct one (`np.unique` along rows)."""
    first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)[1:]
    return first, np.asarray(inverse).ravel()
