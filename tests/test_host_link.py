"""The CPU <-> GPU link of the catalog (data/gpus.csv host_link_gbs_bidir) and the host copies that cross it."""

from __future__ import annotations

import dataclasses

import pytest

from tuneplan.errors import InputError
from tuneplan.physics.constants import DEFAULT_CONSTANTS as C
from tuneplan.physics.stack import stack_assumptions
from tuneplan.physics.step import step_time
from tuneplan.physics.terms import build_arrays
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog, gpu_from_dict
from tuneplan.specs.job import make_job

KW = {"method": "full", "micro_batch": 1, "seq_len": 2048, "examples": 1.0}


def test_grace_parts_have_their_nvlink_c2c_share():
    gpus = gpu_catalog()
    # 900 GB/s bidirectional per Grace, 2 GPUs per Grace: 450 per GPU, 225 each way
    for name in ("GB200", "GB300"):
        assert gpus[name].host_link_gbs == 225.0
        assert "NVLink-C2C 900 GB/s" in gpus[name].sources["host_link_gbs_bidir"]
    assert gpus["H100-SXM5-80GB"].host_link_gbs == 0.0  # not given: the constants' PCIe-class figure
    base = {"name": "x", "peak_tflops": 100, "memory_gib": 24, "memory_bandwidth_gbs": 900}
    assert gpu_from_dict({**base, "host_link_gbs": 64}).host_link_gbs == 64.0
    with pytest.raises(InputError, match="host_link_gbs"):
        gpu_from_dict({**base, "host_link_gbs": "fast"})


@pytest.mark.parametrize("job_kw", [{"act_offload_layers": 20}, {"offload": "optimizer"},
                                    {"sharding": "zero3-offload", "gpus": 2}])
def test_every_host_copy_crosses_the_same_link(job_kw):
    # a part whose catalog link is 12.5 GB/s each way costs activation, optimizer and ZeRO-3 offload
    # exactly as a part without one under constants whose cpu_offload_gbs is 12.5
    m = resolve_model("meta-llama/Llama-3.1-8B")
    h100 = gpu_catalog()["H100-SXM5-80GB"]
    job = make_job(**KW, **job_kw)
    linked = step_time(build_arrays([(m, dataclasses.replace(h100, host_link_gbs=12.5), job, 2048)]))
    slow = dataclasses.replace(C, cpu_offload_gbs=12.5)
    const = step_time(build_arrays([(m, h100, job, 2048)], slow), slow)
    assert linked["step_s"][0] == pytest.approx(const["step_s"][0])
    assert linked["step_s"][0] > step_time(build_arrays([(m, h100, job, 2048)]))["step_s"][0]


def test_optimizer_offload_over_the_host_link_by_hand():
    # ZeRO-offload on one GPU: the trained weights' AdamW states and their 16-bit weights both ways over
    # the link: P x (optimizer bytes + 2 x 2) / link; halving the link adds that time once more
    m = resolve_model("meta-llama/Llama-3.1-8B")
    h100 = gpu_catalog()["H100-SXM5-80GB"]
    job = make_job(offload="optimizer", **KW)
    a = build_arrays([(m, dataclasses.replace(h100, host_link_gbs=50.0), job, 2048)])
    b = build_arrays([(m, dataclasses.replace(h100, host_link_gbs=25.0), job, 2048)])
    per_link = a["params_trainable"][0] * (C.optimizer_bytes_adamw + 2.0 * 2.0) / 50e9
    assert step_time(b)["optimizer_s"][0] - step_time(a)["optimizer_s"][0] == pytest.approx(per_link)


def test_the_assumptions_say_the_host_link():
    m = resolve_model("meta-llama/Llama-3.1-8B")
    job = make_job(act_offload_layers=4, **KW)
    gpus = gpu_catalog()
    said = " ".join(stack_assumptions(m, gpus["GB200"], job))
    assert "host copies at 225 GB/s each way per GPU (GB200's host link, data/gpus.csv" in said
    said = " ".join(stack_assumptions(m, gpus["H100-SXM5-80GB"], job))
    assert f"host copies at {C.cpu_offload_gbs:g} GB/s each way (tuneplan's PCIe 4 x16 figure" in said


@pytest.mark.parametrize(("extra", "words"), [({"act_offload_layers": 32}, "has 32: at most 31"),
                                              ({"act_offload_layers": 4, "pp": 2, "gpus": 2}, "without pipeline"),
                                              ({"act_offload_layers": 4, "grad_ckpt": True}, "without recompute")])
def test_layer_offload_refused_where_megatron_core_refuses_it(extra, words):
    # megatron-core 0.14 transformer_config.py: cpu_offloading_num_layers < num_layers, no pp, no recompute
    from tuneplan import estimate

    with pytest.raises(InputError, match=words):
        estimate("meta-llama/Llama-3.1-8B", "GB200", method="full", seq_len=2048, **extra)
