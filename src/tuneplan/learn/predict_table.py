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
        out.loc[idx, "pred_tokens_per_s"] = pred["tokens_per_s"]
        out.loc[idx, "pred_samples_per_s"] = pred["samples_per_s"]
        out.loc[idx, "pred_step_time_s"] = pred["step_s"]
        out.loc[idx, "pred_peak_mem_gib"] = memory_for_kind(pred, kinds)
        out.loc[idx, "pred_peak_mem_allocated_gib"] = pred["allocated_gib"]
        out.loc[idx, "pred_peak_mem_reserved_gib"] = pred["reserved_gib"]
        out.loc[idx, "pred_fits"] = pred["fits"]
        if "max_micro_batch" in pred:
            out.loc[idx, "pred_max_micro_batch"] = pred["max_micro_batch"]
        used = [fc.defaults_used[i] for i in ok]
        _set_new_column(out, idx, "pred_defaults_used", used)
        if interval:
            add_interval_columns(out, estimator.name, interval, calibration, (idx, fc.group[rows], fc.configs, used, pred))
    return out


def _set_new_column(out: pd.DataFrame, idx: pd.Index, col: str, values: list) -> None:
    """`out.loc[idx, col] = values`: a column not yet in `out` built at once from the values aligned on
    the index (the same column: dtype, values, missing rows), not filled and then set row by row
    (~0.15 s for 175,000 texts under pandas 3's string dtype)."""
    if col in out.columns or not out.index.is_unique:
        out.loc[idx, col] = values
        return
    out[col] = pd.Series(values, index=idx)


def _predict_distinct(fc, rows: np.ndarray, estimator, with_max_batch: bool) -> dict[str, np.ndarray]:
    """`predict_configs` of the rows' configurations: the predictions on all rows at once (as one
    call over the rows gives them), the largest micro-batch searched once per distinct configuration
    but its micro-batch."""
    from tuneplan.learn.frame_configs import frame_arrays, group_arrays

    groups = np.unique(fc.group[rows])
    built = (groups, group_arrays(fc, groups, estimator.constants))  # each group's arrays, built once
    shape = np.stack([fc.group[rows], fc.micro_batch[rows], fc.grad_accum[rows]], axis=1)
    first, inverse = distinct_rows(shape)
    if _distinct_pays(estimator, len(first), len(rows)):
        a = frame_arrays(fc, rows[first], estimator.constants, built)
        pred = predict_configs_arrays(a, estimator, False, represents=len(rows))
        out = {k: v[inverse] for k, v in pred.items()}
    else:
        out = predict_configs_arrays(frame_arrays(fc, rows, estimator.constants, built), estimator, False)
    if with_max_batch and estimator.memory_model is not None:
        # the search sets the micro-batch itself: once per distinct configuration but its micro-batch
        first, inverse = distinct_rows(shape[:, [0, 2]])
        a = frame_arrays(fc, rows[first], estimator.constants, built)
        out["max_micro_batch"] = np.asarray(_search(estimator.memory_model, a, len(rows)), dtype=int)[inverse]
    return out


def distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(table, axis=0, return_index=True, return_inverse=True)[1:]` (inverse flattened) for a
    table of non-negative integers, through one integer per row (its cells as the digits of a number):
    the rows in the same (lexicographic) order, a sort of integers instead of one of records."""
    table = np.asarray(table, dtype=np.int64)
    radix = [int(c.max(initial=0)) + 1 for c in table.T]
    if len(table) and int(table.min()) >= 0 and float(np.prod(radix, dtype=float)) < 2.0 ** 62:
        key = np.zeros(len(table), dtype=np.int64)
        for c, r in zip(table.T, radix, strict=True):
            key = key * r + c
        first, inverse = np.unique(key, return_index=True, return_inverse=True)[1:]
    else:
        first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)[1:]
    return first, np.asarray(inverse).ravel()


def _search(model, a: dict[str, np.ndarray], rows: int) -> np.ndarray:
    """The largest micro-batch of each distinct configuration, searched as over all `rows` rows."""
    import inspect

    if "represents" in inspect.signature(model.max_micro_batch).parameters:
        return model.max_micro_batch(a, represents=rows)
    return model.max_micro_batch(a)


def _distinct_pays(estimator, distinct: int, rows: int) -> bool:
    """Whether to predict each distinct configuration once: when some repeat, and the estimator takes
    `represents` (so that its choices follow the rows the distinct ones stand for, and the figures are
    those of all rows at once)."""
    import inspect

    return distinct < rows and "represents" in inspect.signature(estimator.predict_arrays).parameters
