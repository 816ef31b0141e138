"""Measured targets from run rows: throughput (tokens/s, all GPUs) and peak memory per GPU, with the
rows each metric can honestly use (duplicates counted once, estimates excluded)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tuneplan.learn.dataset import RowConfig, configs_from_rows


def numeric_column(df: pd.DataFrame, name: str) -> np.ndarray:
    """The column as floats (NaN where absent or not a number)."""
    if name not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)


NORMALISED_MARK = "usable_throughput"
"""A column the runs normaliser adds: its table already holds every token figure that can be derived."""


def measured_tokens_per_s(df: pd.DataFrame) -> np.ndarray:
    """tokens/s as measured: the tokens_per_s column, else per-GPU x GPUs, or tokens / runtime. A
    normalised table (`tuneplan.runs.read_runs`) already holds every token figure its rows' token counts
    give (variable-length samples with no count have none: samples/s x max length overstates them); a
    raw one falls back to samples/s or global batch / step time, times avg_tokens_per_sample or seq_len."""
    t = numeric_column(df, "tokens_per_s")
    gpus = numeric_column(df, "gpus")
    cand = [
        numeric_column(df, "tokens_per_s_per_gpu") * np.where(np.isnan(gpus), 1.0, gpus),
        numeric_column(df, "train_tokens_total") / numeric_column(df, "runtime_s"),
    ]
    if NORMALISED_MARK not in df.columns:
        seq = numeric_column(df, "avg_tokens_per_sample")
        seq = np.where(np.isnan(seq), numeric_column(df, "seq_len"), seq)
        cand += [numeric_column(df, "samples_per_s") * seq,
                 numeric_column(df, "global_batch_size") * seq / numeric_column(df, "step_time_s")]
    for c in cand:
        t = np.where(np.isnan(t), c, t)
    t[~(t > 0)] = np.nan
    return t


def uncounted_token_rows(df: pd.DataFrame) -> np.ndarray:
    """Rows with a usable throughput figure (samples/s, step or run time) but no token count."""
    timed = [np.isfinite(numeric_column(df, c)) for c in ("samples_per_s", "step_time_s", "runtime_s")]
    return np.logical_or.reduce(timed) & ~np.isfinite(measured_tokens_per_s(df))


def _flag(df: pd.DataFrame, name: str, default: bool) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), default, dtype=bool)
    return df[name].astype(object).where(df[name].notna(), default).astype(bool).to_numpy(dtype=bool)


@dataclass
class TrainingSet:
    """Rows that can be configured, with their measurements and which metric each supports."""

    df: pd.DataFrame  # the rows (index aligned with configs)
    configs: list[RowConfig]
    tokens_per_s: np.ndarray  # measured; NaN where not usable
    peak_mem_gib: np.ndarray  # measured; NaN where not usable
    mem_kind: list[str]
    is_oom: np.ndarray
    source: np.ndarray
    skipped: list[str]  # reasons for rows left out
    notes: list[str] = field(default_factory=list)  # metrics some rows cannot support, and why

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def has_throughput(self) -> np.ndarray:
        return np.isfinite(self.tokens_per_s)

    @property
    def has_memory(self) -> np.ndarray:
        return np.isfinite(self.peak_mem_gib)

    def subset(self, mask: np.ndarray) -> TrainingSet:
        idx = np.flatnonzero(mask)
        return TrainingSet(df=self.df.iloc[idx].reset_index(drop=True), configs=[self.configs[i] for i in idx],
                           tokens_per_s=self.tokens_per_s[idx], peak_mem_gib=self.peak_mem_gib[idx],
                           mem_kind=[self.mem_kind[i] for i in idx], is_oom=self.is_oom[idx],
                           source=self.source[idx], skipped=[])

    def fingerprint(self) -> str:
        import hashlib

        cols = [c for c in ("id", "source", "model", "gpu", "method", "micro_batch_size", "seq_len", "gpus",
                            "tokens_per_s", "peak_mem_gib") if c in self.df.columns]
        text = self.df[cols].astype(str).to_csv(index=False, lineterminator="\n")
        return hashlib.sha256(text.encode()).hexdigest()


def training_set(df: pd.DataFrame) -> TrainingSet:
    """Configure every row; keep those that configure, with their usable measurements."""
    df = df.reset_index(drop=True)
    dup, est, oom = (_flag(df, c, False) for c in ("is_duplicate", "is_estimate", "is_oom"))
    usable_t, usable_m = (_flag(df, c, True) for c in ("usable_throughput", "usable_memory"))
    rows = df.to_dict("records")
    configs, errors = configs_from_rows(rows)
    ok = np.array([c is not None for c in configs], dtype=bool) & ~dup & ~est
    skipped = [f"{r.get('id', i)}: {e}" for i, (r, e) in enumerate(zip(rows, errors, strict=True)) if e]
    idx = np.flatnonzero(ok)
    thr = np.where(usable_t & ~oom, measured_tokens_per_s(df), np.nan)
    mem = numeric_column(df, "peak_mem_gib")
    mem = np.where(usable_m & ~oom & (mem > 0), mem, np.nan)
    uncounted = int((uncounted_token_rows(df) & usable_t & ~oom & ok).sum())
    notes = [f"{uncounted} rows time samples, steps or whole runs but give no token count (samples of varying "
             "length without avg_tokens_per_sample, or no tokens total): left out of throughput"] if uncounted else []
    kinds = [str(rows[i].get("mem_kind") or "unknown") if rows[i].get("mem_kind") == rows[i].get("mem_kind")
             else "unknown" for i in idx]
    return TrainingSet(
        df=df.iloc[idx].reset_index(drop=True), configs=[configs[i] for i in idx], tokens_per_s=thr[idx],
        peak_mem_gib=mem[idx], mem_kind=kinds, is_oom=oom[idx],
        source=df["source"].astype(str).to_numpy()[idx] if "source" in df.columns else np.full(len(idx), "runs"),
        skipped=skipped, notes=notes,
    )
