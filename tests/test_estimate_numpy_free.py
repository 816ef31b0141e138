"""`tuneplan estimate` runs on physics.xp's pure-Python vectors (numpy never imported), and gives the
figures the numpy arrays give: the same formulas, two array backends."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import tuneplan.api as api
from tuneplan.physics import xp
from tuneplan.report.tables import estimate_text

JOBS = [
    dict(model="meta-llama/Llama-3.1-8B", gpu="A100-SXM4-80GB", method="lora", examples=1000, seq_len=512),
    dict(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM5-80GB", method="qlora", examples=5000,
         tokens_per_example=700, grad_ckpt=True),
    dict(model="Qwen/Qwen2.5-7B", gpu="A100-SXM4-80GB", method="dora", examples=2000, seq_len=1024,
         lora_targets=("all-linear",)),
    dict(model="Qwen/Qwen2.5-7B", gpu="H100-SXM5-80GB", gpus=8, method="full", sharding="fsdp", examples=30000,
         tokens_per_example=1000, epochs=2),
    dict(model="Qwen/Qwen2.5-14B", gpu="H100-SXM5-80GB", gpus=8, method="full", tp=2, pp=2, sharding="zero1",
         examples=20000, seq_len=2048, micro_batch=2),
    dict(model="Qwen/Qwen1.5-MoE-A2.7B", gpu="H100-SXM5-80GB", gpus=4, method="lora", ep=4, examples=3000,
         seq_len=1024),
    dict(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM5-80GB", method="full", precision="fp8", gpus=4,
         sharding="zero3", examples=4000, seq_len=4096, micro_batch=1),
    dict(model="Qwen/Qwen2.5-0.5B", gpu="L4-24GB", method="lora", examples=100, tokens_per_example=100),
    dict(model="meta-llama/Llama-3.1-8B", gpu="RTX4090-24GB", method="full", examples=1000, seq_len=2048),
    dict(model="meta-llama/Llama-3.1-8B", gpu="A10G-24GB", method="lora", seq_len=4096, micro_batch=8),
    dict(model="Qwen/Qwen2.5-7B", gpu="MI300X-192GB", method="lora", optimizer="adamw-8bit", examples=800,
         seq_len=8192, calibration="none"),
    dict(model="meta-llama/Llama-3.1-8B", gpu="T4-16GB", method="qlora", examples=500, seq_len=512, micro_batch=1,
         calibration="none"),
]


def _estimate(backend: str, monkeypatch, job: dict, estimator=None):
    """api.estimate on one backend; `estimator`: the one get_estimator gives (a calibration with trees)."""
    monkeypatch.setattr(api, "ARRAYS", backend)
    if estimator is not None:
        monkeypatch.setattr("tuneplan.estimators.base.get_estimator", lambda name, calibration=None: estimator)
    kw = dict(job)
    return api.estimate(kw.pop("model"), kw.pop("gpu"), **kw)


@pytest.fixture(scope="module")
def with_trees(calibrated_estimator):
    """A calibration's estimator with throughput trees (a user's own stack; the shipped default has none)
    and no memory correction, so the estimate runs on the pure-Python vectors, trees included."""
    from tuneplan.estimators.residual import TuneplanCorrection
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

    est = TuneplanEstimator(calibrated_estimator.constants, TuneplanCorrection(calibrated_estimator.residual.thr, None),
                            calibration_name="h200")
    assert est.python_arrays
    return est


def _same(a, b, where: str = "") -> None:
    """Equal, floats to 1e-12 relative (the arithmetic is IEEE either way; the residual correction's
    exp / log may round the last bit differently from numpy's vectorised ones)."""
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-300) or (math.isnan(a) and math.isnan(b)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, where


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j['model'].split('/')[-1]}-{j['method']}-{j['gpu']}")
def test_pure_python_and_numpy_arrays_give_the_same_estimate(job, monkeypatch):
    py = _estimate("python", monkeypatch, job)
    ref = _estimate("numpy", monkeypatch, job)
    _same(py.to_dict(), ref.to_dict())
    assert estimate_text(py) == estimate_text(ref)  # what the table prints


NEAR_H200_RUNS = [  # next to the fixture's training rows (reference/runs/tuneplan-h200.csv): its trees apply
    dict(model="meta-llama/Llama-3.1-8B", gpu="H200-SXM-141GB", method="lora", examples=2000, seq_len=2048,
         micro_batch=1),
    dict(model="meta-llama/Llama-3.2-1B", gpu="H200-SXM-141GB", method="full", examples=2000, seq_len=2048,
         micro_batch=4, grad_accum=4),
    dict(model="Qwen/Qwen1.5-MoE-A2.7B", gpu="H200-SXM-141GB", method="lora", examples=500, seq_len=1024,
         micro_batch=4),
    dict(model="Qwen/Qwen2.5-14B", gpu="H200-SXM-141GB", method="lora", examples=500, seq_len=2048, micro_batch=8,
         grad_ckpt=True),
    dict(model="meta-llama/Llama-3.1-8B", gpu="A100-SXM4-80GB", method="qlora", examples=500, seq_len=512),
]


@pytest.mark.parametrize("job", NEAR_H200_RUNS, ids=lambda j: f"{j['model'].split('/')[-1]}-{j['method']}-{j['gpu']}")
def test_the_same_estimate_with_residual_trees(job, monkeypatch, with_trees):
    """The residual correction (features, distance gate, trees) on both backends."""
    py = _estimate("python", monkeypatch, job, with_trees)
    ref = _estimate("numpy", monkeypatch, job, with_trees)
    _same(py.to_dict(), ref.to_dict())
    assert estimate_text(py) == estimate_text(ref)
    assert any(a.startswith("Calibration 'h200'") and "a residual correction" in a for a in py.assumptions)
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

    physics = _estimate("python", monkeypatch, job, TuneplanEstimator(with_trees.constants))
    if job["gpu"].startswith("H200"):
        assert physics.step_time_s != py.step_time_s  # the trees' correction is in the figures


def test_the_spread_covers_a_job_that_does_not_fit_and_one_at_its_largest_micro_batch(monkeypatch):
    fits = [_estimate("python", monkeypatch, j) for j in JOBS]
    assert any(not r.fits for r in fits) and any(r.fits for r in fits)
    assert any(r.max_micro_batch == 0 for r in fits) and any((r.max_micro_batch or 0) > 4 for r in fits)
    assert any(r.interval for r in fits)


def test_vec_follows_numpy_elementwise():
    x = [0.0, -1.5, 2.0, 3.0, float("nan"), 7.25, float("inf")]
    y = [1.0, 0.0, -2.0, 3.0, 1.0, float("nan"), 2.0]
    vx, vy = xp.Vec(list(x)), xp.Vec(list(y))
    nx, ny = np.asarray(x), np.asarray(y)
    with np.errstate(all="ignore"):
        pairs = [(vx / vy, nx / ny), (vx * vy - 2.0, nx * ny - 2.0), (1.0 / vx, 1.0 / nx),
                 (xp.maximum(vx, vy), np.maximum(nx, ny)), (xp.minimum(vx, vy), np.minimum(nx, ny)),
                 (xp.where(vx > vy, vx, vy), np.where(nx > ny, nx, ny)), (xp.floor(vx / 3.0), np.floor(nx / 3.0)),
                 (xp.clip(vx, 0.0, 2.5), np.clip(nx, 0.0, 2.5)), (xp.take((4.0, 5.0), vx > 1), [5.0 if v > 1 else 4.0
                                                                                           for v in x]),
                 (xp.select([vx > 2, vy > 0], [vx, vy], -1.0), np.select([nx > 2, ny > 0], [nx, ny], -1.0)),
                 ((~(vx > 1)) & (vy >= 0), (~(nx > 1)) & (ny >= 0))]
    for got, want in pairs:
        np.testing.assert_array_equal(np.asarray(got.v, dtype=float), np.asarray(want, dtype=float))


@pytest.mark.parametrize("n", [1, 5, 8, 15, 16, 23, 24, 31, 128, 150, 300])
def test_pairwise_sum_is_numpys_summation_order(n):
    rows = np.random.default_rng(n).lognormal(0.0, 3.0, size=(3, n)) * np.where(np.arange(n) % 3, 1.0, -1.0)
    for r, want in zip(rows, rows.sum(axis=1), strict=False):
        assert xp.pairwise_sum(r.tolist()) == want  # bit for bit


def test_the_estimate_command_does_not_import_numpy():
    code = ("import sys, io, contextlib; from tuneplan.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['estimate','--model','meta-llama/Llama-3.1-8B','--gpu','A100-SXM4-80GB','--method','lora',"
            "'--examples','1000','--seq-len','512'])\n"
            "    main(['estimate','--model','meta-llama/Llama-3.1-8B','--gpu','A100-SXM4-80GB','--json',"
            "'--seq-len','512'])\n"
            "print('NUMPY', 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "NUMPY False" in out


def test_a_memory_correction_keeps_the_estimate_on_numpy(calibrated_estimator, with_trees):
    """With a memory correction the largest-micro-batch search measures each trial's distance to the
    training rows: numpy's work, so such a calibration's estimate runs on numpy arrays."""
    from tuneplan.estimators.calibration import default_calibration
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator

    assert default_calibration().estimator().python_arrays and TuneplanEstimator().python_arrays
    assert with_trees.python_arrays  # throughput trees only
    assert calibrated_estimator.residual.mem is not None and not calibrated_estimator.python_arrays
