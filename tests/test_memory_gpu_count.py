"""Memory per GPU from 1 to 2 GPUs (issue 34 point 5): under offload nothing rises (the offloaded weights
are gathered a layer at a time on one GPU too); under DDP the rise is the Reducer's gradient buckets,
named in the breakdown."""

from __future__ import annotations

import pytest

from tuneplan.physics.constants import DEFAULT_CONSTANTS
from tuneplan.physics.memory import memory
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]
LLAMA70 = resolve_model("meta-llama/Llama-3.1-70B")
GIB = 1024.0**3


def _mem(gpus: int, sharding: str) -> dict:
    job = make_job(method="lora", grad_ckpt=True, micro_batch=1, gpus=gpus, sharding=sharding)
    out = memory(build_arrays([(LLAMA70, H100, job, 2048)]), DEFAULT_CONSTANTS)
    return {k: float(v[0]) for k, v in out.items()}


@pytest.mark.parametrize("sharding", ["zero3-offload", "fsdp-offload"])
def test_offload_gathers_layers_on_one_gpu_too(sharding):
    one, two = _mem(1, sharding), _mem(2, sharding)
    # two layers' bf16 weights (the one in use and the prefetched one), 1 GPU or 2
    layer = LLAMA70.params_total / LLAMA70.n_layers * 2
    assert one["gathered_params_gib"] == pytest.approx(2 * layer / GIB)
    assert two["gathered_params_gib"] == pytest.approx(one["gathered_params_gib"])
    assert one["weights_gib"] == two["weights_gib"] == 0.0  # on the host
    assert two["allocated_gib"] <= one["allocated_gib"]  # the gradient shard halves, nothing rises


def test_ddp_rise_is_the_gradient_buckets():
    one, two = _mem(1, "ddp"), _mem(2, "ddp")
    trainable = model_terms(LLAMA70, make_job(method="lora", grad_ckpt=True)).params_trainable
    assert one["gradient_buckets_gib"] == 0.0  # one process: no DDP Reducer
    assert two["gradient_buckets_gib"] == pytest.approx(trainable * 4 / GIB)  # fp32 adapter gradients
    assert two["allocated_gib"] - one["allocated_gib"] == pytest.approx(two["gradient_buckets_gib"])


def test_breakdown_names_the_buckets(capsys):
    import json

    from tuneplan.cli import main

    args = ["estimate", "--model", "meta-llama/Llama-3.1-70B", "--method", "lora", "--grad-ckpt", "--gpu",
            "H100-SXM5-80GB", "--seq-len", "2048", "--micro-batch", "1", "--examples", "1000", "--json"]
    assert main(args + ["--gpus", "2", "--sharding", "ddp"]) == 0
    parts = json.loads(capsys.readouterr().out)["memory_breakdown_gib"]
    assert parts["gradient_buckets"] > 0
    assert main(args + ["--gpus", "1", "--sharding", "ddp"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_breakdown_gib"]["gradient_buckets"] == 0
