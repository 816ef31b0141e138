"""LoRA over MoE experts held as stacked tensors (physics/moe_lora.py, `--moe-experts stacked`).

Measured on an H200 with transformers 5.17 and peft 0.21 (reference/runs/tuneplan-h200.csv): Qwen3-30B-A3B
LoRA (r 16, all-linear) at 1 x 256 tokens peaks at 126.8 GiB allocated where its bf16 weights are 56.9 GiB,
and trains 996.5M parameters; Mixtral-8x7B trains 359.7M, Qwen1.5-MoE-A2.7B 15.9M (its experts untouched).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.constants import DEFAULT_CONSTANTS
from tuneplan.physics.memory import memory
from tuneplan.physics.moe_lora import (
    PEFT_STACKED_MOE_TYPES_BY_VERSION,
    STACK_KERNELS,
    STACK_PASSES_BACKWARD,
    STACK_PASSES_FORWARD,
    moe_experts_assumptions,
    peft_reach_release,
    peft_reaches_stacks,
    stacked_lora_held_bytes,
    stacked_lora_seconds,
)
from tuneplan.physics.step import step_time
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H200 = gpu_catalog()["H200-SXM-141GB"]
QWEN3 = resolve_model("Qwen/Qwen3-30B-A3B")  # 48 layers, 128 experts (top 8), H 2048, I 768
MIXTRAL = resolve_model("mistralai/Mixtral-8x7B-v0.1")  # 32 layers, 8 experts (top 2), H 4096, I 14336
QWEN15 = resolve_model("Qwen/Qwen1.5-MoE-A2.7B")  # qwen2_moe: peft 0.21 does not reach its stacks, 0.22 does
GIB = 1024.0**3


def stacked(**kw):
    # the H200 runs used peft 0.21.0
    return make_job(method="lora", lora_rank=16, moe_experts="stacked", **{"peft_version": "0.21.0", **kw})


@pytest.mark.parametrize(("model", "per_layer", "layers"), [
    (QWEN3, 20_760_576, 48), (MIXTRAL, 11_239_552, 32), (QWEN15, 663_568, 24)])
def test_trainable_counts_are_what_peft_built_on_the_h200(model, per_layer, layers):
    # peft 0.21 over transformers 5 (printed by the H200 runs' trainable_params_m: 996.508, 359.666, 15.9256)
    assert model_terms(model, stacked()).params_trainable == per_layer * layers


def test_qwen3_stacks_by_hand():
    # per layer: attention q 16(2048+4096), k and v 16(2048+512), o 16(4096+2048); router 16(2048+128);
    # gate_up stack at rank 32: 32 x 128 x (2048 + 1536); down at 16: 16 x 128 x (768 + 2048)
    attention = 16 * (6144 + 2560 + 2560 + 6144)
    assert attention + 16 * 2176 + 32 * 128 * 3584 + 16 * 128 * 2816 == 20_760_576
    t = model_terms(QWEN3, stacked())
    experts = 128 * 3 * 768 * 2048 * 48  # every routed expert weight, re-materialised as W + BA
    assert t.stacked_lora_params == experts
    assert t.stacked_lora_flops == 2.0 * 128 * 48 * (1536 * 2048 * 32 + 2048 * 768 * 16)
    assert t.stacked_wgrad_flops == 2.0 * 8 * 3 * 768 * 2048 * 48  # the top-8 experts' forward, per token
    assert t.stacked_lora_stacks == 2 * 48
    assert t.adapted_modules == 5 * 48  # q, k, v, o and the router keep LoRA's per-module kernels


def test_modules_layout_is_unchanged_and_has_no_stack_terms():
    t = model_terms(QWEN3, make_job(method="lora", lora_rank=16, moe_experts="modules"))
    assert t.stacked_lora_params == t.stacked_lora_flops == t.stacked_lora_stacks == 0.0
    assert t.adapted_modules == (5 + 3 * 128) * 48


def test_held_stacks_match_the_h200_peak():
    # one bf16 copy of the 29.0B expert weights (54 GiB) held from forward to backward, and one layer's dW'
    a = build_arrays([(QWEN3, H200, stacked(micro_batch=1), 256)])
    held = float(stacked_lora_held_bytes(a)[0]) / GIB
    per_layer = 128 * 3 * 768 * 2048 * 2 / GIB
    assert held == pytest.approx(48 * per_layer + per_layer)
    alloc = float(memory(a, DEFAULT_CONSTANTS)["allocated_gib"][0])
    assert alloc == pytest.approx(126.8, rel=0.05)  # measured 126.845 GiB (h200-20261130-32)
    before = float(memory(build_arrays([(QWEN3, H200, make_job(method="lora", lora_rank=16, micro_batch=1,
                                                                moe_experts="modules"), 256)]))["allocated_gib"][0])
    assert before < 80  # the per-expert reading missed the rebuilt stacks: 70.6 GiB


def test_checkpointing_holds_one_layer_of_stacks():
    a = build_arrays([(QWEN3, H200, stacked(micro_batch=1, grad_ckpt=True), 256)])
    per_layer = 128 * 3 * 768 * 2048 * 2
    assert float(stacked_lora_held_bytes(a)[0]) == pytest.approx(2 * per_layer)


def test_stacks_split_over_expert_parallel_ranks():
    one = float(stacked_lora_held_bytes(build_arrays([(QWEN3, H200, stacked(gpus=8), 256)]))[0])
    ep8 = float(stacked_lora_held_bytes(build_arrays([(QWEN3, H200, stacked(gpus=8, ep=8), 256)]))[0])
    assert ep8 == pytest.approx(one / 8)


def test_stack_seconds_by_hand():
    a = build_arrays([(QWEN3, H200, stacked(micro_batch=1), 256)])
    c = DEFAULT_CONSTANTS
    bw = a["mem_bw"] * c.bandwidth_efficiency
    rate = np.full(1, 5e14)
    fwd, bwd, rec, launch = stacked_lora_seconds(a, c, np.full(1, 256.0), bw, rate, np.zeros(1))
    nbytes = 128 * 3 * 768 * 2048 * 48 * 2.0
    assert float(fwd[0]) == pytest.approx(STACK_PASSES_FORWARD * nbytes / float(bw[0]))  # memory-bound
    wgrad = 256 * 2.0 * 8 * 3 * 768 * 2048 * 48 / 5e14
    assert float(bwd[0]) == pytest.approx(STACK_PASSES_BACKWARD * nbytes / float(bw[0]) + wgrad)
    assert float(rec[0]) == 0.0
    assert float(launch[0]) == pytest.approx(96 * STACK_KERNELS * c.kernel_launch_s)


def test_stacked_step_is_near_the_h200_run():
    # measured 631 tokens/s (h200-20261130-32); the per-expert reading's 18,432 LoRA modules cost 2.4 s of launches
    tps = {}
    for layout in ("stacked", "modules"):
        a = build_arrays([(QWEN3, H200, make_job(method="lora", lora_rank=16, micro_batch=1, moe_experts=layout), 256)])
        tps[layout] = 256 / float(step_time(a, DEFAULT_CONSTANTS)["step_s"][0])
    assert 631 / 1.5 < tps["stacked"] < 631 * 1.5
    assert tps["modules"] < 631 / 4


def test_unreached_model_types_adapt_attention_and_shared_experts_only():
    t = model_terms(QWEN15, stacked())
    assert t.stacked_lora_params == 0.0
    assert "qwen2_moe" not in PEFT_STACKED_MOE_TYPES_BY_VERSION[(0, 21)]
    assert "qwen3_moe" in PEFT_STACKED_MOE_TYPES_BY_VERSION[(0, 21)]
    with pytest.raises(InputError, match="does not reach"):
        model_terms(QWEN15, stacked(lora_targets=("gate", "up", "down")))


def test_dense_models_ignore_the_layout():
    llama = resolve_model("meta-llama/Llama-3.1-8B")
    assert model_terms(llama, stacked()) == model_terms(llama, make_job(method="lora", lora_rank=16))


def test_framework_default_and_assumption():
    assert make_job(method="lora", framework="hf-trainer").moe_experts == "stacked"
    assert make_job(method="lora", framework="axolotl").moe_experts == "modules"
    assert make_job(method="lora", framework="generic").moe_experts == "modules"
    assert make_job(method="lora").moe_experts == "stacked"  # no framework given: hf-trainer at transformers 5
    assert make_job(method="lora", framework="hf-trainer@4.57").moe_experts == "modules"
    text = " ".join(moe_experts_assumptions(QWEN3, make_job(method="lora", framework="hf-trainer")))
    assert "hf-trainer (transformers 5.25)'s default" in text and "W + BA" in text
    assert "does not reach" in " ".join(moe_experts_assumptions(QWEN15, stacked()))
    assert "peft 0.21.0 decides" in " ".join(moe_experts_assumptions(QWEN15, stacked()))
    assert moe_experts_assumptions(QWEN3, make_job(method="full")) == []


def test_cli_option_and_bad_value(capsys):
    from tuneplan.cli import main

    base = ["estimate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H200-SXM-141GB", "--method", "lora",
            "--seq-len", "256", "--micro-batch", "1", "--calibration", "none"]
    assert main(base + ["--moe-experts", "stacked", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("stacked tensors" in x for x in out["assumptions"])
    with pytest.raises(SystemExit) as exc:
        main(base + ["--moe-experts", "grouped"])
    assert exc.value.code == 2
    assert "--moe-experts" in capsys.readouterr().err


def test_runs_rows_take_the_layout_from_their_transformers_version(tmp_path):
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "Qwen/Qwen3-30B-A3B", "gpu": "H200-SXM-141GB", "method": "lora", "lora_rank": "16",
           "seq_len": "256", "micro_batch_size": "1", "gpus": "1", "framework": "tuneplan-profile"}
    assert row_to_config(row).job.moe_experts == "stacked"  # hf-trainer's default
    assert row_to_config({**row, "transformers_version": "4.57.1"}).job.moe_experts == "modules"
    assert row_to_config({**row, "framework": "axolotl", "transformers_version": "5.2"}).job.moe_experts == "stacked"
    assert row_to_config({**row, "moe_experts": "modules"}).job.moe_experts == "modules"
    with pytest.raises(InputError, match="moe_experts"):
        row_to_config({**row, "moe_experts": "grouped"})


PEFT_LAYOUT_CASES = [("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                                    "decoder_sparse_step": 1, "mlp_only_layers": [], "head_dim": 16}),
                     ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
                     ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                                    "shared_expert_intermediate_size": 96, "decoder_sparse_step": 1,
                                    "mlp_only_layers": []})]


@pytest.mark.parametrize(("model_type", "extra"), PEFT_LAYOUT_CASES, ids=[c[0] for c in PEFT_LAYOUT_CASES])
def test_trainable_count_is_peft_exact_on_transformers_5(model_type, extra):
    """The stacked count against peft itself, on a tiny random model of each layout (transformers >= 5)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers < 5 holds an nn.Linear per expert")
    from tuneplan.specs.architectures import model_from_config

    cfg = {"model_type": model_type, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, **extra}
    conf = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(conf)
    pm = peft.get_peft_model(hf, peft.LoraConfig(r=4, target_modules="all-linear"))
    want = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    job = make_job(method="lora", lora_rank=4, moe_experts="stacked")  # the installed peft's reach
    assert job.peft_version == peft.__version__
    ours = model_terms(model_from_config(cfg, "tiny"), job)
    assert ours.params_trainable == want


def test_peft_022_reaches_qwen2_moe_stacks():
    # peft 0.22.0 utils/transformers_weight_conversion.py maps qwen2_moe onto its own pattern. By hand, per
    # layer at r = 16 (H 2048, 60 experts of I 1408, shared expert of I 5632, 16 heads of 128):
    # q, k, v, o 16 x 4096 each; shared gate, up 16 x (2048 + 5632) each, down 16 x (5632 + 2048);
    # shared_expert_gate 16 x (2048 + 1); router 16 x (2048 + 60); gate_up stack 32 x 60 x (2048 + 2816);
    # down stack 16 x 60 x (1408 + 2048)
    per_layer = (4 * 16 * 4096 + 3 * 16 * 7680 + 16 * 2049 + 16 * 2108 + 32 * 60 * 4864 + 16 * 60 * 3456)
    assert per_layer == 13_353_936
    t22 = model_terms(QWEN15, stacked(peft_version="0.22.0"))
    assert t22.params_trainable == 24 * per_layer
    assert t22.stacked_lora_params == 60 * 3 * 1408 * 2048 * 24
    assert model_terms(QWEN15, stacked()).params_trainable == 24 * 663_568  # 0.21: shared experts only
    assert PEFT_STACKED_MOE_TYPES_BY_VERSION[(0, 22)] - PEFT_STACKED_MOE_TYPES_BY_VERSION[(0, 21)] == {"qwen2_moe"}


def test_peft_version_keys_the_reach():
    assert peft_reach_release("0.21.2") == (0, 21)
    assert peft_reach_release("0.22.0rc1") == (0, 22)
    assert peft_reach_release("0.25.1") == (0, 22)  # newer than tested: the newest tested
    assert peft_reach_release("0.18.0") == (0, 21)  # older: the oldest tested
    assert peft_reach_release(None) == (0, 22)  # a JobSpec built without one (a runs row naming none)
    assert not peft_reaches_stacks(QWEN15, "0.21.0") and peft_reaches_stacks(QWEN15, "0.22.0")
    text = " ".join(moe_experts_assumptions(QWEN15, stacked(peft_version="0.23.0")))
    assert "peft 0.23.0 (its reach follows peft 0.22's) decides" in text
    with pytest.raises(InputError, match="peft-version"):
        stacked(peft_version="latest")


def test_peft_version_default_is_read_from_metadata(monkeypatch):
    from tuneplan.specs import peft as specs_peft

    monkeypatch.setattr(specs_peft, "installed_peft_version", lambda: "0.21.2")
    assert make_job(method="lora", moe_experts="stacked").peft_version == "0.21.2"
    monkeypatch.setattr(specs_peft, "installed_peft_version", lambda: None)  # peft not installed
    assert make_job(method="lora", moe_experts="stacked").peft_version == specs_peft.PEFT_TESTED_VERSIONS[-1]
    assert make_job(method="lora", moe_experts="modules").peft_version is None  # the release does not matter


def test_runs_rows_carry_their_peft_version():
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "Qwen/Qwen1.5-MoE-A2.7B", "gpu": "H200-SXM-141GB", "method": "lora", "lora_rank": "16",
           "seq_len": "256", "micro_batch_size": "1", "gpus": "1", "framework": "tuneplan-profile",
           "transformers_version": "5.17.0", "peft_version": "0.21.0"}
    assert row_to_config(row).job.peft_version == "0.21.0"
    with pytest.raises(InputError, match="peft_version"):
        row_to_config({**row, "peft_version": "new"})
