"""One test per architecture family: total and active parameters against the published size (within 2%)
and forward FLOPs per token against a hand count from the config's numbers; plus the named formulas
(attention span, Mamba scans, vision towers) on hand-checkable inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.architecture import (
    attention_span,
    kv_cache_bytes_per_token,
    ssm_scan_flops,
    vision_flops_per_image,
)
from tuneplan.physics.terms import model_terms
from tuneplan.specs.architectures import READERS, model_from_config
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.job import JobSpec

FULL = JobSpec(method="full")


def _within(value: float, published: float, rel: float = 0.02) -> None:
    assert abs(value / published - 1.0) <= rel, f"{value / 1e9:.3f}B vs published {published / 1e9:.3f}B"


def _fwd(name: str, job: JobSpec = FULL):
    spec = resolve_model(name)
    return spec, model_terms(spec, job)


# ---------------------------------------------------------------------------------------------------
# MLA + MoE with shared experts and dense first layers


def test_mla_moe_deepseek_v3():
    spec, t = _fwd("deepseek-ai/DeepSeek-V3")
    # deepseek-ai/DeepSeek-V3 README: 671B total (without the 14B MTP module), 37B activated per token
    _within(spec.params_total, 671e9)
    _within(spec.params_active, 37e9)
    h = 7168
    attn = h * 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * h
    dense = 3 * h * 18432  # first_k_dense_replace = 3 dense layers
    moe = h * 256 + (8 + 1) * 3 * h * 2048  # router + top-8 routed + 1 shared expert, 58 layers
    assert t.fwd_block_flops == 2.0 * (61 * attn + 3 * dense + 58 * moe)
    assert spec.n_moe_layers == 58 and spec.n_shared_experts == 1 and spec.intermediate_size == 18432
    # attention per (query, key): QK^T over 192 = 128 nope + 64 rope, AV over 128, 128 heads, 61 layers
    assert t.attn_flops_per_seq == 2.0 * 128 * (192 + 128) * 61
    assert spec.kv_latent_dim == 576 and spec.q_latent_dim == 1536
    assert t.attn_latent_elements == 2.0 * (1536 + 576)
    # the KV cache holds the compressed latent: 576 elements per token per layer
    assert kv_cache_bytes_per_token(spec, 4096) == 576 * 61 * 2.0


def test_mla_kimi_k2_and_minicpm3_read_as_mla():
    k2 = resolve_model("moonshotai/Kimi-K2-Instruct")
    # Kimi K2 README: 32B activated of 1T total (the card rounds the total; 1.03T here)
    _within(k2.params_active, 32e9, rel=0.03)
    assert k2.is_mla and k2.n_experts == 384 and k2.n_moe_layers == 60  # first_k_dense_replace = 1
    mini = resolve_model("openbmb/MiniCPM3-4B")
    assert mini.is_mla and mini.kv_latent_dim == 256 + 32


# ---------------------------------------------------------------------------------------------------
# sliding window + MoE with biases (gpt-oss) and local/global attention (Gemma 2/3)


def test_sliding_window_moe_gpt_oss():
    spec, t = _fwd("openai/gpt-oss-120b")
    # OpenAI gpt-oss model card: 116.83B total, 5.13B active (active counted without the input embedding)
    _within(spec.params_total, 116.83e9)
    _within(spec.params_active - spec.params_embedding, 5.13e9)
    h, q, kv = 2880, 64 * 64, 8 * 64
    attn = h * q + 2 * h * kv + q * h
    moe = h * 128 + 4 * (h * 2 * 2880 + 2880 * h)  # router + 4 experts (gate, up, down)
    assert t.fwd_block_flops == 2.0 * 36 * (attn + moe)
    assert (spec.n_local_attention_layers, spec.attention_window, spec.local_attention) == (18, 128, "sliding")
    per_key = 2.0 * 64 * (64 + 64)
    assert t.attn_flops_per_seq == per_key * 18 and t.attn_local_flops_per_key == per_key * 18
    small = resolve_model("openai/gpt-oss-20b")
    _within(small.params_total, 20.91e9)
    _within(small.params_active - small.params_embedding, 3.61e9)


def test_local_global_gemma():
    g2 = resolve_model("google/gemma-2-9b")
    assert g2.params_total == 9_241_705_984  # transformers' count (tests/test_model_specs KNOWN_EXACT)
    assert (g2.n_local_attention_layers, g2.attention_window) == (21, 4096)  # every other layer of 42
    g3, t3 = _fwd("google/gemma-3-27b-it")
    _within(g3.params_total, 27.0e9)  # text decoder of "27B"; the multimodal file adds the 0.42B tower
    assert (g3.n_local_attention_layers, g3.attention_window) == (52, 1024)  # 5 local : 1 global of 62
    h, q, kv = 5376, 32 * 128, 16 * 128
    assert t3.fwd_block_flops == 2.0 * 62 * (h * q + 2 * h * kv + q * h + 3 * h * 21504)
    # at 8192 tokens with FlashAttention: global layers see 0.5 S keys, local ones about 1024
    S = np.array([8192.0])
    span = attention_span(S, 1024.0, 0.5)[0]
    assert span == pytest.approx(1024 * (1 - 1023 / (2 * 8192)))
    per_key = 2.0 * 32 * (128 + 128)
    a = {"attn_flops_per_seq": np.array([t3.attn_flops_per_seq]), "attn_local_flops_per_key":
         np.array([t3.attn_local_flops_per_key]), "attn_window": np.array([t3.attn_window]),
         "ssm_flops": np.array([0.0])}
    from tuneplan.physics.architecture import sequence_mixing_flops

    got = sequence_mixing_flops(a, S, 0.5)[0]
    assert got == pytest.approx(per_key * (10 * 0.5 * 8192 + 52 * span))


def test_attention_span_by_hand():
    S = np.array([4.0, 8.0, 8.0])
    # window 4, flash: S=4 -> causal half (2); S=8 -> mean of min(i, 4) over i=1..8 = (1+2+3+4*5)/8 = 3.25
    got = attention_span(S, 4.0, 0.5)
    assert got[0] == pytest.approx(2.0) and got[1] == pytest.approx(3.25)
    assert attention_span(S, 4.0, 1.0)[1] == 8.0  # eager: the full square, masked afterwards
    assert attention_span(np.array([100.0]), 1000.0, 0.5)[0] == 50.0  # window wider than the sequence


def test_chunked_attention_llama4():
    mav, t = _fwd("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    # meta-llama/llama-models MODEL_CARD: 17B active / 400B total
    _within(mav.params_total, 400e9)
    _within(mav.params_active, 17e9)
    assert (mav.n_local_attention_layers, mav.attention_window, mav.local_attention) == (36, 8192, "chunked")
    h = 5120
    attn = 2 * h * 40 * 128 + 2 * h * 8 * 128
    dense = 3 * h * 16384  # intermediate_size_mlp, 24 dense layers (interleave step 2)
    moe = h * 128 + 2 * 3 * h * 8192  # router + top-1 routed + the shared expert
    assert t.fwd_block_flops == 2.0 * (48 * attn + 24 * dense + 24 * moe)


# ---------------------------------------------------------------------------------------------------
# hybrid Mamba / attention stacks


def test_hybrid_nemotron_h():
    spec, t = _fwd("nvidia/Nemotron-H-8B-Base-8K")
    _within(spec.params_total, 8e9)  # "8B" (Nemotron-H paper / model name)
    assert spec.attention_layers == 4 and spec.ssm is not None and spec.ssm.n_layers == 24
    assert spec.dense_mlp_layers == 24 and spec.n_layers == 52
    h, d_inner = 4096, 128 * 64
    mamba = h * (2 * d_inner + 2 * 8 * 128 + 128) + d_inner * h
    attn = 2 * h * 32 * 128 + 2 * h * 8 * 128
    mlp = 2 * h * 21504  # squared-ReLU up + down
    assert t.fwd_block_flops == 2.0 * (24 * mamba + 4 * attn + 24 * mlp)
    # SSD scan: conv1d over x, B, C and H (2 Q (N + P) + 4 N P) with Q = chunk 128, N = 128, P = 64
    scan = 2 * (d_inner + 2 * 8 * 128) * 4 + 128 * (2 * 128 * (128 + 64) + 4 * 128 * 64)
    assert ssm_scan_flops(spec.ssm) == scan and t.ssm_flops == 24 * scan
    assert t.attn_flops_per_seq == 2.0 * 32 * 256 * 4  # only the 4 attention layers


def test_hybrid_moe_nemotron3_nano():
    spec = resolve_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    # NVIDIA model card: 31.6B total, 3.2B active (3.6B including embeddings)
    _within(spec.params_total, 31.6e9)
    _within(spec.params_active, 3.6e9)
    _within(spec.params_active - spec.params_embedding, 3.2e9)
    assert spec.n_moe_layers == 23 and spec.n_shared_experts == 1 and spec.ssm.n_layers == 23


def test_hybrid_granite_4_h():
    spec = resolve_model("ibm-granite/granite-4.0-h-small")
    _within(spec.params_total, 32_188_252_160)  # IBM's count (the catalog file's published figure)
    _within(spec.params_active, 9e9, rel=0.03)  # "9B active": 8.8B here
    assert spec.attention_layers == 4 and spec.ssm.kind == "mamba2"


def test_tiny_jamba_by_hand():
    cfg = {"model_type": "jamba", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
           "num_key_value_heads": 1, "intermediate_size": 32, "vocab_size": 10, "num_experts": 4,
           "num_experts_per_tok": 2, "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
           "expert_layer_offset": 1, "mamba_d_state": 4, "mamba_d_conv": 2, "mamba_expand": 2, "mamba_dt_rank": 2}
    s = model_from_config(cfg, "tiny-jamba")
    # layers 0, 2: Mamba-1 + dense MLP; layers 1, 3: attention + MoE
    mamba = 16 * 64 + 32 * (2 + 8) + 2 * 32 + 32 + 32 * 16 + (32 * 2 + 32) + (32 * 4 + 32) + (2 + 8)
    attn = 16 * 16 + 2 * 16 * 8 + 16 * 16
    dense, moe = 3 * 16 * 32, 16 * 4 + 4 * 3 * 16 * 32
    norms = 4 * 2 * 16 + 16
    assert s.params_total == 2 * (mamba + dense) + 2 * (attn + moe) + norms + 2 * 10 * 16
    assert s.attention_layers == 2 and s.ssm.kind == "mamba1" and s.n_moe_layers == 2
    assert ssm_scan_flops(s.ssm) == 2 * 32 * 2 + 9 * 32 * 4


def test_tiny_falcon_h1_by_hand():
    cfg = {"model_type": "falcon_h1", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
           "num_key_value_heads": 2, "intermediate_size": 32, "vocab_size": 10, "mamba_n_heads": 4,
           "mamba_d_head": 8, "mamba_n_groups": 1, "mamba_d_state": 4, "mamba_d_conv": 2, "mamba_chunk_size": 8}
    s = model_from_config(cfg, "tiny-falcon-h1")
    d_inner, conv_dim = 32, 32 + 8
    mamba = 16 * (2 * 32 + 8 + 4) + 32 * 16 + conv_dim * 2 + conv_dim + 3 * 4  # in/out proj, conv, dt/A/D
    attn = 4 * 16 * 16
    per_layer = mamba + attn + 3 * 16 * 32 + 2 * 16
    assert s.params_total == 2 * per_layer + 16 + 2 * 10 * 16
    assert s.attention_layers == 2 and s.ssm.n_layers == 2 and s.ssm.d_inner == d_inner  # side by side


# ---------------------------------------------------------------------------------------------------
# vision-language models


def test_vision_qwen2_5_vl():
    spec = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct")
    _within(spec.params_total, 8.29e9)  # verl's log of the checkpoint: 8.29B
    v = spec.vision
    assert (v.patch_size, v.merge, v.depth, v.hidden, v.intermediate) == (14, 2, 32, 1280, 3420)
    # 448 px assumed: 32 x 32 patches, 2 x 2 merged -> 256 tokens
    assert (v.image_size, v.patches_per_image, v.tokens_per_image) == (448, 1024, 256)
    assert v.window == 64 and v.n_full_layers == 4  # 112 px windows = 8 x 8 patches; 4 full layers
    blocks = 2.0 * 1024 * 32 * (1280 * 3 * 1280 + 1280 * 1280 + 3 * 1280 * 3420)
    attn = 4.0 * 1280 * 1024 * (4 * 1024 + 28 * 64)
    proj = 2.0 * 256 * (5120 * 5120 + 5120 * 3584)
    assert vision_flops_per_image(v) == pytest.approx(blocks + attn + proj)
    # --image-size 896: 64 x 64 patches -> 1024 tokens per image
    t = model_terms(spec, JobSpec(method="lora", images_per_example=2, image_size=896))
    assert t.image_tokens == 2 * 1024


def test_vision_fixed_towers():
    g = resolve_model("google/gemma-3-4b-it.multimodal")
    _within(g.params_total, 4.30e9)  # the model card figure (the file's note)
    assert (g.vision.patches_per_image, g.vision.tokens_per_image, g.vision.merge) == (4096, 256, 4)
    llava = resolve_model("llava-hf/llava-1.5-7b-hf")
    _within(llava.params_total, 7.06e9)
    assert llava.vision.tokens_per_image == 576 and llava.vision.patches_per_image == 577  # + CLS in the tower
    nxt = resolve_model("llava-hf/llava-v1.6-mistral-7b-hf")
    # anyres at 672 x 672: 4 tiles + the base image through the tower; 576 + 48 x 48 + 48 newline tokens
    assert nxt.vision.tiles == 5 and nxt.vision.tokens_per_image == 576 + 2304 + 48


def test_frozen_vs_trained_tower():
    spec = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct")
    frozen = model_terms(spec, JobSpec(method="full", images_per_example=1))
    trained = model_terms(spec, JobSpec(method="full", images_per_example=1, train_vision_tower=True))
    assert trained.params_trainable - frozen.params_trainable == spec.params_vision
    assert frozen.vision_trainable == 0 and trained.vision_trainable == 1
    assert frozen.vision_act_bytes_per_sample == 0 and trained.vision_act_bytes_per_sample > 0
    lora = model_terms(spec, JobSpec(method="lora", images_per_example=1))
    assert lora.params_frozen_other >= spec.params_vision


def test_images_on_a_text_model_is_an_input_error():
    with pytest.raises(InputError) as exc:
        model_terms(resolve_model("meta-llama/Llama-3.1-8B"), JobSpec(images_per_example=1))
    assert exc.value.field == "images-per-example"


def test_vision_estimate_shows_the_tower():
    from tuneplan.api import estimate

    r = estimate("Qwen/Qwen2.5-VL-7B-Instruct", "H100-SXM5-80GB", method="lora", images_per_example=2,
                 examples=1000, tokens_per_example=512)
    assert r.step_breakdown_s["vision_tower"] > 0
    assert any("448x448" in line and "frozen" in line for line in r.assumptions)
    text = estimate("meta-llama/Llama-3.1-8B", "H100-SXM5-80GB", method="lora", examples=1000,
                    tokens_per_example=512)
    assert "vision_tower" not in text.step_breakdown_s


# ---------------------------------------------------------------------------------------------------
# the registry, and the estimate for the three models


def test_every_reader_is_registered_under_its_model_type():
    for mt in ("deepseek_v3", "kimi_k2", "gpt_oss", "nemotron_h", "jamba", "falcon_h1", "granitemoehybrid",
               "llama4", "gemma3", "starcoder2", "cohere", "glm4_moe", "ernie4_5_moe", "hunyuan_v1_moe"):
        assert mt in READERS


@pytest.mark.parametrize("model, kwargs, expect", [
    # an nn.Linear per expert: LoRA over transformers 5's stacked experts rebuilds each W + BA (physics/moe_lora.py)
    ("deepseek-ai/DeepSeek-V3", {"gpu": "H200", "gpus": 32, "nodes": 4, "sharding": "zero3", "grad_ckpt": True,
                                 "moe_experts": "modules"}, "latent attention"),
    ("openai/gpt-oss-120b", {"gpu": "H100-SXM5-80GB", "gpus": 8, "sharding": "zero3", "grad_ckpt": True},
     "sliding-window"),
    ("nvidia/Nemotron-H-8B-Base-8K", {"gpu": "H100-SXM5-80GB"}, "Mamba-2"),
])
def test_estimate_answers_the_new_architectures(model, kwargs, expect):
    from tuneplan.api import estimate

    gpu = kwargs.pop("gpu")
    r = estimate(model, gpu, method="lora", micro_batch=1, examples=1000, tokens_per_example=2048, **kwargs)
    assert r.step_time_s > 0 and r.fits
    assert any(expect in line for line in r.assumptions)


def test_cli_images_on_a_text_model_exits_2(capsys):
    from tuneplan.cli import main

    code = main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--examples", "100",
                 "--tokens-per-example", "512", "--images-per-example", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "images-per-example" in err and "Traceback" not in err


def test_cli_vision_estimate_json(capsys):
    import json

    from tuneplan.cli import main

    code = main(["estimate", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "H100-SXM5-80GB", "--examples", "100",
                 "--tokens-per-example", "512", "--images-per-example", "1", "--image-size", "896",
                 "--train-vision-tower", "--json", "--interval", "0"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["job"]["images_per_example"] == 1 and d["job"]["train_vision_tower"] is True
    assert any("896x896" in a and "trained" in a for a in d["assumptions"])


def test_qwen2_vl_tower_by_hand():
    # Qwen2-VL-7B-Instruct's vision_config (embed_dim is the tower width, hidden_size the merger output)
    # on the catalog's Qwen2-7B text decoder: published 8.29B
    import json

    from tuneplan.specs.catalog import model_catalog

    text = json.loads(model_catalog()["Qwen/Qwen2-7B"].read_text(encoding="utf-8"))
    cfg = {**{k: v for k, v in text.items() if not k.startswith("_")}, "model_type": "qwen2_vl",
           "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                             "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                             "spatial_patch_size": 14, "temporal_patch_size": 2}}
    s = model_from_config(cfg, "qwen2-vl-7b")
    layer = (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + (1280 * 5120 + 5120) + (5120 * 1280 + 1280) + 4 * 1280
    merger = 2 * 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584)
    assert s.params_vision == 32 * layer + 3 * 2 * 14 * 14 * 1280 + merger
    _within(s.params_total, 8.29e9)
    assert s.vision.tokens_per_image == 256 and not s.vision.gated and s.vision.window == 0


def test_linear_attention_hybrids():
    nxt, t = _fwd("Qwen/Qwen3-Next-80B-A3B-Instruct")
    _within(nxt.params_total, 80e9)  # "80B" (model name / Qwen's card)
    assert nxt.attention_layers == 12 and nxt.ssm.kind == "deltanet" and nxt.ssm.n_layers == 36
    h, key, value = 2048, 16 * 128, 32 * 128
    deltanet = h * (2 * key + 2 * value) + h * 2 * 32 + value * h
    gated_attn = h * 2 * 16 * 256 + 2 * h * 2 * 256 + 16 * 256 * h  # q_proj writes q and its gate
    moe = h * 512 + 10 * 3 * h * 512 + 3 * h * 512 + h  # router, top-10, shared expert and its gate
    assert t.fwd_block_flops == 2.0 * (36 * deltanet + 12 * gated_attn + 48 * moe)
    # chunks of 64, 32 value heads with a 128 x 128 state each; conv1d over q, k, v
    assert ssm_scan_flops(nxt.ssm) == 2 * (2 * key + value) * 4 + 32 * (2 * 64 * 256 + 4 * 128 * 128)
    mm = resolve_model("MiniMaxAI/MiniMax-M1-80k")
    # MiniMax-M1 report: 456B total, 45.9B activated per token (without the embedding and the LM head)
    _within(mm.params_total, 456e9)
    _within(mm.params_active - mm.params_embedding - mm.params_lm_head, 45.9e9)
    assert mm.attention_layers == 10 and mm.ssm.kind == "lightning" and mm.ssm.n_layers == 70


def test_mlp_linears_gated_and_plain_by_hand():
    from tuneplan.specs.architectures.base import mlp_linears

    gated = mlp_linears(8, 32, 2, gated=True)
    assert [(x.name, x.in_features, x.out_features, x.n_layers) for x in gated] == [
        ("gate", 8, 32, 2), ("up", 8, 32, 2), ("down", 32, 8, 2)]
    fc1, fc2 = mlp_linears(8, 32, 2, gated=False, bias=True, count=4, active=2)
    assert (fc1.name, fc2.name) == ("fc1", "fc2")
    assert fc1.params == (8 * 32 + 32) * 4 * 2 and fc2.params == (32 * 8 + 8) * 4 * 2  # weights + biases, 4 experts
