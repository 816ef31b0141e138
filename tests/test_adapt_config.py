"""The few-runs loop's per-configuration offsets (issue 36): a measured configuration's own offset kept for
its other rows as far as configurations carried over on the base's held-out sources (partial pooling)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tuneplan.estimators.calibration import default_calibration
from tuneplan.estimators.stack_adapter import StackAdapter, config_key
from tuneplan.learn.adapt import fit_adapter, kept_share, kept_shares
from tuneplan.learn.measured import training_set
from tuneplan.learn.predict_table import predict_configs

H200 = Path(__file__).resolve().parents[1] / "reference" / "runs" / "tuneplan-h200.csv"
# Four sources whose configuration "a" (7 of 8 rows) sits at +0.2 and "b" (1 row) at -0.2: a revealed "a"
# row predicts its 6 or so mates exactly once its own offset is kept whole.
CARRY = {f"s{i}": {"a|lora": [0.2] * 7, "b|lora": [-0.2]} for i in range(4)}


def test_config_scales_multiply_only_their_model_and_method():
    a = {"_model_names": np.array(["m1", "m1", "m2"], dtype=object),
         "_methods": np.array(["lora", "full", "lora"], dtype=object)}
    ad = StackAdapter(throughput_log_scale=math.log(2.0), config_log_scales={config_key("m1", "lora"): math.log(1.5)})
    # 2 x 1.5 = 3 for m1 lora; the overall 2 for the others
    assert ad.throughput_factor(a, 3) == pytest.approx([3.0, 2.0, 2.0])
    assert StackAdapter.from_dict(ad.to_dict()).config_log_scales == ad.config_log_scales


def test_kept_shares_keep_a_configuration_offset_whole_where_configurations_carry_over():
    # with k = 3 revealed of 8, most draws reveal an "a" row: with the configuration share 1 its mates (at
    # least 4 of the 5 others) are exact, so the median error is 0; with no overall share (0, first on the grid)
    # the pair (0, 1) is the first to reach it (any configuration share under 1 leaves the mates 0.2 x (1 - g) off)
    assert kept_shares(CARRY, 3) == (0.0, 1.0)


def test_kept_shares_without_shared_configurations_is_kept_share():
    # every row its own configuration: no revealed run has a mate, the configuration share changes nothing
    # (0, the first on the grid) and the overall one is chosen on the same draws and errors as kept_share's
    rng = np.random.default_rng(1)
    values = {f"s{i}": rng.normal(0.1 * i, 0.2, 12).tolist() for i in range(4)}
    unique = {s: {f"m{j}|lora": [v] for j, v in enumerate(vals)} for s, vals in values.items()}
    assert kept_shares(unique, 3) == (kept_share(values, 3), 0.0)
    # fewer than 3 sources with more than k rows: kept_share's answer (1: too few to tell), nothing per configuration
    assert kept_shares(dict(list(unique.items())[:2]), 3) == (1.0, 0.0)


def test_fit_adapter_keeps_each_measured_configuration_at_its_own_runs():
    df = pd.read_csv(H200)
    df = df[df["status"] == "ok"].head(3)  # Llama-3.1-8B lora x2, Llama-3.2-1B full x1
    ts = training_set(df)
    base = default_calibration().estimator()
    fit = fit_adapter(base, ts, None, CARRY)  # shares (0, 1): no overall offset, each configuration's own whole
    assert fit.adapter.throughput_log_scale == 0.0
    assert set(fit.adapter.config_log_scales) == {"meta-llama/Llama-3.1-8B|lora", "meta-llama/Llama-3.2-1B|full"}
    p = predict_configs(ts.configs, base.with_stack(fit.adapter), with_max_batch=False)["tokens_per_s"]
    assert p[2] == pytest.approx(ts.tokens_per_s[2], rel=1e-6)  # the one full run: its own offset, whole
    # the two lora runs: their mean (two runs: median_or_mean's mean) log-ratio
    raw = predict_configs(ts.configs, base, with_max_batch=False)["tokens_per_s"]
    mean = np.mean(np.log(ts.tokens_per_s[:2] / raw[:2]))
    assert np.log(p[:2] / raw[:2]) == pytest.approx([mean, mean], rel=1e-6)
