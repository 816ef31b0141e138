"""The preference / RL reference sources' models and stages (reference/SCHEMA.md "Stage columns")."""

from __future__ import annotations

import pytest

from tuneplan.errors import InputError
from tuneplan.specs.architectures.base import inferred_value
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.job import STAGES, read_stage


def test_inferred_values_lead_with_the_value():
    # the fifth pass writes an inferred value followed by why
    assert inferred_value("151552 (slime's args for the GLM-Z1-9B-0414 sibling)") == 151552
    assert inferred_value("16 (MLA: equals num_attention_heads in DeepSeek-V3 configs; not stated)") == 16
    assert inferred_value("8192 per the Megatron-Bridge prose ('Context Length: 8K'), not a config value") == 8192
    assert inferred_value("silu (Olmo2 class)") == "silu"
    assert inferred_value("1e-06 (class default)") == 1e-06
    assert inferred_value(32000) == 32000 and inferred_value("gelu_pytorch_tanh") == "gelu_pytorch_tanh"
    text = "{mrope_interleaved: true, mrope_section: [24, 20, 20]} - stated by maxtext"
    assert inferred_value(text) == text  # not a leading value: kept as it is


@pytest.mark.parametrize(("name", "billions"), [
    ("zai-org/GLM-4-9B-0414", 9.4), ("moonshotai/Moonlight-16B-A3B-Instruct", 16.0),
    ("allenai/OLMo-2-0425-1B", 1.48), ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1.78),
    ("nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16", 3.97)])
def test_new_catalog_models_resolve(name, billions):
    assert resolve_model(name).params_total / 1e9 == pytest.approx(billions, rel=0.01)


def test_qwen3_vl_and_qwen35_match_transformers():
    # transformers 5.25 built on the meta device from these catalog files (AutoModelForImageTextToText):
    # 31,070,754,032 parameters (vision 538,631,408) and 4,539,265,536 (vision 333,514,240)
    vl = resolve_model("Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert (vl.params_total, vl.params_vision) == (31_070_754_032, 538_631_408)
    q35 = resolve_model("Qwen/Qwen3.5-4B")
    assert (q35.params_total, q35.params_vision) == (4_539_265_536, 333_514_240)
    assert q35.extra["text_read_as"] == "qwen3_next" and vl.extra["text_read_as"] == "qwen3_moe"
    assert vl.vision.tokens_per_image == 196  # 448 px: 28 x 28 patches of 16 px, 2 x 2 merged


def test_qwen35_vision_by_hand():
    # 24 blocks of width 1024: qkv 1024x3072 + 3072, proj 1024^2 + 1024, fc1 1024x4096 + 4096, fc2 4096x1024
    # + 1024, two LayerNorms 4 x 1024; conv3d 3x2x16x16x1024 + 1024; positions 2304 x 1024; merger LayerNorm
    # 2 x 1024, fc1 4096^2 + 4096, fc2 4096 x 2560 + 2560
    block = 1024 * 3072 + 3072 + 1024 * 1024 + 1024 + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024
    tower = 24 * block + 3 * 2 * 16 * 16 * 1024 + 1024 + 2304 * 1024
    merger = 2 * 1024 + 4096 * 4096 + 4096 + 4096 * 2560 + 2560
    assert resolve_model("Qwen/Qwen3.5-4B").params_vision == tower + merger


def test_internvl35_tower_by_hand():
    # InternViT-300M: 24 blocks (qkv with bias, proj, fc1, fc2, two LayerNorms, two layer scales),
    # patch conv with bias, class token, 1025 positions; mlp1: LayerNorm(4096), 4096 -> 2048 -> 2048
    block = 1024 * 3072 + 3072 + 1024 * 1024 + 1024 + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024 + 2 * 1024
    vit = 24 * block + 3 * 14 * 14 * 1024 + 1024 + 1024 + 1025 * 1024
    assert vit == 304_012_288
    mlp1 = 2 * 4096 + 4096 * 2048 + 2048 + 2048 * 2048 + 2048
    spec = resolve_model("OpenGVLab/InternVL3_5-30B-A3B")
    assert spec.params_vision == vit + mlp1
    assert spec.params_total == resolve_model("Qwen/Qwen3-30B-A3B").params_total + vit + mlp1
    assert spec.vision.tokens_per_image == 256  # 32 x 32 patches pixel-shuffled 2 x 2


def test_stage_names_of_runs_files():
    assert read_stage("GRPO") == ("grpo", "")
    stage, note = read_stage("dapo")
    assert stage == "grpo" and "dynamic sampling" in note
    assert [read_stage(s)[0] for s in ("GSPO", "dr-grpo", "reinforce++", "ipo")] == ["grpo", "grpo", "grpo", "dpo"]
    for name in ("rm", "online-dpo", "xpo", "nash-md", "gkd"):  # the TRL stages runs files name
        assert read_stage(name) == (name, "")
    with pytest.raises(InputError, match="unknown stage 'sfft'"):
        read_stage("sfft")
    assert set(STAGES) <= {read_stage(s)[0] for s in STAGES}


@pytest.mark.parametrize(("stage", "says"), [("dapo", "--stage grpo"), ("gkd", "--stage gkd"),
                                             ("rm", "--stage rm"), ("ppo", "--stage ppo")])
def test_stage_rows_say_why_they_are_not_learned(stage, says):
    from tuneplan.learn.dataset import row_to_config

    row = {"model": "Qwen/Qwen2.5-7B", "gpu": "H100-SXM5-80GB", "method": "full", "seq_len": "1024",
           "micro_batch_size": "1", "gpus": "8", "stage": stage}
    with pytest.raises(InputError, match="stage") as exc:
        row_to_config(row)
    assert says in str(exc.value)
