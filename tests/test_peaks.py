"""Both peaks (torch's allocated and reserved): predict's columns, the profiler's and the callback's."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.runs import read_runs


def test_predict_writes_both_peaks_and_judges_each_row_on_its_kind(tmp_path):
    """One configuration measured three ways: pred_peak_mem_gib is the allocated peak for the
    `allocated` row, the reserved peak for the `reserved` row and nvidia-smi's (reserved + CUDA
    context) for the `unknown` one; the two peak columns are the same on every row."""
    from tuneplan.estimators.base import get_estimator
    from tuneplan.learn.predict_table import predict_frame

    head = "id,source,model,method,lora_rank,precision,gpu,gpus,micro_batch_size,grad_accum,seq_len,peak_mem_gib,mem_kind"
    body = [f"t-{i},t,meta-llama/Llama-3.1-8B,lora,16,bf16,H100-SXM5-80GB,1,2,1,1024,30,{k}"
            for i, k in enumerate(("allocated", "reserved", "unknown"))]
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([head, *body]) + "\n")
    est = get_estimator("tuneplan")
    out = predict_frame(read_runs([str(path)]).df, est, with_max_batch=False)
    assert out["error"].isna().all() or (out["error"].fillna("") == "").all()
    alloc, res = out["pred_peak_mem_allocated_gib"].to_numpy(float), out["pred_peak_mem_reserved_gib"].to_numpy(float)
    assert np.ptp(alloc) == 0 and np.ptp(res) == 0 and 0 < alloc[0] < res[0]
    got = out["pred_peak_mem_gib"].to_numpy(float)
    assert got[0] == pytest.approx(alloc[0]) and got[1] == pytest.approx(res[1])
    assert got[2] == pytest.approx(res[2] + est.constants.cuda_context_gib)
