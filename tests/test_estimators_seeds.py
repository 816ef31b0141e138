"""The seeds' worked examples, reproduced exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tuneplan.cli import main
from tuneplan.estimators import kavier as K
from tuneplan.estimators.planner import planner_numbers
from tuneplan.estimators.xia import (
    PUBLISHED_EQ1,
    TABLE_III,
    effective_seq_interval,
    fine_tuning_cost,
    max_batch_size,
    throughput,
)

MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
BLACKMAMBA = "Zyphra/BlackMamba-2.8B"


def test_planner_worked_example_numbers():
    n = planner_numbers(params=8e9, tokens=30000 * 1000 * 3, flops_per_param_token=6, peak_tflops=300,
                        mfu=0.4, devices=4, rate=2.0, bytes_per_param=16, memory_gib=80)
    assert n["tokens"] == 90_000_000
    assert n["total_flops"] == pytest.approx(4.32e18)
    assert n["per_device_flops"] == pytest.approx(1.2e14)
    assert n["cluster_flops"] == pytest.approx(4.8e14)
    assert n["wall_clock_s"] / 3600 == pytest.approx(2.5)
    assert n["device_hours"] == pytest.approx(10.0)
    assert n["cost_usd"] == pytest.approx(20.0)
    assert n["tokens_per_s"] == pytest.approx(10_000)
    assert round(n["memory_total_gib"], 2) == 119.21
    assert round(n["memory_per_device_gib"], 2) == 29.80
    assert n["fits"]


PLANNER_ARGS = ["estimate", "--estimator", "planner", "--params", "8e9", "--examples", "30000", "--tokens-per-example", "1000", "--epochs", "3", "--flops-per-param-token", "6", "--peak-tflops", "300", "--mfu", "0.4", "--gpus", "4", "--rate", "2", "--bytes-per-param", "16", "--memory-gib", "80"]


def test_planner_cli_prints_the_seed(capsys):
    assert main(PLANNER_ARGS) == 0
    out = capsys.readouterr().out
    for text in ("90,000,000", "4.32e+18 FLOP", "2.5 h", "10.0", "$20.00", "10,000 tokens/s", "119.21 GiB",
                 "29.80 GiB", "yes, before activations"):
        assert text in out, text


def test_planner_cli_json(capsys):
    assert main(PLANNER_ARGS + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["estimator"] == "planner"
    assert d["wall_clock_s"] == pytest.approx(9000.0)
    assert d["cost_usd"] == pytest.approx(20.0)
    assert d["fits"] is True


# ---- Xia et al. ---------------------------------------------------------------------------------

@pytest.mark.parametrize("key", list(TABLE_III))
def test_xia_table_iii_reproduced_at_effective_seq_len(key):
    model, dataset = key
    lo, hi = effective_seq_interval(model, dataset)
    assert lo < hi, "an interval exists where both entries come out"
    seq = (lo + hi) / 2
    co = PUBLISHED_EQ1[model]
    entry = TABLE_III[key]
    assert max_batch_size(48, co.model_mem_gb, seq, 1.0, co.c0, co.c1) == entry["dense"]
    assert max_batch_size(48, co.model_mem_gb, seq, 0.25, co.c0, co.c1) == entry["sparse"]
    # the median query length alone does not give the table
    med = entry["median_len"]
    assert max_batch_size(48, co.model_mem_gb, med, 1.0, co.c0, co.c1) != entry["dense"]


def test_xia_effective_lengths_documented_values():
    lo, hi = effective_seq_interval(MIXTRAL, "commonsense_15k")
    assert lo == pytest.approx(781.18, abs=0.01) and hi == pytest.approx(878.83, abs=0.01)
    lo, hi = effective_seq_interval(BLACKMAMBA, "math_14k")
    assert lo == pytest.approx(1173.07, abs=0.01) and hi == pytest.approx(1293.82, abs=0.01)


def test_xia_fig13_projection():
    co = PUBLISHED_EQ1[MIXTRAL]
    # seq_len x ((1 - C1) + C1 sparsity) = 222 tokens lies in the interval (220.1, 224.5] that gives both
    assert max_batch_size(100, co.model_mem_gb, 222, 1.0, co.c0, co.c1) == 28
    assert max_batch_size(120, co.model_mem_gb, 222, 1.0, co.c0, co.c1) == 35


@pytest.mark.parametrize("gpu,thr,rate,cost", [("A40", 1.01, 0.79, 32.7), ("A100", 2.74, 1.67, 25.4),
                                               ("H100", 4.90, 2.1, 17.9)])
def test_xia_table_iv_costs(gpu, thr, rate, cost):
    # 10 epochs of ~15,000 queries (the count the table's costs imply); throughputs are printed rounded
    got = fine_tuning_cost(15_000, 10, thr, rate)
    assert got == pytest.approx(cost, abs=0.15)


def test_xia_eq2_intercept_is_throughput_at_batch_one():
    assert throughput(1.0, 0.25, 2.0, 4.0, 0.7) == pytest.approx(0.7)  # log(1 / (0.25 x 4)) = 0
    assert throughput(math.e, 1.0, 2.0, 1.0, 0.5) == pytest.approx(2.5)


# ---- Kavier ---------------------------------------------------------------------------------------

def _kavier_arrays(**over):
    a = {
        "micro_batch": np.array([4.0]), "seq_len": np.array([1024.0]), "grad_accum": np.array([2.0]),
        "gpus": np.array([8.0]), "nodes": np.array([1.0]), "params_active": np.array([8e9]),
        "params_total": np.array([8e9]), "method_code": np.array([0.0]), "hidden": np.array([4096.0]),
        "n_layers": np.array([32.0]), "mem_bw": np.array([2039e9]), "intra_bw": np.array([300e9]),
        "peak_flops": np.array([312e12]), "dp": np.array([8.0]),
        "_gpu_names": np.array(["A100-SXM4-80GB"], dtype=object),  # Kavier's library: E_b 0.4513, 312 TFLOP/s
    }
    a.update({k: np.array([float(v)]) for k, v in over.items()})
    return a


def test_kavier_terms_by_hand():
    a = _kavier_arrays()
    out = K.KavierEstimator().time_arrays(a)
    E = 0.4513 * min(1.0, 0.0341 * math.log2(4) + 0.8147)
    Tf = 2 * 8e9 * 4 * 1024 / (312e12 * E)
    To = 20 * 8e9 / 2039e9
    D = 4 * 8e9
    Wn = 300e9 * 2 * 8 / 1e9  # Gbit/s
    Tr = 5e-6 * math.log2(8) + 2e-6 * 7 + D * 7 / (8 * Wn * 1e9 / 8)
    Ts = 2 * (Tf + 2 * Tf) + To + Tr
    assert out["forward_s"][0] == pytest.approx(2 * Tf)
    assert out["optimizer_s"][0] == pytest.approx(To)
    assert out["communication_s"][0] == pytest.approx(Tr)
    assert out["step_s"][0] == pytest.approx(Ts)


def test_kavier_multi_node_and_lora():
    a = _kavier_arrays(gpus=16, nodes=2, method_code=1)
    out = K.KavierEstimator().time_arrays(a)
    Pt = 2 * 8 * 4096 * 4 * 32
    D = 4 * Pt
    Wn = 300e9 * 2 * 8 / 1e9

    def tr(p, w):
        return 5e-6 * math.log2(p) + 2e-6 * (p - 1) + D * (p - 1) / (p * w * 1e9 / 8)

    assert out["communication_s"][0] == pytest.approx(tr(8, Wn) + tr(2, 200.0))
    assert out["optimizer_s"][0] == pytest.approx(20 * Pt / 2039e9)


def test_kavier_looks_up_its_own_gpu_factors():
    a = _kavier_arrays(peak_flops=400e12)
    a["_gpu_names"] = np.array(["A100-SXM4-80GB", "no-such-gpu"], dtype=object)
    a = {k: (np.repeat(v, 2) if k != "_gpu_names" else v) for k, v in a.items()}
    eb, peak = K.KavierEstimator.gpu_factors(a)
    assert eb.tolist() == [0.4513, 0.42]  # listed; the library's default for the others
    assert peak.tolist() == [312e12, 400e12]  # the peak Kavier fitted against; else the catalog's


def test_kavier_mfu_curve_saturates():
    big = K.KavierEstimator().time_arrays(_kavier_arrays(micro_batch=128))
    assert big["efficiency"][0] == pytest.approx(0.4513)  # min(1, ...) caps at E_b
