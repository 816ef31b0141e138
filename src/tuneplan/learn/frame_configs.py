"""A table's rows as configurations, each distinct setting built once.

`row_to_config` on every row gives the same answers, row by row: here the rows are grouped by the
cells it reads but the batch shape (`dataset.BASE_COLUMNS`); each group's model, GPU and job fields
are built once from its first row, the batch shape (`dataset.batch_shape`) once per distinct
(data-parallel degree, micro-batch, grad-accumulation, global-batch) cells, and the physics' arrays
once per group, the micro-batch and grad-accumulation columns set per row. A row whose batch shape a
JobSpec would refuse gets the JobSpec's own error (built for that row)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tuneplan.errors import TuneplanError
from tuneplan.learn.dataset import (
    BASE_COLUMNS,
    BATCH_COLUMNS,
    RowBase,
    _Defaults,
    _memo,
    _row_head,
    _row_tail,
    batch_shape,
    row_job,
)


def appearance_firsts(codes: np.ndarray) -> np.ndarray | None:
    """The row where each code first appears, when the codes are numbered 0, 1, 2... in order of first
    appearance (as `pd.factorize` and dictionary encoding number them), in one pass; else None."""
    codes = np.asarray(codes)
    if len(codes) == 0 or codes[0] != 0:
        return None
    new = np.empty(len(codes), dtype=bool)
    new[0] = True
    np.greater(codes[1:], np.maximum.accumulate(codes[:-1]), out=new[1:])
    first = np.flatnonzero(new)
    if not np.array_equal(codes[first], np.arange(len(first))) or int(codes.min()) < 0:
        return None
    return first


def first_rows(codes: np.ndarray) -> np.ndarray:
    """`np.unique(codes, return_index=True)[1]` for codes numbered in order of first appearance (as
    `pd.factorize` numbers them): the row where each code first appears, in one pass
    instead of a sort (`appearance_firsts`). Codes in another order take `np.unique` itself."""
    codes = np.asarray(codes)
    if len(codes) == 0:
        return np.zeros(0, dtype=np.intp)
    first = appearance_firsts(codes)
    return np.unique(codes, return_index=True)[1] if first is None else first


def object_ids(values: np.ndarray) -> np.ndarray:
    """`id()` of each object of a 1-D object array: read from the array's own pointers (CPython's
    `id` is the object's address) when the array is contiguous, else one `id` call per cell."""
    import ctypes
    import sys

    if (values.ndim == 1 and len(values) and values.flags.c_contiguous and sys.implementation.name == "cpython"
            and values.itemsize == ctypes.sizeof(ctypes.c_ssize_t)):
        pointers = (ctypes.c_ssize_t * len(values)).from_address(values.ctypes.data)
        return np.ctypeslib.as_array(pointers).astype(np.int64)  # a copy: nothing refers to the array after
    return np.fromiter(map(id, values), dtype=np.int64, count=len(values))


@dataclass
class FrameConfigs:
    """Per row: its error (None: predictable), its group, micro-batch and grad accumulation, the
    defaults it took; per group: its base (None when the group cannot be predicted) and job."""

    errors: list[str | None]
    group: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    defaults_used: list[str]
    bases: list[RowBase | None]
    jobs: list[Any]
    mem_kinds: list[str]  # per group: what `predict_frame` reads its peak memory as


def group_ids(df: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """One id per row, equal for rows whose cells in `columns` are equal (ids in order of first
    appearance)."""
    n = len(df)
    key = np.zeros(n, dtype=np.int64)
    for col in columns:
        codes = _codes(df[col])
        key = pd.factorize(key * (int(codes.max(initial=0)) + 1) + codes)[0].astype(np.int64)
    return key


def _codes(s: pd.Series) -> np.ndarray:
    """Codes equal for equal cells (0 for a missing one)."""
    values = s.to_numpy()
    if values.dtype == object:  # by object first (cheap), then the distinct objects by value
        codes = pd.factorize(object_ids(values))[0]
        objects = values[first_rows(codes)]
        return pd.factorize(objects, use_na_sentinel=True)[0].astype(np.int64)[codes] + 1
    return pd.factorize(s, use_na_sentinel=True)[0].astype(np.int64) + 1


def _column(df: pd.DataFrame, col: str) -> list[Any]:
    """The column's cells as `dataset._get` reads each (None for a missing, NaN or blank cell)."""
    if col not in df.columns:
        return [None] * len(df)
    return [None if x is None or (isinstance(x, float) and math.isnan(x)) or (isinstance(x, str) and not x.strip())
            else x for x in df[col].tolist()]


def _bases(reps: list[dict], cache: dict) -> tuple[list, list, list, list]:
    """Per group: (head error, head defaults, tail error, base)."""
    head_err: list[str | None] = []
    heads: list[Any] = []
    tail_err: list[str | None] = []
    bases: list[RowBase | None] = []
    for rep in reps:
        used = _Defaults()
        try:
            head = _row_head(rep, cache, used)
        except TuneplanError as exc:
            head_err.append(str(exc))
            heads.append(None)
            tail_err.append(None)
            bases.append(None)
            continue
        head_err.append(None)
        heads.append((head, list(used)))
        try:
            bases.append(_row_tail(rep, head, _Defaults(used)))
            tail_err.append(None)
        except TuneplanError as exc:
            bases.append(None)
            tail_err.append(str(exc))
    return head_err, heads, tail_err, bases


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


def _group_jobs(bases: list[RowBase | None], cache: dict, given: Any = None) -> tuple[list, list]:
    """Per group: its job at micro-batch 1 and no accumulation (None when a JobSpec refuses it; `given`:
    that job) and the model-terms check's error."""
    from tuneplan.physics.terms import model_terms, terms_key

    jobs: list[Any] = []
    terms_err: list[str | None] = []
    for b in bases:
        job, err = None, None
        if b is not None:
            try:
                job = given if given is not None else row_job(b, 1, 1, cache)
                _memo(cache, ("terms", b.model.name, b.model.n_layers, b.model.params_total, *terms_key(job)),
                      model_terms, b.model, job)
            except TuneplanError as exc:
                err = str(exc)
        jobs.append(job)
        terms_err.append(err)
    return jobs, terms_err


def frame_configs(df: pd.DataFrame) -> FrameConfigs:
    """Every row's configuration as `configs_from_rows` gives it, built per distinct setting."""
    cache: dict = {}
    n = len(df)
    gid = group_ids(df, [c for c in BASE_COLUMNS if c in df.columns])
    first = first_rows(gid)
    read = [c for c in dict.fromkeys(BASE_COLUMNS + BATCH_COLUMNS) if c in df.columns]  # all `row_to_config` reads
    reps = df.iloc[first][read].to_dict("records") if n else []
    head_err, heads, tail_err, bases = _bases(reps, cache)
    jobs, terms_err = _group_jobs(bases, cache)
    # each distinct (group, batch cells) once
    combo = gid.copy()
    for col in BATCH_COLUMNS:
        codes = _codes(df[col]) if col in df.columns else np.zeros(n, dtype=np.int64)
        combo = pd.factorize(combo * (int(codes.max(initial=0)) + 1) + codes)[0].astype(np.int64)
    at = first_rows(combo)
    sub = df.iloc[at]
    cells = zip(*(_column(sub, c) for c in BATCH_COLUMNS), strict=True)
    shapes: dict[tuple, tuple[int, int, list[str]]] = {}
    c_err: list[str | None] = []
    c_used: list[str] = []
    c_mb = np.zeros(len(at), dtype=np.int64)
    c_ga = np.zeros(len(at), dtype=np.int64)
    for k, (j, (mb, ga, gb)) in enumerate(zip(gid[at].tolist(), cells, strict=True)):
        err, used = _shape(j, mb, ga, gb, heads, head_err, tail_err, bases, jobs, terms_err, shapes, cache)
        c_err.append(err)
        if err is None:
            c_mb[k], c_ga[k] = used[0], used[1]
        c_used.append(used[2] if err is None else "")
    rows = combo.tolist()
    return FrameConfigs(errors=[c_err[k] for k in rows], group=gid, micro_batch=c_mb[combo], grad_accum=c_ga[combo],
                        defaults_used=[c_used[k] for k in rows], bases=bases, jobs=jobs,
                        mem_kinds=[str(r.get("mem_kind") or "unknown") for r in reps])


def _shape(j: int, mb: Any, ga: Any, gb: Any, heads: list, head_err: list, tail_err: list, bases: list, jobs: list,
           terms_err: list, shapes: dict, cache: dict) -> tuple[str | None, Any]:
    """(error, (micro-batch, grad accumulation, the defaults taken)) of a row of group j with these
    batch cells."""
    if head_err[j] is not None:
        return head_err[j], None
    head, used_head = heads[j]
    pp = head[6].get("pp", 1)
    key = (head[-1], pp, mb, ga, gb)
    shape = shapes.get(key)
    if shape is None:
        used = _Defaults()
        m, g = batch_shape(head[-1], mb, ga, gb, used, pp)
        shape = shapes[key] = (m, g, list(used))
    if tail_err[j] is not None:
        return tail_err[j], None
    m, g, used_batch = shape
    mbi, gai = int(float(m)), int(float(g))
    if jobs[j] is None or not _batch_ok(mbi, gai, cache):
        try:  # the JobSpec's own words for this row (its error, whatever the group's job says)
            job = row_job(bases[j], mbi, gai, cache)
        except TuneplanError as exc:
            return str(exc), None
        if jobs[j] is None:  # not seen: a JobSpec that takes this shape but not micro-batch 1
            (jobs[j],), (terms_err[j],) = _group_jobs([bases[j]], cache, job)
    if terms_err[j] is not None:
        return terms_err[j], None
    return None, (mbi, gai, "; ".join(used_head + used_batch + bases[j].used_tail))


def group_arrays(fc: FrameConfigs, groups: np.ndarray, constants=None) -> dict[str, np.ndarray]:
    """The physics' arrays of each of the given (sorted, predictable) groups at its job."""
    from tuneplan.physics.terms import build_arrays

    base = build_arrays([(fc.bases[j].model, fc.bases[j].gpu, fc.jobs[j], fc.bases[j].seq_len) for j in groups],
                        constants)
    base["reports_reserved"] = np.array([0.0 if fc.bases[j].mem_kind == "allocated" else 1.0 for j in groups])
    return base


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
