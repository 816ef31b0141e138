from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Keep ~/.tuneplan (probed GPUs, caches) out of the tests."""
    home = tmp_path_factory.mktemp("tuneplan_home")
    monkeypatch.setenv("TUNEPLAN_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield


def reference_dir() -> Path | None:
    env = os.environ.get("TUNEPLAN_REFERENCE_DIR")
    if env:
        return Path(env)
    p = SHARED / "reference" / "runs"
    return p if p.is_dir() else None


def tiny_llama_config(**over) -> dict:
    cfg = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 512,
        "tie_word_embeddings": False, "hidden_act": "silu",
    }
    cfg.update(over)
    return cfg


def framework_entry(**over) -> dict:
    """The smallest valid data/frameworks.yaml entry (every required key), with `over` on top: for tests
    of one optional key's parsing (specs.framework._parse)."""
    base = {k: False for k in ("fused_lora", "fused_elementwise", "distributed_optimizer", "fp32_grads",
                               "sequence_parallel", "tp_comm_overlap", "adapter_fp32", "packing")}
    base.update(attention="sdpa", cross_entropy="none", master_weights="auto", padding="max")
    return {**base, **over}


@pytest.fixture(scope="session")
def calibrated_estimator():
    """A tuneplan estimator with residual trees, as a calibration of a user's own stack has them (the
    shipped default has none: estimators.residual_fit.RESIDUAL_MAX_SOURCES): the learner fitted on
    tuneplan's own H200 runs (one source)."""
    from tuneplan.learn.learners import fit_learner
    from tuneplan.learn.measured import training_set
    from tuneplan.runs import read_runs

    est = fit_learner("tuneplan", training_set(read_runs([str(REPO / "reference" / "runs" / "tuneplan-h200.csv")]).df),
                      "h200")
    assert est.thr_residual_ is not None and est.thr_residual_.near == 1.0  # a user's own stack: in full
    return est
