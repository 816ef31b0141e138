"""Issue 19 point 7, predict rows/s: the per-distinct-setting paths give the row-by-row answers."""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import pytest

from tuneplan.learn.dataset import BASE_COLUMNS, BATCH_COLUMNS, arrays_for, configs_from_rows, row_to_config
from tuneplan.learn.frame_configs import frame_arrays, frame_configs
from tuneplan.runs import read_runs

REF = "../shared/reference/runs"


@pytest.fixture(scope="module")
def varied() -> pd.DataFrame:
    """Reference rows with their batch shape varied (some empty, a global batch only, a bad one)."""
    df = read_runs([f"{REF}/litgpt.csv", f"{REF}/xtuner.csv", f"{REF}/llmftbench.csv", f"{REF}/peft.csv"]).df
    parts = [df]
    for k, (mb, ga, gb) in enumerate([(2.0, np.nan, np.nan), (np.nan, 2.0, 64.0), (np.nan, np.nan, np.nan),
                                      (3.0, 1.0, 24.0), (2e6, 1.0, np.nan), (np.nan, 1.0, 1e7)]):
        d = df.copy()
        d["micro_batch_size"], d["grad_accum"], d["global_batch_size"] = mb, ga, gb
        d["id"] = d["id"] + f"-v{k}"
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


class _Reads(dict):
    seen: set[str]

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)


def test_row_to_config_reads_only_the_listed_columns(varied):
    seen: set[str] = set()
    for row in varied.to_dict("records")[::7]:
        r = _Reads(row)
        r.seen = seen
        with contextlib.suppress(Exception):  # the reads up to an error count too
            row_to_config(r, {})
    assert seen <= set(BASE_COLUMNS) | set(BATCH_COLUMNS), seen - set(BASE_COLUMNS) - set(BATCH_COLUMNS)


def test_frame_configs_equal_row_by_row(varied):
    configs, errors = configs_from_rows(varied.to_dict("records"))
    fc = frame_configs(varied)
    assert fc.errors == errors
    ok = [i for i, c in enumerate(configs) if c is not None]
    assert len(ok) > 100 and len(ok) < len(varied)
    refused = varied["id"].str.endswith("-v4").to_numpy()  # a micro-batch a JobSpec refuses
    assert all(e is not None for e, r in zip(fc.errors, refused, strict=True) if r)
    assert [fc.defaults_used[i] for i in ok] == ["; ".join(configs[i].defaults_used) for i in ok]
    want = arrays_for([configs[i] for i in ok])
    got = frame_arrays(fc, np.asarray(ok))
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
