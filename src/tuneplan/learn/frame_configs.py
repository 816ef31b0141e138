"""A table's rows as configurations, each distinct setting built once.

`row_to_config` on every row gives the same answers, row by row: here the rows are grouped by the
cells it reads but the batch shape (`dataset.BASE_COLUMNS`); each group's model, GPU and job fields
are built once from its first row (`dataset.row_base`), the batch shape once per distinct group and
batch cells, and the physics' arrays once per group, the micro-batch and grad-accumulation columns
set per row. A row whose batch shape a JobSpec would refuse gets the JobSpec's own error (built for
that row)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tuneplan.errors import TuneplanError
from tuneplan.learn.dataset import (
    BASE_COLUMNS,
    BATCH_COLUMNS,
    RowBase,
    RowConfig,
    arrays_for,
    check_terms,
    row_base,
)


@dataclass
class FrameConfigs:
    """Per row: its error (None: predictable), its group, micro-batch and grad accumulation, the
    defaults it took; per group: its configuration at one of its rows' batch shapes (None when no row
    of the group can be predicted) and what its peak memory measures."""

    errors: list[str | None]
    group: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    defaults_used: list[str]
    configs: list[RowConfig | None]
    mem_kinds: list[str]  # per group: what `predict_frame` reads its peak memory as


def group_ids(keys: list[np.ndarray], n: int) -> np.ndarray:
    """One id per row of `n`, equal for rows whose `keys` (columns' values) are equal, missing cells
    alike, numbered in order of first appearance."""
    if not keys:
        return np.zeros(n, dtype=np.int64)
    return pd.Series(np.empty(n)).groupby(keys, dropna=False, sort=False).ngroup().to_numpy(dtype=np.int64)


def _batch_ok(mb: int, ga: int, cache: dict) -> bool:
    """Whether a JobSpec takes this micro-batch and grad accumulation (their own bounds only)."""
    key = ("batch-ok", mb, ga)
    if key not in cache:
        from tuneplan.specs.job import JobSpec

        try:
            JobSpec(micro_batch=mb, grad_accum=ga)
            cache[key] = True
        except ValueError:
            cache[key] = False
    return cache[key]


def _batch(row: dict, base: RowBase, config: RowConfig | None, cache: dict) -> tuple[int, int, str, RowConfig]:
    """(micro-batch, grad accumulation, the defaults taken, the group's configuration) of a row of the
    group of `base` (`config`: the group's configuration so far). Raises TuneplanError: why not."""
    mb, ga, used = base.shape(row)
    if config is None or not _batch_ok(mb, ga, cache):
        own = base.config(mb, ga, used, cache)  # the JobSpec's own words for this row (its error, if any)
        if config is None:  # the group's: the physics' arrays read its job's fields but the batch shape
            check_terms(base.model, own.job, cache)  # (an error every row of the group meets again)
            config = own
    return mb, ga, "; ".join(base.used_head + used + base.used_tail), config


def frame_configs(df: pd.DataFrame) -> FrameConfigs:
    """Every row's configuration as `configs_from_rows` gives it, built per distinct setting."""
    cache: dict = {}
    gid = group_ids([df[c].to_numpy() for c in BASE_COLUMNS if c in df.columns], len(df))
    # each distinct (group, batch cells) once
    combo = group_ids([gid] + [df[c].to_numpy() for c in BATCH_COLUMNS if c in df.columns], len(df))
    read = [c for c in dict.fromkeys(BASE_COLUMNS + BATCH_COLUMNS) if c in df.columns]  # all `row_to_config` reads
    reps = df.iloc[np.unique(gid, return_index=True)[1]][read].to_dict("records")
    bases: list[RowBase | str] = []  # per group: its base, or why its rows cannot be predicted
    for rep in reps:
        try:
            bases.append(row_base(rep, cache))
        except TuneplanError as exc:
            bases.append(str(exc))
    configs: list[RowConfig | None] = [None] * len(reps)
    at = np.unique(combo, return_index=True)[1]
    c_err: list[str | None] = []
    c_used: list[str] = []
    c_mb = np.zeros(len(at), dtype=np.int64)
    c_ga = np.zeros(len(at), dtype=np.int64)
    batch = [c for c in BATCH_COLUMNS if c in df.columns]
    for k, (j, row) in enumerate(zip(gid[at].tolist(), df.iloc[at][batch].to_dict("records"), strict=True)):
        base, err, used = bases[j], None, ""
        if isinstance(base, str):
            err = base
        else:
            try:
                c_mb[k], c_ga[k], used, configs[j] = _batch(row, base, configs[j], cache)
            except TuneplanError as exc:
                err = str(exc)
        c_err.append(err)
        c_used.append(used)
    rows = combo.tolist()
    return FrameConfigs(errors=[c_err[k] for k in rows], group=gid, micro_batch=c_mb[combo], grad_accum=c_ga[combo],
                        defaults_used=[c_used[k] for k in rows], configs=configs,
                        mem_kinds=[str(r.get("mem_kind") or "unknown") for r in reps])


def group_arrays(fc: FrameConfigs, groups: np.ndarray, constants=None) -> dict[str, np.ndarray]:
    """The physics' arrays of each of the given (sorted, predictable) groups at its job."""
    return arrays_for([fc.configs[j] for j in groups], constants)


def frame_arrays(fc: FrameConfigs, rows: np.ndarray, constants=None,
                 built: tuple[np.ndarray, dict[str, np.ndarray]] | None = None) -> dict[str, np.ndarray]:
    """The physics' arrays of the given (predictable) rows: `arrays_for` of their configurations
    (`built`: (groups, `group_arrays` of them), used when the rows' groups are those)."""
    groups, at = np.unique(fc.group[rows], return_inverse=True)
    if built is not None and np.array_equal(built[0], groups):
        base = built[1]
    else:
        base = group_arrays(fc, groups, constants)
    a = {k: v[at] for k, v in base.items()}
    a["micro_batch"] = fc.micro_batch[rows].astype(float)
    a["grad_accum"] = fc.grad_accum[rows].astype(float)
    return a
