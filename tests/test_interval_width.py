"""The interval's width from what the estimate assumed (learn.intervals, learn.calibration.fit_width):
contributions fitted by hand-checkable least squares, the bounds and the fit probability they give,
the contributions an estimate names, and the fit probability's reliability table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuneplan.learn.calibration import fit_width
from tuneplan.learn.intervals import (
    comm_share,
    coverage_keys,
    filled_in,
    fit_probability,
    interval_flags,
    width_bounds,
)
from tuneplan.learn.validate import reliability
from tuneplan.specs.job import JobSpec


def _rows():
    """Four sources, each with two rows each at +-0.1 (no contribution) and rows at +-0.3 (framework not given):
    squared deviations 0.01 and 0.09, so base^2 = 0.01 and the framework's contribution^2 = 0.08."""
    r, flags, src = [], [], []
    for s in ("a", "b", "c", "d"):
        for v, f in ((0.1, set()), (-0.1, set()), (0.3, {"framework"}), (-0.3, {"framework"})) * 2:
            r.append(v)
            flags.append(f)
            src.append(s)
    return r, flags, src


def test_fit_width_splits_the_squared_spread_into_named_contributions():
    m = fit_width(*_rows())
    assert m["centre"] == pytest.approx(-0.1)  # the weighted median: the smallest value reaching half the weight
    # with the centre at -0.1: unflagged rows deviate 0.2 and 0, flagged 0.4 and 0.2 -> mean squares 0.02, 0.10
    assert m["base"] == pytest.approx(math.sqrt(0.02))
    assert m["contributions"]["framework"] == pytest.approx(math.sqrt(0.08))
    assert len(m["z"]) == 32


def test_a_contribution_seen_in_one_source_only_is_not_fitted():
    r, flags, src = _rows()
    flags = [f if s == "a" else set() for f, s in zip(flags, src, strict=True)]  # 4 rows of one source
    r, flags, src = r * 3, flags * 3, src * 3  # 12 rows, still one source
    m = fit_width(r, flags, src)
    assert "framework" not in m["contributions"] and m["unfitted"] == 0.0  # nothing fitted to go by


def test_a_contribution_the_rows_cannot_fit_counts_as_the_mean_of_those_they_do():
    m = fit_width(*_rows())  # framework fitted at sqrt(0.08); packing never seen
    assert m["unfitted"] == pytest.approx(math.sqrt(0.08))
    packing = width_bounds(m, {"packing": "packing / padding not given"}, 0.8)
    assert packing[:2] == pytest.approx(width_bounds(m, {"framework": "framework not given"}, 0.8)[:2])
    assert [w for w, _ in packing[2]] == ["packing / padding not given"]


def test_width_bounds_add_the_contributions_in_quadrature_and_name_them():
    model = {"centre": 0.0, "base": 0.1, "contributions": {"framework": 0.2, "scale": 0.05},
             "z": [-1.0, -0.5, 0.0, 0.5, 1.0] * 4}
    lo, hi, why = width_bounds(model, {"framework": "framework not given"}, 0.5)
    w = math.sqrt(0.1 ** 2 + 0.2 ** 2)
    from tuneplan.learn.intervals import conformal_bounds

    zl, zh = (math.log(b) for b in conformal_bounds(model["z"], 0.5))
    assert (lo, hi) == pytest.approx((math.exp(w * zl), math.exp(w * zh)))
    assert why == [("framework not given", pytest.approx(math.exp(0.2 * (zh - zl) / 2) - 1))]
    assert width_bounds(model, {}, 0.5)[:2] == pytest.approx((math.exp(0.1 * zl), math.exp(0.1 * zh)))


def test_fit_probability_is_the_share_of_residuals_under_the_headroom():
    model = {"centre": 0.0, "base": 0.1, "contributions": {}, "z": list(np.linspace(-2, 2, 41))}
    # peak 80 of 88 GiB: headroom log(1.1) = 0.0953 -> z 0.953: the values -2.0 .. 0.9 (30 of 41)
    assert fit_probability(model, {}, 80.0, 88.0) == pytest.approx(30 / 41)
    assert fit_probability(model, {}, 80.0, 80.0 * math.exp(0.25)) == 1.0  # beyond the widest residual


def test_the_flags_of_an_estimate():
    job = JobSpec(framework="trl", gpus=512, nodes=64, tp=2, precision="bf16")
    assert filled_in(job) == {"grad_ckpt", "packing", "batch"}
    assert filled_in(defaults_used=["grad_ckpt=0 (off unless stated)", "flash_attn=1", "global_batch_size=64"]) == \
        {"grad_ckpt", "batch"}
    from tuneplan.specs.catalog import resolve_model
    from tuneplan.specs.gpu import gpu_catalog

    keys = coverage_keys(job, resolve_model("llama-3-8b"), gpu_catalog()["H100-SXM5-80GB"], 4096)
    assert keys == {"gpu_family": "H100", "scale": "65+", "parallel": "tensor", "moe": "dense", "seq": "2k-8k",
                    "matmul": "measured"}
    covered = {"framework": ["trl"], "gpu_family": ["H100"], "scale": ["1", "2-8"], "parallel": ["tensor"],
               "moe": ["dense"], "seq": ["2k-8k"]}
    flags = interval_flags({"batch"}, keys, "trl@0.20", 0.3, covered)
    assert flags == {"batch": "micro-batch count not given", "scale": "no training source at 65+ GPUs",
                     "comm": "communication-bound step (30% of it)"}
    assert comm_share({"communication": 0.2, "tensor_parallel": 0.1, "total": 1.0}) == pytest.approx(0.3)


def test_a_gpu_without_a_measured_matmul_efficiency_widens_the_throughput_interval_only():
    from tuneplan.learn.intervals import MATMUL_ASSUMED, THROUGHPUT_ONLY
    from tuneplan.specs.catalog import resolve_model
    from tuneplan.specs.gpu import gpu_catalog

    job = JobSpec(framework="trl", gpus=4)
    keys = coverage_keys(job, resolve_model("llama-3-8b"), gpu_catalog()["GB200"], 4096)  # matmul_efficiency empty
    assert keys["matmul"] == "assumed"
    flags = interval_flags(set(), keys, "trl", 0.0, None)
    assert flags == {"matmul": MATMUL_ASSUMED} and "matmul" in THROUGHPUT_ONLY


def test_each_sources_standardised_residuals_come_from_the_model_fitted_without_it():
    # a and b at +-0.1, c at +-0.3. Without c: centre -0.1, base^2 = mean(0.2^2, 0) = 0.02, so c's rows give
    # (0.3 + 0.1) / sqrt(0.02) and (-0.3 + 0.1) / sqrt(0.02). Without a (or b): centre -0.1, base^2 =
    # mean(0.2^2, 0, 0.4^2, 0.2^2) = 0.06, so a's rows give 0.2 / sqrt(0.06) and 0.
    m = fit_width([0.1, -0.1, 0.1, -0.1, 0.3, -0.3], [set()] * 6, ["a", "a", "b", "b", "c", "c"])
    c, ab = 1 / math.sqrt(0.02), 1 / math.sqrt(0.06)
    assert m["z"] == pytest.approx(sorted([0.4 * c, -0.2 * c, 0.2 * ab, 0.0, 0.2 * ab, 0.0]))
    assert "z" not in fit_width([0.1, -0.1], [set()] * 2, ["a", "a"], honest=False)


def test_reliability_table_counted_by_hand():
    hits = [{"metric": "fit", "probability": p, "ran": ran} for p, ran in
            ((0.05, False), (0.05, True), (0.95, True), (1.0, True), (0.95, False))]
    assert reliability(hits + [{"metric": "throughput"}]) == [
        {"low": 0.0, "high": 0.1, "rows": 2, "probability": pytest.approx(0.05), "ran": 0.5},
        {"low": 0.9, "high": 1.0, "rows": 3, "probability": pytest.approx(0.9666667), "ran": pytest.approx(2 / 3)}]


def test_an_estimate_names_the_largest_contributions_and_a_fit_probability():
    from tuneplan.api import estimate

    r = estimate("llama-3-8b", "H100", seq_len=2048, interval=0.8)
    iv = r.to_dict()["interval"]
    assert 0.0 <= iv["fit_probability"] <= 1.0
    assert 1 <= len(iv["why"]) <= 3 and all("(+-" in w for w in iv["why"])
    assert iv["memory_allocated_gib_low"] < r.memory_allocated_gib < iv["memory_allocated_gib_high"]


def test_validate_plot_draws_the_reliability_curve_beside_the_parity_panels(tmp_path):
    from types import SimpleNamespace

    import matplotlib
    import pandas as pd

    from tuneplan.report import parity

    drawn = {}
    real = parity._reliability_panel

    def spy(ax, table):
        real(ax, table)
        drawn["lines"] = [line.get_xydata().tolist() for line in ax.get_lines()]

    rows = pd.DataFrame({"estimator": ["tuneplan"] * 2, "source": ["s", "s"], "measured_tokens_per_s": [1.0, 2.0],
                         "pred_tokens_per_s": [1.1, 1.9], "measured_mem_gib": [10.0, 20.0], "pred_mem_gib": [11.0, 19.0]})
    table = [{"low": 0.0, "high": 0.1, "rows": 4, "probability": 0.05, "ran": 0.25},
             {"low": 0.9, "high": 1.0, "rows": 40, "probability": 0.97, "ran": 0.95}]
    matplotlib.use("Agg")
    parity._reliability_panel, saved = spy, parity._reliability_panel
    try:
        parity.parity_plot(SimpleNamespace(rows=rows, split="by-source", reliability=table), str(tmp_path / "p.png"))
    finally:
        parity._reliability_panel = saved
    assert (tmp_path / "p.png").stat().st_size > 0
    assert drawn["lines"][1] == [[0.05, 0.25], [0.97, 0.95]]  # after the diagonal: the curve, bin by bin


def test_what_the_caller_said_not_the_framework_defaults_decides_what_was_filled_in():
    from tuneplan.specs.job import make_job

    # make_job adds the framework's defaults (framework, padding, its recipes' checkpointing) to `given`
    assert filled_in(make_job()) == {"framework", "grad_ckpt", "packing", "precision", "batch"}
    assert filled_in(make_job(framework="trl", packing=True, micro_batch=2)) == {"grad_ckpt", "precision"}


def test_an_adapted_calibration_narrows_the_throughput_width_by_what_its_runs_leave():
    """Three throughput runs: the throughput width model is centred on the residuals they leave and every
    part scaled by their spread against the held-out sources' own (median absolute deviations); the
    memory one, with no memory run applied (fewer than MEMORY_OFFSET_MIN_ROWS), is the base's."""
    from tuneplan.api import estimate
    from tuneplan.estimators.calibration import default_calibration
    from tuneplan.learn.calibration import adapted_residuals, balanced_residuals

    base = default_calibration()
    tp0 = base.intervals["tuneplan"]
    tp = adapted_residuals(base.intervals["tuneplan"], {"throughput": 3, "memory": 3})
    mad = lambda x: np.median(np.abs(np.asarray(x) - np.median(x)))  # noqa: E731
    s = mad(tp["throughput"]) / mad(balanced_residuals(tp0["throughput_by_source"], True))
    w0, w1 = tp0["width"]["throughput"], tp["width"]["throughput"]
    assert w1["centre"] == pytest.approx(np.median(tp["throughput"])) and w1["z"] == w0["z"]
    assert w1["base"] == pytest.approx(w0["base"] * s) and w1["unfitted"] == pytest.approx(w0["unfitted"] * s)
    assert w1["contributions"] == pytest.approx({k: v * s for k, v in w0["contributions"].items()})
    assert tp["width"]["memory"] == tp0["width"]["memory"] and tp["memory"] == tp0["memory"]
    cal = type(base)(**{**base.__dict__, "intervals": {**base.intervals, "tuneplan": tp}})
    iv = estimate("llama-3-8b", "H100", seq_len=2048, interval=0.8, calibration=cal).interval
    assert "width" in iv["source"] and 0.0 <= iv["fit_probability"] <= 1.0


def test_predict_gives_a_row_the_interval_estimate_gives_its_configuration(tmp_path):
    """One configuration with every setting said: predict's row and estimate (same shipped calibration)
    give the same multipliers and fit probability. The same row with the precision, checkpointing,
    grad accumulation, framework and padding left out is as wide as width_bounds of exactly those
    contributions (hand-listed: precision, checkpointing and batch; an empty framework or padding cell of a
    runs row is the generic stack with max-length padding, which training rows ran, not a setting filled
    in: a source default that fills one is, recorded in defaults_used), at least as wide as the first."""
    from tuneplan.api import estimate
    from tuneplan.estimators.base import get_estimator
    from tuneplan.estimators.calibration import default_calibration
    from tuneplan.learn.predict_table import predict_frame
    from tuneplan.runs import read_runs

    head = ("id,source,model,method,lora_rank,lora_targets,optimizer,precision,framework,grad_ckpt,padding,gpu,gpus,"
            "nodes,micro_batch_size,grad_accum,global_batch_size,seq_len,mem_kind,tokens_per_s")
    body = ['t-1,t,meta-llama/Llama-3.1-8B,lora,16,"q,v",adamw,bf16,trl,0,longest,H100-SXM5-80GB,8,1,4,4,128,2048,'
            "reserved,1000",
            't-2,t,meta-llama/Llama-3.1-8B,lora,16,"q,v",adamw,,,,,H100-SXM5-80GB,8,1,4,,,2048,reserved,1000']
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([head, *body]) + "\n")
    out = predict_frame(read_runs([str(path)]).df, get_estimator("tuneplan"), with_max_batch=False, interval=0.8)
    r = estimate("meta-llama/Llama-3.1-8B", "H100-SXM5-80GB", method="lora", lora_rank=16, lora_targets="q,v",
                 optimizer="adamw", precision="bf16", framework="trl", grad_ckpt=False, padding="longest", gpus=8,
                 micro_batch=4, grad_accum=4, seq_len=2048, interval=0.8)
    iv, row = r.interval, out.iloc[0]
    assert "width" in iv["source"] and row["pred_tokens_per_s"] == pytest.approx(r.tokens_per_s)
    thr = out["pred_tokens_per_s_low"] / out["pred_tokens_per_s"], out["pred_tokens_per_s_high"] / out["pred_tokens_per_s"]
    mem = out["pred_peak_mem_gib_low"] / out["pred_peak_mem_gib"], out["pred_peak_mem_gib_high"] / out["pred_peak_mem_gib"]
    assert (thr[0][0], thr[1][0]) == pytest.approx((iv["tokens_per_s_low"] / r.tokens_per_s,
                                                    iv["tokens_per_s_high"] / r.tokens_per_s))
    assert (mem[0][0], mem[1][0]) == pytest.approx((iv["memory_reserved_gib_low"] / r.memory_reserved_gib,
                                                    iv["memory_reserved_gib_high"] / r.memory_reserved_gib))
    assert row["pred_fit_probability"] == pytest.approx(iv["fit_probability"]) and 0.0 < iv["fit_probability"] < 1.0
    width = default_calibration().intervals["tuneplan"]["width"]
    filled = dict.fromkeys(("precision", "grad_ckpt", "batch"), "")
    assert (thr[0][1], thr[1][1]) == pytest.approx(width_bounds(width["throughput"], filled, 0.8)[:2])
    assert (mem[0][1], mem[1][1]) == pytest.approx(width_bounds(width["memory"], filled, 0.8)[:2])
    assert thr[1][1] / thr[0][1] >= thr[1][0] / thr[0][0] and mem[1][1] / mem[0][1] >= mem[1][0] / mem[0][0]


def test_predict_with_only_a_memory_width_model_reads_throughput_from_the_pool(tmp_path):
    """A calibration with no throughput width model (the adapted pool only): every row's throughput
    bounds are that pool's, its memory bounds still the width model's."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.estimators.calibration import default_calibration
    from tuneplan.learn.calibration import adapted_residuals
    from tuneplan.learn.intervals import conformal_bounds
    from tuneplan.learn.predict_table import predict_frame
    from tuneplan.runs import read_runs

    base = default_calibration()
    tp = adapted_residuals(base.intervals["tuneplan"], {"throughput": 3, "memory": 0})
    tp["width"] = {k: v for k, v in tp["width"].items() if k != "throughput"}
    cal = type(base)(**{**base.__dict__, "intervals": {**base.intervals, "tuneplan": tp}})
    path = tmp_path / "runs.csv"
    path.write_text("id,source,model,method,gpu,gpus,micro_batch_size,seq_len,tokens_per_s\n"
                    "t-1,t,meta-llama/Llama-3.1-8B,lora,H100-SXM5-80GB,1,2,2048,1000\n")
    out = predict_frame(read_runs([str(path)]).df, get_estimator("tuneplan"), False, interval=0.8, calibration=cal)
    width, row = cal.intervals["tuneplan"]["width"], out.iloc[0]
    lo, hi = conformal_bounds(cal.intervals["tuneplan"]["throughput"], 0.8)
    assert (row["pred_tokens_per_s_low"], row["pred_tokens_per_s_high"]) == pytest.approx(
        (row["pred_tokens_per_s"] * lo, row["pred_tokens_per_s"] * hi))
    filled = dict.fromkeys(("precision", "grad_ckpt", "batch"), "")
    lo_m, hi_m = width_bounds(width["memory"], filled, 0.8)[:2]
    assert (row["pred_peak_mem_gib_low"], row["pred_peak_mem_gib_high"]) == pytest.approx(
        (row["pred_peak_mem_gib"] * lo_m, row["pred_peak_mem_gib"] * hi_m))
    assert 0.0 <= row["pred_fit_probability"] <= 1.0


def test_a_derived_batch_figure_is_not_a_filled_in_setting():
    # a row that gives micro-batch and accumulation has its global batch derived, not assumed
    assert filled_in(defaults_used=["global_batch_size=64 (derived micro_batch_size*grad_accum*dp)"]) == set()
    assert filled_in(defaults_used=["micro_batch_size=1 (the reference schema's default)"]) == {"batch"}


def test_an_adapted_pool_replaces_the_base_framework_pools():
    from tuneplan.estimators.calibration import default_calibration
    from tuneplan.learn.calibration import adapted_residuals
    from tuneplan.learn.intervals import residual_pool

    base = default_calibration()
    assert "throughput_framework_seen" in base.intervals["tuneplan"]
    tp = adapted_residuals(base.intervals["tuneplan"], {"throughput": 3, "memory": 0})
    assert "throughput_framework_seen" not in tp and "throughput_framework_unseen" not in tp
    pool, what = residual_pool(tp, "hf-trainer")  # an estimate after adaptation reads what the runs leave
    assert pool == tp["throughput"] and what == "held-out rows"
