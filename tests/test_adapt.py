"""The few-runs loop (issue 16): the shipped calibration adapted to a user's first runs, what each number
of runs unlocks, the warning on own rows it misses, and the intervals an adapted file carries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tuneplan.cli import main
from tuneplan.estimators.calibration import default_calibration, load_calibration
from tuneplan.estimators.stack_adapter import StackAdapter
from tuneplan.learn.adapt import fit_adapter, kept_share
from tuneplan.learn.calibration import residuals_after_reveal
from tuneplan.learn.measured import training_set
from tuneplan.learn.predict_table import predict_configs

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "reference" / "runs" / "tuneplan-h200.csv"


def _rows(n: int | None = None, method: str | None = None) -> pd.DataFrame:
    df = pd.read_csv(H200)
    df = df[df["status"] == "ok"]
    if method:
        df = df[df["method"] == method]
    return df.head(n) if n else df


def test_one_run_fits_an_overall_scale_that_reproduces_it():
    base = default_calibration().estimator()
    ts = training_set(_rows(1))
    fit = fit_adapter(base, ts)
    assert fit.adapter.method_log_scales == {}  # one run cannot split methods
    assert "per-method" in " ".join(fit.not_fitted)
    p = predict_configs(ts.configs, base.with_stack(fit.adapter), with_max_batch=False)["tokens_per_s"]
    assert p[0] == pytest.approx(ts.tokens_per_s[0], rel=1e-6)  # no prior: the one run's offset kept whole
    assert fit.in_sample_mdape == pytest.approx(0.0, abs=1e-6) and fit.warnings == []


def test_per_method_scales_need_two_runs_of_two_methods():
    df = pd.concat([_rows(2, "lora"), _rows(2, "full")])
    base = default_calibration().estimator()
    fit = fit_adapter(base, training_set(df))
    assert set(fit.adapter.method_log_scales) == {"lora", "full"}
    one = pd.concat([_rows(2, "lora"), _rows(1, "full")])
    assert fit_adapter(base, training_set(one)).adapter.method_log_scales == {}


def test_memory_offset_moves_the_predictions_onto_the_measured_peaks_from_eight_runs():
    from tuneplan.learn.adapt import MEMORY_OFFSET_MIN_ROWS
    from tuneplan.learn.predict_table import memory_for_kind

    base = default_calibration().estimator()
    few = fit_adapter(base, training_set(_rows(1)))
    assert few.adapter.memory_offset_gib == 0.0 and any("memory offset" in x for x in few.not_fitted)
    df = _rows(1)
    df = pd.concat([df] * MEMORY_OFFSET_MIN_ROWS, ignore_index=True).assign(id=lambda d: [f"r{i}" for i in d.index])
    ts = training_set(df)
    fit = fit_adapter(base, ts)
    assert fit.adapter.memory_offset_gib != 0.0
    p = predict_configs(ts.configs, base.with_stack(fit.adapter), with_max_batch=False)
    assert memory_for_kind(p, ts.mem_kind)[0] == pytest.approx(ts.peak_mem_gib[0], rel=1e-3)
    # the parts still add up to the total
    from tuneplan.estimators.contract import MEMORY_PARTS
    from tuneplan.learn.dataset import arrays_for

    out = base.with_stack(fit.adapter).predict_arrays(arrays_for(ts.configs))
    assert sum(out[k][0] for k in MEMORY_PARTS if k in out) == pytest.approx(out["memory_gib"][0], rel=1e-6)


TIGHT = {s: list(off + np.linspace(-0.02, 0.02, 11)) for s, off in (("a", 0.5), ("b", -0.5), ("c", 0.3))}
"""Held-out sources far from the base, each source's rows close together: a few runs tell the offset."""
NOISY = {s: list(np.linspace(-0.4, 0.4, 11)) for s in "abc"}
"""Held-out sources on the base, their rows scattered: a few runs' offset is their noise."""


def test_kept_share_keeps_an_offset_only_where_held_out_sources_show_it_carries_over():
    assert kept_share(TIGHT, 3) == 1.0  # three runs of a source predict its others best taken whole
    assert kept_share(NOISY, 3) == 0.0  # any share of three runs' offset moves the others off
    assert kept_share(None, 3) == kept_share(dict(list(TIGHT.items())[:2]), 3) == 1.0  # too few sources to tell


def test_three_noisy_runs_move_predictions_no_more_than_their_evidence_supports():
    base = default_calibration().estimator()
    ts = training_set(_rows(3, "lora"))
    whole = fit_adapter(base, ts).adapter.throughput_log_scale
    assert abs(whole) > 0.0
    assert fit_adapter(base, ts, TIGHT).adapter.throughput_log_scale == pytest.approx(whole)
    noisy = fit_adapter(base, ts, NOISY)
    assert noisy.adapter.throughput_log_scale == 0.0 and "0% of their offset" in noisy.adapter.describe()


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    from tuneplan.learn.adapt import median_or_mean

    assert median_or_mean(np.array([0.86, 1.07, 0.86, 1.02]), np.ones(4)) == pytest.approx(0.94)
    assert median_or_mean(np.array([3.0, 1.0, 2.0]), np.ones(3)) == 2.0
    assert median_or_mean(np.array([1.0, 2.0]), np.array([1.0, 3.0])) == pytest.approx(1.75)  # two: weighted mean
    assert median_or_mean(np.array([0.0, 1.0, 5.0, 9.0]), np.array([1.0, 1.0, 3.0, 1.0])) == 5.0


def test_an_own_row_missed_by_more_than_its_spread_is_warned():
    df = _rows(4, "lora").copy()
    df.loc[df.index[-1], "tokens_per_s"] *= 3.0  # one run far from what the other three say
    fit = fit_adapter(default_calibration().estimator(), training_set(df))
    assert any(str(df["id"].iloc[-1]) in w for w in fit.warnings)


def test_residuals_after_reveal_remove_each_sources_offset():
    by = {"a": list(np.linspace(0.9, 1.1, 20)), "b": list(np.linspace(-1.1, -0.9, 20)),
          "c": list(np.linspace(-0.1, 0.1, 20))}
    after = np.asarray(residuals_after_reveal(by, 3))
    pooled = np.concatenate([np.asarray(v) for v in by.values()])
    assert np.abs(after).max() < 0.25 < np.abs(pooled).max()
    assert len(after) == 3 * 17  # each source weighs its 17 other rows, not its 20 draws' 340 residuals
    few = residuals_after_reveal({**by, "d": [5.0, 5.1, 4.9, 5.2, 4.8]}, 3)
    assert len(few) == 3 * 17 + 2  # a source of five rows gives two (its five minus the three revealed)


def test_calibrate_adapts_the_shipped_file_and_from_scratch_ignores_it(tmp_path, capsys):
    runs = tmp_path / "mine.csv"
    _rows(3).to_csv(runs, index=False)
    out = tmp_path / "mine.json"
    assert main(["calibrate", "--runs", str(runs), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "starting from the shipped calibration" in err and "in-sample throughput error" in err
    cal = load_calibration(str(out))
    assert cal.payload["stack"]["n_rows"]["throughput"] == 3
    assert StackAdapter.from_dict(cal.payload["stack"]).fitted
    est = cal.estimator()
    assert est.stack is not None and any("Adapted to your own runs" in a for a in est.assumptions())
    # too few rows to fit from scratch: says so, writes nothing
    assert main(["calibrate", "--runs", str(runs), "--from-scratch", "--out", str(tmp_path / "s.json")]) == 1
    assert not (tmp_path / "s.json").exists()
    assert main(["calibrate", "--runs", str(runs), "--from-scratch", "--base", str(out),
                 "--out", str(tmp_path / "s.json")]) == 2
    capsys.readouterr()
    assert main(["calibrate", "--runs", str(runs), "--base", str(tmp_path / "nope.json"),
                 "--out", str(tmp_path / "s.json")]) == 2
    assert "base: no such calibration file" in capsys.readouterr().err


def test_estimate_with_an_adapted_calibration(tmp_path, capsys):
    runs = tmp_path / "mine.csv"
    # 8 runs: the shipped file's kept share for a stack's first 1-2 runs is 0 (a source's few rows scatter
    # more than sources sit apart), so fewer would leave the estimate where it was, by design
    _rows(8).to_csv(runs, index=False)
    out = tmp_path / "mine.json"
    assert main(["calibrate", "--runs", str(runs), "--out", str(out)]) == 0
    from tuneplan import estimate

    kw = dict(method="lora", examples=1000, tokens_per_example=2048, micro_batch=1)
    shipped = estimate("meta-llama/Llama-3.1-8B", "H200-SXM-141GB", **kw)
    adapted = estimate("meta-llama/Llama-3.1-8B", "H200-SXM-141GB", calibration=str(out), **kw)
    assert adapted.step_time_s != shipped.step_time_s
    assert adapted.interval is not None


def test_probe_rounds_remeasure_a_spread_and_flag_a_busy_cpu():
    from tuneplan.profile.device import best_of_rounds, plausibility_warnings

    calls = iter([1.0, 0.5, 0.9, 1.0, 0.98, 0.99])  # first attempt spreads 100%: measured again
    best, spread = best_of_rounds(lambda: next(calls))
    assert best == 1.0 and spread == pytest.approx(1.0 / 0.98 - 1.0)
    busy = {"peak_tflops": {"fp32": 0.0008}, "_spreads": {"fp32 matmul": 0.4}}
    w = plausibility_warnings(busy, cuda=False, threads=2, catalog_peak_tflops=None)
    assert any("busy" in x and "GFLOP/s" in x for x in w) and any("40%" in x for x in w)
    healthy = {"peak_tflops": {"fp32": 0.2}, "_spreads": {"fp32 matmul": 0.03}}
    assert plausibility_warnings(healthy, cuda=False, threads=2, catalog_peak_tflops=None) == []
    slow_gpu = {"peak_tflops": {"bf16": 100.0}, "_spreads": {}}
    assert plausibility_warnings(slow_gpu, cuda=True, threads=1, catalog_peak_tflops=989.0)


def test_runs_predicted_not_to_fit_do_not_set_the_throughput_scale():
    """Two runs that fit and one the base predicts not to fit (the same job at 16x the micro-batch, slowed
    at the memory limit): the scale comes from the two, the third is named and still warned about."""
    from tuneplan.learn.adapt import EDGE_NOTE

    base = default_calibration().estimator()
    two = _rows(2, "lora").reset_index(drop=True)
    edge = two.iloc[[0]].assign(id="edge", micro_batch_size=two["micro_batch_size"].iloc[0] * 64,
                                global_batch_size=np.nan, tokens_per_s=two["tokens_per_s"].iloc[0] / 3)
    ts_edge = training_set(edge)
    assert not predict_configs(ts_edge.configs, base, with_max_batch=False)["fits"][0]
    fit = fit_adapter(base, training_set(pd.concat([two, edge], ignore_index=True)))
    alone = fit_adapter(base, training_set(two))
    assert fit.adapter.throughput_log_scale == pytest.approx(alone.adapter.throughput_log_scale)
    assert any(EDGE_NOTE in x and x.startswith("1 run(s)") for x in fit.not_fitted)
    assert any(w.startswith("run edge:") for w in fit.warnings)
    only_edge = fit_adapter(base, ts_edge)  # nothing else to go by: still no scale from it, and said so
    assert only_edge.adapter.throughput_log_scale == 0.0
    assert any(x.startswith("throughput scale: all 1 run(s)") for x in only_edge.not_fitted)
