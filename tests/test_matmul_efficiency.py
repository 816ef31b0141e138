"""Measured matmul efficiency (achievable / datasheet dense 16-bit matmul TFLOP/s) in the GPU catalog:
the efficiency curve's ceiling is stated for the reference GPU (H100 SXM 794.5/989, the H200 786/989);
a GPU measured higher or lower runs its matmuls at that fraction / 0.80 of the curve."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.step import step_time
from tuneplan.physics.terms import REFERENCE_MATMUL_EFFICIENCY, build_arrays
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog, gpu_from_dict
from tuneplan.specs.job import make_job

CAT = gpu_catalog()


def test_catalog_carries_the_measured_fractions_with_their_source():
    assert CAT["A100-SXM4-80GB"].matmul_efficiency == pytest.approx(271 / 312, abs=1e-3)
    assert CAT["H100-SXM5-80GB"].matmul_efficiency == pytest.approx(794.5 / 989, abs=1e-3)
    assert CAT["H200-SXM-141GB"].matmul_efficiency == pytest.approx(786.35 / 989, abs=1e-3)
    assert CAT["MI300X-192GB"].matmul_efficiency == pytest.approx(0.511)
    assert "MAMF" in CAT["A100-SXM4-80GB"].source and "tuneplan probe" in CAT["H200-SXM-141GB"].source
    assert CAT["L40S-48GB"].matmul_efficiency == 0.0  # not measured: the reference applies


def _fwd(gpu) -> float:
    # eager attention: every GEMM (attention's too) at the matmul rate; FlashAttention has its own measured
    # efficiency (physics/ops.py), which the GPU's matmul figure does not scale
    m = resolve_model("meta-llama/Llama-3.1-8B")
    a = build_arrays([(m, gpu, make_job(method="full", gpus=1, micro_batch=4, flash_attn=False), 2048)])
    return float(np.asarray(step_time(a)["forward_s"])[0])


def test_matmul_time_scales_with_the_measured_fraction():
    a100 = CAT["A100-SXM4-80GB"]
    unmeasured = replace(a100, matmul_efficiency=0.0)
    assert _fwd(unmeasured) / _fwd(a100) == pytest.approx(a100.matmul_efficiency / REFERENCE_MATMUL_EFFICIENCY)
    at_reference = replace(a100, matmul_efficiency=REFERENCE_MATMUL_EFFICIENCY)
    assert _fwd(at_reference) == pytest.approx(_fwd(unmeasured))


def test_gpu_files_take_it_and_probe_entries_declare_their_peaks_measured(tmp_path):
    base = {"name": "mine", "memory_gib": 24, "memory_bandwidth_gbs": 900, "peak_tflops": {"bf16": 100}}
    assert gpu_from_dict(base).matmul_efficiency == 0.0
    assert gpu_from_dict({**base, "matmul_efficiency": 0.7}).matmul_efficiency == 0.7
    with pytest.raises(InputError, match="matmul_efficiency"):
        gpu_from_dict({**base, "matmul_efficiency": 1.5})
    pytest.importorskip("torch")
    from tuneplan.profile.device import probe

    assert probe("cpu", quick=True)["matmul_efficiency"] == 1.0
