"""Framework profiles (issue 30): names, aliases and versions resolve; every entry point sets the profile;
unstated settings are the profile's, said with their source; fp8 storage per recipe."""

from __future__ import annotations

import json

import pytest

from conftest import SHARED, tiny_llama_config
from tuneplan.errors import InputError
from tuneplan.specs.framework import (
    framework_for_text,
    get_framework,
    load_frameworks,
    resolve_framework,
)
from tuneplan.specs.job import make_job

FIXTURES = SHARED / "fixtures" / "training-configs"
FIXTURE_FRAMEWORKS = {"accelerate": "accelerate", "alignment-handbook": "trl", "axolotl": "axolotl",
                      "deepspeed": "deepspeed", "llamafactory": "llama-factory", "torchtune": "torchtune"}
"""The profile each fixture folder's files name (alignment-handbook recipes are TRL SFT configs)."""
NOT_VALUES = {"match", "aliases", "version_of", "current", "versions", "sources"}


def test_aliases_and_versions_resolve():
    assert resolve_framework("NeMo") == "megatron" and resolve_framework("megatron-core") == "megatron"
    assert resolve_framework("xtuner") == "deepspeed" and resolve_framework("llamafactory") == "llama-factory"
    assert resolve_framework("hf-trainer@4.46") == "hf-trainer@4.46"
    old, new = get_framework("hf-trainer@4.46"), get_framework("hf-trainer")
    # transformers < 4.55: TrainingArguments' adamw_torch (foreach); < 5: an nn.Linear per MoE expert
    assert (old.optimizer_impl, old.moe_experts, new.optimizer_impl, new.moe_experts) == (
        "foreach", "modules", "fused", "stacked")
    assert set(old.changed) == {"optimizer_impl", "moe_experts"} and "4.53.3" in old.sources["optimizer_impl"]
    assert get_framework("hf-trainer@4.57").optimizer_impl == "fused"  # only the rules above 4.57 apply
    assert get_framework("trl@0.21").grad_ckpt is False and get_framework("trl@0.22").grad_ckpt is True
    assert get_framework("trl").label == "trl 1.16" and old.label == "hf-trainer (transformers 4.46)"
    assert make_job(framework="nemo").framework == "megatron"
    assert make_job(framework="trl@0.21").grad_ckpt is False and make_job(framework="trl").grad_ckpt is True


@pytest.mark.parametrize(("name", "words"), [("zz", "unknown framework 'zz'"), ("axolotl@1.0", "no versioned"),
                                             ("hf-trainer@x", "not a version number")])
def test_bad_names_are_one_line_errors(name, words):
    with pytest.raises(InputError) as exc:
        make_job(framework=name)
    text = str(exc.value)
    assert text.startswith("framework: ") and words in text and "\n" not in text


def test_every_value_has_a_source():
    from tuneplan.specs.framework import _raw_frameworks

    neutral = _raw_frameworks()["generic"]
    for name, raw in _raw_frameworks().items():
        src = raw.get("sources") or {}
        for key in raw:  # every value a profile sets away from the neutral stack's says where it is set
            if key not in NOT_VALUES and raw[key] != neutral.get(key):
                assert key in src or "all" in src, (name, key)
        fw = get_framework(name)
        for key in ("grad_ckpt", "micro_batch"):
            if getattr(fw, key) is not None:
                assert src.get(key), (name, key)
        if fw.fp8_recipe != "te":
            assert src.get("fp8_recipe"), name


def test_the_issues_frameworks_have_profiles():
    for name in ("hf-trainer", "trl", "peft", "accelerate", "axolotl", "llama-factory", "unsloth", "torchtune",
                 "torchtitan", "megatron-lm", "megatron-core", "nemo", "megatron-bridge", "nemo-automodel", "verl",
                 "openrlhf", "deepspeed", "deepspeed-chat", "ms-swift", "litgpt", "llm-foundry", "composer",
                 "internevo", "xtuner", "optimum-habana", "fsdp-qlora", "vectorlm"):
        assert resolve_framework(name) in load_frameworks(), name


def test_runs_cells_read_names_aliases_and_versions():
    assert framework_for_text("nemo-toolkit 2.1") == "megatron"
    assert framework_for_text("verl (GRPO)") == "verl"
    assert framework_for_text("hf-trainer@4.46") == "hf-trainer@4.46"
    assert framework_for_text("some-new-trainer") == "generic"


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".yaml", ".yml", ".json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_from_sets_the_framework_of_every_fixture(path):
    from tuneplan.configs import read_configs

    cfg = read_configs([path])
    assert cfg.value("framework") == FIXTURE_FRAMEWORKS[path.parent.name]
    assert any(line.startswith("framework=") for line in cfg.used())


def test_cli_unknown_framework_is_one_line(capsys):
    from tuneplan.cli import main

    code = main(["estimate", "--model", "meta-llama/Llama-3.2-1B", "--gpu", "H100-SXM5-80GB", "--seq-len", "512",
                 "--framework", "zz"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "allowed: generic, hf-trainer" in err


def test_predict_notes_an_unknown_framework(tmp_path):
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": "512",
           "micro_batch_size": "1", "gpus": "1", "framework": "zz-trainer"}
    used = " ".join(row_to_config(row).defaults_used)
    assert "framework=generic (the cell 'zz-trainer' names no framework profile" in used
    known = row_to_config({**row, "framework": "xtuner"})
    assert known.job.framework == "deepspeed" and "names no framework" not in " ".join(known.defaults_used)


def estimate_json(capsys, *extra):
    from tuneplan.cli import main

    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--seq-len", "2048",
                 "--json", "--calibration", "none", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_unstated_settings_are_the_profiles_and_said(capsys):
    d = estimate_json(capsys, "--gpu", "H100-SXM5-80GB")
    text = " ".join(d["assumptions"])
    assert "Framework hf-trainer (transformers 5.25)" in text and "also taken when no framework is given" in text
    assert "Padding of unpacked samples: longest, hf-trainer (transformers 5.25)'s default (DataCollator" in text
    d = estimate_json(capsys, "--gpu", "H100-SXM5-80GB", "--framework", "trl")
    assert any(a.startswith("Activation checkpointing: on, trl 1.16's default (trl 1.16.0 trl/trainer/base_config.py")
               for a in d["assumptions"])


def test_a_verdict_that_turns_on_checkpointing_is_said(capsys):
    # 8B LoRA at 2048 tokens, micro-batch 1 on 24 GB: fits only with activation checkpointing
    on = estimate_json(capsys, "--gpu", "L4-24GB", "--micro-batch", "1", "--framework", "trl")
    off = estimate_json(capsys, "--gpu", "L4-24GB", "--micro-batch", "1", "--framework", "trl@0.21")
    assert on["fits"] and not off["fits"]
    line_on = next(a for a in on["assumptions"] if a.startswith("Fits with activation checkpointing"))
    line_off = next(a for a in off["assumptions"] if a.startswith("Does not fit without activation checkpointing"))
    assert "(trl 1.16's default)" in line_on and "(trl 0.21's default)" in line_off
    # the figure the line gives is the other setting's held memory: above the card, at most its nvidia-smi peak
    without = float(line_on.split("without it ")[1].split(" GiB")[0])
    assert 22.5 < without <= off["memory_per_gpu_gib"]
    # a mode given on the command line is the user's: no such line
    given = estimate_json(capsys, "--gpu", "L4-24GB", "--micro-batch", "1", "--grad-ckpt", "full")
    assert not any("without activation checkpointing" in a or "with activation checkpointing (" in a
                   for a in given["assumptions"])


@pytest.mark.parametrize(("precision", "recipe", "per_weight"), [
    ("fp8", "te", 4.0), ("fp8", "torchao", 2.0), ("fp8", "fp8-params", 2.0),
    ("nvfp4", "te", 2.0 + 1.125), ("nvfp4", "fp8-params", 1.125)])
def test_fp8_weight_storage_per_recipe_by_hand(precision, recipe, per_weight):
    """Full fine-tuning of a tiny Llama in fp8: every weight is trained; te holds bf16 + fp8 copy + fp8
    transpose (2 + 1 + 1), torchao the bf16 weight alone (2), fp8 primary weights fp8 + transpose (1 + 1).
    NVFP4: the bf16 weight and its cast copy and transpose (0.5 + 1/16 scale each), or, as fp4 primary
    weights (Megatron's fp4_param_gather), those two alone."""
    from tuneplan.physics.memory import memory
    from tuneplan.physics.terms import build_arrays, model_terms
    from tuneplan.specs.architectures import model_from_config
    from tuneplan.specs.gpu import resolve_gpu

    m = model_from_config(tiny_llama_config(), "tiny")
    job = make_job(method="full", precision=precision, fp8_recipe=recipe, framework="generic", micro_batch=1, seq_len=64)
    out = memory(build_arrays([(m, resolve_gpu("H100-SXM5-80GB"), job, 64)]))
    params = model_terms(m, job).params_trainable
    assert out["weights_gib"][0] * 2**30 == pytest.approx(per_weight * params)


def test_fp8_lora_frozen_base_by_recipe():
    """LoRA under fp8: the frozen bf16 base is 2 bytes per weight with torchao (the HF Trainer's fp8 path
    through accelerate), not the 4 of Transformer Engine's cached copies."""
    from tuneplan.physics.memory import memory
    from tuneplan.physics.terms import build_arrays
    from tuneplan.specs.architectures import model_from_config
    from tuneplan.specs.gpu import resolve_gpu

    m = model_from_config(tiny_llama_config(), "tiny")
    gpu = resolve_gpu("H100-SXM5-80GB")

    def weights(**kw):
        job = make_job(method="lora", precision="fp8", micro_batch=1, seq_len=64, **kw)
        return memory(build_arrays([(m, gpu, job, 64)]))["weights_gib"][0] * 2**30

    frozen_lin = sum(lin.params for lin in m.linears)
    assert make_job(precision="fp8").fp8_recipe == "torchao"  # no framework: hf-trainer's
    assert weights(fp8_recipe="te") - weights() == pytest.approx(2.0 * frozen_lin)
    assert make_job(framework="megatron").fp8_recipe == "fp8-params"


def test_frameworks_command(capsys):
    from tuneplan.cli import main

    assert main(["frameworks"]) == 0
    out = capsys.readouterr().out
    assert "hf-trainer" in out and "transformers 5.25" in out and "megatron-core" in out
    assert main(["frameworks", "--json"]) == 0
    data = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    assert set(data) == set(load_frameworks())
    assert data["trl"]["versions"][0]["before"] == "0.22" and data["verl"]["grad_ckpt"] is True
    assert main(["frameworks", "trl@0.21"]) == 0
    assert "sources:" in capsys.readouterr().out
    assert main(["frameworks", "zz"]) == 2


def test_api_and_web_take_aliases_and_versions():
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    c = TestClient(create_app(warm_up=False))
    body = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "examples": 1000,
            "tokens_per_example": 300, "seq_len": 1024}
    r = c.post("/api/estimate", json={**body, "framework": "nemo"})
    assert r.status_code == 200 and any("Framework megatron" in a for a in r.json()["assumptions"])
    r = c.post("/api/estimate", json={**body, "framework": "hf-trainer@4.46"})
    assert r.status_code == 200 and any("hf-trainer (transformers 4.46)" in a for a in r.json()["assumptions"])
    assert c.post("/api/estimate", json={**body, "framework": "zz"}).status_code == 422


def test_four_bit_adamw_states_by_hand():
    """torchao's AdamW4bit: two 4-bit moments with an fp32 scale per 128 elements, 2 x (0.5 + 4/128) =
    1.0625 bytes per trained parameter (8-bit: 2, AdamW over fp32 masters: 8)."""
    from tuneplan.configs.maps import OPTIMIZERS
    from tuneplan.physics.memory import memory
    from tuneplan.physics.terms import build_arrays, model_terms
    from tuneplan.specs.architectures import model_from_config
    from tuneplan.specs.gpu import resolve_gpu

    m = model_from_config(tiny_llama_config(), "tiny")
    gpu = resolve_gpu("H100-SXM5-80GB")

    def states(opt):
        job = make_job(method="full", optimizer=opt, master_weights="fp32", micro_batch=1, seq_len=64)
        return memory(build_arrays([(m, gpu, job, 64)]))["optimizer_gib"][0] * 2**30 / model_terms(
            m, job).params_trainable

    assert states("adamw-4bit") == pytest.approx(1.0625)
    assert states("adamw-8bit") == pytest.approx(2.0) and states("adamw") == pytest.approx(8.0)
    assert OPTIMIZERS["adamw_torch_4bit"] == OPTIMIZERS["torchao.optim.adamw4bit"] == "adamw-4bit"


def test_a_rows_recorded_version_selects_the_profiles_values():
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "meta-llama/Llama-3.2-1B", "gpu": "H100-SXM5-80GB", "method": "lora", "seq_len": "512",
           "micro_batch_size": "1", "gpus": "1", "framework": "hf-trainer"}
    assert row_to_config(row).job.optimizer_impl == "fused"
    old = row_to_config({**row, "transformers_version": "4.46.3"}).job
    assert (old.framework, old.optimizer_impl) == ("hf-trainer@4.46.3", "foreach")
    trl = row_to_config({**row, "framework": "trl", "trl_version": "0.21.0"}).job
    assert trl.framework == "trl@0.21.0" and not trl.grad_ckpt


def test_megatron_lora_on_q_k_v_is_one_adapter_on_the_fused_matrix():
    from tuneplan.physics.terms import model_terms
    from tuneplan.specs.catalog import resolve_model
    from tuneplan.specs.job import make_job

    m = resolve_model("meta-llama/Llama-2-7b-hf")  # 32 layers, q/k/v 4096 x 4096 each, gate/up 4096 x 11008
    kw = dict(method="lora", lora_rank=32, gpus=8, seq_len=4096)
    hf = model_terms(m, make_job(lora_targets="q,k,v", **kw))
    mc = model_terms(m, make_job(lora_targets="q,k,v", framework="megatron", **kw))
    # peft: an adapter per projection, 32 x (4096 + 4096) each; Megatron's linear_qkv: one, 32 x (4096 + 12288)
    assert (hf.adapted_modules, mc.adapted_modules) == (96, 32)
    assert hf.params_trainable == 3 * 32 * (4096 + 4096) * 32
    assert mc.params_trainable == 32 * (4096 + 3 * 4096) * 32
    # one build over both frameworks keeps them apart (the terms' memo key names the framework)
    from tuneplan.physics.terms import build_arrays
    from tuneplan.specs.gpu import gpu_catalog

    g = gpu_catalog()["H100-SXM5-80GB"]
    a = build_arrays([(m, g, make_job(lora_targets="q,k,v", framework=fw, **kw), 4096) for fw in ("generic", "megatron")])
    assert list(a["adapted_modules"]) == [96, 32]
    # gate and up are linear_fc1 (4096 -> 2 x 11008), down stays alone
    mlp = model_terms(m, make_job(lora_targets="mlp", framework="megatron", **kw))
    assert mlp.adapted_modules == 2 * 32
    assert mlp.params_trainable == 32 * ((4096 + 2 * 11008) + (11008 + 4096)) * 32
