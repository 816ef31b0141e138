"""predict over many rows: each row its configuration's figures, or its error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tests.conftest import SHARED, reference_dir

from tuneplan.learn.dataset import arrays_for, configs_from_rows
from tuneplan.runs import read_runs

REF = str(SHARED / "reference" / "runs")
pytestmark = pytest.mark.skipif(reference_dir() is None, reason="the shared reference runs are not beside the checkout")


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


def test_search_with_lookahead_finds_the_same_micro_batch_as_one_halving_per_call():
    from tuneplan.estimators.base import get_estimator

    est = get_estimator("tuneplan")
    df = read_runs([f"{REF}/litgpt.csv", f"{REF}/xtuner.csv"]).df
    configs = [c for c in configs_from_rows(df.to_dict("records"))[0] if c is not None]
    a = arrays_for(configs, est.constants)
    assert len(configs) > 64  # more rows than LOOKAHEAD_MAX_ROWS: one halving per call
    want = np.asarray(est.predict_arrays(a, with_max_batch=True)["max_micro_batch"])
    for i in range(0, len(configs), 7):  # one row at a time: several halvings per call
        one = {k: v[i:i + 1] if isinstance(v, np.ndarray) and v.shape[:1] == (len(configs),) else v for k, v in a.items()}
        assert est.max_micro_batch(one)[0] == want[i]


def test_predict_frame_gives_each_row_its_configuration_or_its_error(varied):
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.predict_table import predict_frame

    configs, errors = configs_from_rows(varied.to_dict("records"))
    out = predict_frame(varied, get_estimator("tuneplan"), with_max_batch=False)
    assert [e if isinstance(e, str) else None for e in out["error"]] == errors
    ok = [i for i, c in enumerate(configs) if c is not None]
    assert 100 < len(ok) < len(varied)
    assert all(e is not None for e, r in zip(errors, varied["id"].str.endswith("-v4"), strict=True) if r)
    assert out["pred_defaults_used"].iloc[ok].tolist() == ["; ".join(configs[i].defaults_used) for i in ok]
    assert out["pred_tokens_per_s"].iloc[ok].notna().all() and out["pred_tokens_per_s"].isna().sum() == len(varied) - len(ok)
