"""`--from`: reading users' training configs (the shared fixtures are real published files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED
from tuneplan.cli import main
from tuneplan.configs import ConfigError, read_config_texts, read_configs

FIX = SHARED / "fixtures" / "training-configs"
pytestmark = pytest.mark.skipif(not FIX.is_dir(), reason="shared fixtures not available")

# file(s) -> fields the reader must extract (JobSpec names; `model` is the id as written)
EXPECTED = {
    ("axolotl/llama3-8b-lora.yml",): dict(
        model="NousResearch/Meta-Llama-3-8B", method="lora", quant="int8", lora_rank=32, lora_alpha=16,
        lora_targets=("all-linear",), precision="bf16", optimizer="adamw-8bit", micro_batch=2, grad_accum=4,
        seq_len=4096, packing=True, grad_ckpt=True, flash_attn=True, epochs=4.0,
        modules_to_save=("embed_tokens", "lm_head")),
    ("axolotl/llama3-8b-qlora.yml",): dict(
        model="NousResearch/Meta-Llama-3-8B", method="qlora", quant="nf4", lora_rank=32, precision="bf16",
        optimizer="adamw", micro_batch=2, grad_accum=4, seq_len=4096, packing=True, grad_ckpt=True, epochs=4.0),
    ("axolotl/llama3-70b-qlora-fsdp.yaml",): dict(
        model="casperhansen/llama-3-70b-fp16", method="qlora", quant="nf4", lora_rank=8, sharding="fsdp-offload",
        micro_batch=1, grad_accum=4, seq_len=512, packing=False, padding="longest", grad_ckpt=True,
        optimizer="adamw", epochs=4.0),
    ("axolotl/llama3.1-8b-fft.yaml",): dict(
        model="NousResearch/Meta-Llama-3.1-8B", method="full", micro_batch=1, grad_accum=8, seq_len=8192,
        packing=True, grad_ckpt=True, optimizer="paged-adamw-8bit", epochs=1.0, precision="bf16"),
    ("axolotl/mixtral-8x22b-bigstral-ds-zero3.yaml", "deepspeed/axolotl-zero3_bf16_cpuoffload_params.json"): dict(
        model="mistral-community/Mixtral-8x22B-v0.1", method="freeze", trainable_layers=12, sharding="zero3-offload",
        micro_batch=1, grad_accum=1, seq_len=2048, packing=True, grad_ckpt=True, optimizer="adamw-8bit",
        epochs=3.0, precision="bf16"),
    ("llamafactory/llama3_lora_sft.yaml",): dict(
        model="meta-llama/Meta-Llama-3-8B-Instruct", method="lora", lora_rank=8, lora_targets=("all-linear",),
        precision="bf16", micro_batch=1, grad_accum=8, seq_len=2048, packing=False, grad_ckpt=True,
        epochs=3.0, examples=2000.0, lora_alpha=16),
    ("llamafactory/llama3_qlora_sft_otfq.yaml",): dict(
        method="qlora", quant="nf4", lora_rank=8, micro_batch=1, grad_accum=8, seq_len=2048, epochs=3.0),
    ("llamafactory/llama3_fsdp_qlora_sft.yaml", "accelerate/llamafactory-fsdp_config.yaml"): dict(
        method="qlora", quant="nf4", gpus=2, nodes=1, sharding="fsdp", precision="bf16", micro_batch=1,
        grad_accum=8, seq_len=2048),
    ("llamafactory/llama3_lora_sft.yaml", "deepspeed/llamafactory-ds_z2_config.json"): dict(
        method="lora", sharding="zero2", micro_batch=1, grad_accum=8, precision="bf16"),
    ("llamafactory/llama3_lora_sft.yaml", "deepspeed/llamafactory-ds_z3_offload_config.json"): dict(
        method="lora", sharding="zero3-offload"),
    ("torchtune/llama3_1-8B_lora_single_device.yaml",): dict(
        model="meta-llama/Llama-3.1-8B", method="lora", lora_rank=8, lora_alpha=16,
        lora_targets=("q", "v", "o", "gate", "up", "down"), precision="bf16", master_weights="none", gpus=1,
        micro_batch=2, grad_accum=8, packing=False, grad_ckpt=True, epochs=1.0, optimizer="adamw"),
    ("torchtune/llama3_1-8B_qlora_single_device.yaml",): dict(
        method="qlora", quant="nf4", lora_rank=8, micro_batch=2, grad_accum=8, grad_ckpt=True, gpus=1),
    ("torchtune/llama3_1-8B_full.yaml",): dict(
        model="meta-llama/Llama-3.1-8B", method="full", gpus=4, sharding="fsdp", micro_batch=2, grad_accum=1,
        grad_ckpt=True, precision="bf16", epochs=1.0),
    ("alignment-handbook/zephyr-7b-beta-sft-full.yaml", "accelerate/alignment-handbook-zero3.yaml"): dict(
        model="mistralai/Mistral-7B-v0.1", method="full", precision="bf16", flash_attn=True, micro_batch=16,
        grad_accum=1, seq_len=2048, packing=False, padding="longest", grad_ckpt=True, epochs=1.0,
        gpus=8, nodes=1, sharding="zero3"),
    ("alignment-handbook/smollm3-sft.yaml", "accelerate/alignment-handbook-zero3.yaml"): dict(
        model="HuggingFaceTB/SmolLM3-3B-checkpoints", method="full", precision="bf16", micro_batch=1,
        grad_accum=2, seq_len=65536, packing=True, grad_ckpt=True, epochs=5.0, gpus=8, sharding="zero3"),
    ("accelerate/alignment-handbook-ddp.yaml",): dict(gpus=8, nodes=1, sharding="ddp", precision="bf16"),
    ("accelerate/trl-multi_gpu.yaml",): dict(gpus=8, sharding="ddp", precision="bf16"),
    ("accelerate/trl-deepspeed_zero3.yaml",): dict(gpus=8, sharding="zero3", precision="bf16"),
    ("deepspeed/llamafactory-ds_z3_offload_config.json",): dict(sharding="zero3-offload"),
}


def _fields(r) -> dict:
    d = r.to_dict()
    return {**d["job"], **d["info"], "model": d["model"]}


@pytest.mark.parametrize("files", list(EXPECTED), ids=lambda fs: "+".join(Path(f).stem for f in fs))
def test_fixture_fields(files):
    got = _fields(read_configs([FIX / f for f in files]))
    want = EXPECTED[files]
    assert {k: got.get(k) for k in want} == want


# every training YAML with the launcher file it is launched with (SOURCES.md); extra flags where the
# file leaves out what an estimate needs (torchtune: max_seq_len null; accelerate alone: no model)
ESTIMATES = [
    (["axolotl/llama3-8b-lora.yml"], []),
    (["axolotl/llama3-8b-qlora.yml"], []),
    (["axolotl/llama3-70b-qlora-fsdp.yaml"], ["--gpus", "8"]),
    (["axolotl/llama3.1-8b-fft.yaml"], []),
    (["axolotl/mixtral-8x22b-bigstral-ds-zero3.yaml", "deepspeed/axolotl-zero3_bf16_cpuoffload_params.json"],
     ["--gpus", "8"]),
    (["llamafactory/llama3_lora_sft.yaml"], []),
    (["llamafactory/llama3_qlora_sft_otfq.yaml"], []),
    (["llamafactory/llama3_fsdp_qlora_sft.yaml", "accelerate/llamafactory-fsdp_config.yaml"], []),
    (["llamafactory/llama3_lora_sft.yaml", "deepspeed/llamafactory-ds_z2_config.json"], ["--gpus", "2"]),
    (["torchtune/llama3_1-8B_lora_single_device.yaml"], ["--seq-len", "2048"]),
    (["torchtune/llama3_1-8B_qlora_single_device.yaml"], ["--seq-len", "2048"]),
    (["torchtune/llama3_1-8B_full.yaml"], ["--seq-len", "2048"]),
    (["alignment-handbook/zephyr-7b-beta-sft-full.yaml", "accelerate/alignment-handbook-zero3.yaml"], []),
    (["alignment-handbook/zephyr-7b-beta-sft-full.yaml", "accelerate/alignment-handbook-ddp.yaml"], []),
    (["deepspeed/llamafactory-ds_z3_offload_config.json"], ["--model", "meta-llama/Llama-3.1-8B",
                                                            "--seq-len", "1024", "--gpus", "2"]),
    (["accelerate/trl-deepspeed_zero3.yaml"], ["--model", "meta-llama/Llama-3.1-8B", "--seq-len", "1024"]),
    (["accelerate/trl-multi_gpu.yaml"], ["--model", "meta-llama/Llama-3.1-8B", "--seq-len", "1024"]),
]


@pytest.mark.parametrize("files,extra", ESTIMATES, ids=lambda x: "+".join(Path(f).stem for f in x)
                         if x and isinstance(x[0], str) and "/" in x[0] else "")
def test_fixture_estimates(files, extra, capsys):
    argv = ["estimate", "--gpu", "H100-SXM5-80GB", "--interval", "0", "--json"]
    for f in files:
        argv += ["--from", str(FIX / f)]
    assert main(argv + extra) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["wall_clock_s"] > 0 and d["memory_per_gpu_gib"] > 0
    cfg = d["from_config"]
    assert cfg["used"] and cfg["formats"]
    job = d["job"]
    for u in cfg["used"]:  # the file's values reach the job unless a flag overrode them
        flag = "--" + u["field"].replace("_", "-")
        if u["field"] in job and flag not in extra and u["field"] != "lora_targets":
            assert job[u["field"]] == u["value"], u


def test_flags_override_the_file(capsys):
    argv = ["estimate", "--from", str(FIX / "alignment-handbook/zephyr-7b-beta-sft-full.yaml"),
            "--from", str(FIX / "accelerate/alignment-handbook-zero3.yaml"), "--gpu", "H100-SXM5-80GB",
            "--gpus", "4", "--micro-batch", "2", "--examples", "5000", "--interval", "0", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["gpus"], d["job"]["micro_batch"], d["job"]["sharding"], d["job"]["examples"]) == (4, 2, "zero3", 5000)


def test_text_output_lists_used_assumed_ignored(capsys):
    argv = ["estimate", "--from", str(FIX / "llamafactory/llama3_lora_sft.yaml"), "--gpu", "A100-SXM4-80GB",
            "--interval", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "lora_rank=8 <- llama3_lora_sft.yaml:lora_rank" in out
    assert "grad_ckpt=True (LLaMA-Factory enables gradient checkpointing" in out
    assert "learning_rate" in out.split("ignored:")[1]


def test_missing_reference_is_reported_not_fatal():
    r = read_configs([FIX / "axolotl/mixtral-8x22b-bigstral-ds-zero3.yaml"])
    why = [w for f, k, w in r.ignored if k == "deepspeed"]
    assert why and "deepspeed_configs/zero3_bf16_cpuoffload_params.json" in why[0] and "not found" in why[0]
    assert "sharding" not in r.job_kwargs()


def test_reference_followed_relative_to_the_file(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z2.json").write_text(json.dumps({"zero_optimization": {"stage": 2},
                                                         "train_micro_batch_size_per_gpu": "auto"}))
    cfg = tmp_path / "train.yaml"
    cfg.write_text("base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 16\ndeepspeed: ds/z2.json\n")
    r = read_configs([cfg])
    assert r.formats == ["axolotl", "deepspeed"]
    assert r.job_kwargs()["sharding"] == "zero2"
    assert any(v.key == "zero_optimization.stage" and v.file == "z2.json" for v in r.values)


def test_yaml_tag_refused_never_run(tmp_path):
    marker = tmp_path / "ran"
    bad = tmp_path / "evil.yaml"
    bad.write_text(f"base_model: x\nfoo: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match=r"evil.yaml: line 2: YAML tag 'tag:yaml.org,2002:python/object/apply:"
                                          r"os.system' refused"):
        read_configs([bad])
    assert not marker.exists()
    custom = tmp_path / "inc.yaml"
    custom.write_text("base_model: !include other.yaml\n")
    with pytest.raises(ConfigError, match="YAML tag '!include' refused"):
        read_configs([custom])


def test_script_refused_with_the_files_it_names(capsys):
    rc = main(["estimate", "--from", str(FIX / "llamafactory/fsdp_qlora_train.sh"), "--gpu", "H100-SXM5-80GB"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "a script, not a config: tuneplan never runs it" in err
    assert "examples/accelerate/fsdp_config.yaml" in err


@pytest.mark.parametrize("body,match", [
    ("base_model: [unclosed\n", r"bad.yaml: line \d+: not valid YAML"),
    ("- a\n- b\n", "not a mapping"),
    ("hello: world\n", "format not recognised"),
])
def test_unreadable_configs_one_line(tmp_path, capsys, body, match):
    p = tmp_path / "bad.yaml"
    p.write_text(body)
    rc = main(["estimate", "--from", str(p), "--gpu", "H100-SXM5-80GB"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    import re

    assert re.search(match, err), err


def test_bad_json_names_the_line(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text('{\n "zero_optimization": {"stage": 3,}\n}')
    with pytest.raises(ConfigError, match=r"ds.json: line 2: not valid JSON"):
        read_configs([p])


def test_no_such_file(capsys):
    assert main(["estimate", "--from", "/nonexistent/train.yaml", "--gpu", "H100-SXM5-80GB"]) == 2
    assert "/nonexistent/train.yaml: no such file" in capsys.readouterr().err


def test_format_forced_and_unknown(tmp_path):
    p = tmp_path / "args.json"
    p.write_text(json.dumps({"per_device_train_batch_size": 4, "gradient_checkpointing": True, "bf16": True,
                             "num_train_epochs": 2}))
    r = read_configs([p])
    assert r.formats == ["trl"]
    j = r.job_kwargs()
    assert (j["micro_batch"], j["grad_ckpt"], j["precision"], j["epochs"]) == (4, True, "bf16", 2.0)
    assert any("transformers TrainingArguments" in a for a in r.assumed())
    q = tmp_path / "x.yaml"
    q.write_text("micro_batch_size: 3\nhello: 1\n")
    assert read_configs([q], "axolotl").job_kwargs()["micro_batch"] == 3
    from tuneplan.errors import InputError

    with pytest.raises(InputError, match="format: unknown format 'nemo'"):
        read_configs([q], "nemo")


def test_trl_peft_defaults_and_dora(tmp_path):
    p = tmp_path / "sft.yaml"
    p.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nuse_peft: true\nuse_dora: true\nload_in_4bit: true\n"
                 "lora_target_modules: [q_proj, k_proj, v_proj, o_proj]\noptim: paged_adamw_8bit\n"
                 "attn_implementation: eager\n")
    j = read_configs([p]).job_kwargs()
    assert j["method"] == "dora" and j["lora_targets"] == ("q", "k", "v", "o") and j["quant"] == "nf4"
    assert (j["lora_rank"], j["seq_len"], j["micro_batch"], j["grad_ckpt"], j["precision"]) == (16, 1024, 8, True, "bf16")
    assert j["optimizer"] == "paged-adamw-8bit" and j["flash_attn"] is False
    q = tmp_path / "q.yaml"
    q.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nuse_peft: true\nload_in_4bit: true\n")
    assert read_configs([q]).job_kwargs()["method"] == "qlora"


def test_litgpt(tmp_path):
    # keys of litgpt's config_hub/finetune/*/qlora.yaml
    p = tmp_path / "qlora.yaml"
    p.write_text("checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf\nout_dir: out/finetune/qlora-llama2-7b\n"
                 "precision: bf16-true\nquantize: bnb.nf4\ndevices: 1\nnum_nodes: 1\nlora_r: 32\nlora_alpha: 16\n"
                 "lora_dropout: 0.05\nlora_query: true\nlora_key: false\nlora_value: true\nlora_projection: false\n"
                 "lora_mlp: false\nlora_head: false\ndata:\n  class_path: litgpt.data.Alpaca2k\n"
                 "train:\n  save_interval: 200\n  global_batch_size: 8\n  micro_batch_size: 2\n  epochs: 4\n"
                 "  max_seq_length: 512\noptimizer:\n  class_path: torch.optim.AdamW\n  init_args:\n    lr: 0.0002\n")
    r = read_configs([p])
    assert r.formats == ["litgpt"] and r.model == "meta-llama/Llama-2-7b-hf"
    j = r.job_kwargs()
    assert (j["method"], j["quant"], j["lora_rank"], j["lora_targets"]) == ("qlora", "nf4", 32, ("q", "v"))
    assert (j["micro_batch"], j["grad_accum"], j["seq_len"], j["epochs"], j["gpus"]) == (2, 4, 512, 4.0, 1)
    assert j["adapter_dtype"] == "compute" and j["master_weights"] == "none"


def test_global_batch_gives_gpus(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                             "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}))
    j = read_configs([p]).job_kwargs()
    assert (j["gpus"], j["sharding"], j["micro_batch"]) == (8, "zero1", 2)


def test_pasted_text_does_not_follow_references():
    body = b"base_model: meta-llama/Llama-3.1-8B\ndeepspeed: /etc/passwd\n"
    r = read_config_texts([("pasted.yaml", body, None)])
    assert r.formats == ["axolotl"]
    assert any(k == "deepspeed" and "not found" in w for f, k, w in r.ignored)


def test_plan_from(capsys):
    argv = ["plan", "--from", str(FIX / "llamafactory/llama3_fsdp_qlora_sft.yaml"),
            "--from", str(FIX / "accelerate/llamafactory-fsdp_config.yaml"), "--gpus", "A100-SXM4-80GB",
            "--interval", "0", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    rec = d["recommended"]
    assert rec["method"] == "qlora" and rec["gpus"] == 2 and rec["micro_batch"] == 1 and rec["grad_accum"] == 8
    assert d["from_config"]["formats"] == ["llamafactory", "accelerate"]


# ---- the web page's endpoint -------------------------------------------------------------------

def _client():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from tuneplan.web.app import create_app

    return TestClient(create_app(warm_up=False), raise_server_exceptions=False)


def test_web_from_config_fills_the_form_and_estimates():
    files = [{"name": p.name, "text": p.read_text()} for p in
             (FIX / "llamafactory/llama3_fsdp_qlora_sft.yaml", FIX / "accelerate/llamafactory-fsdp_config.yaml")]
    with _client() as c:
        r = c.post("/api/from-config", json={"files": files})
        assert r.status_code == 200, r.text
        d = r.json()
        f = d["fields"]
        assert d["formats"] == ["llamafactory", "accelerate"]
        assert (f["model"], f["method"], f["gpus"], f["sharding"], f["micro_batch"], f["grad_accum"]) == (
            "meta-llama/Meta-Llama-3-8B-Instruct", "qlora", 2, "fsdp", 1, 8)
        assert f["lora_targets"] == "all-linear" and any("lora_rank=8" in u for u in d["used"])
        est = c.post("/api/estimate", json={**f, "gpu": "A100-SXM4-80GB", "interval": 0})
        assert est.status_code == 200, est.text
        assert est.json()["job"]["quant"] == "nf4"


@pytest.mark.parametrize("text,msg", [
    ("a: !!python/object/apply:os.system ['true']\n", "refused"),
    ("hello: 1\n", "format not recognised"),
])
def test_web_from_config_bad_input_is_422(text, msg):
    with _client() as c:
        r = c.post("/api/from-config", json={"files": [{"name": "x.yaml", "text": text}]})
        assert r.status_code == 422
        assert msg in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize("body,key", [
    ("base_model: x\nmicro_batch_size: two\n", "micro_batch_size"),
    ("base_model: x\nlora_r: true\nadapter: lora\n", "lora_r"),
    ("base_model: x\nsequence_len: -5\n", "sequence_len"),
    ("base_model: x\nnum_epochs: lots\n", "num_epochs"),
])
def test_bad_values_name_file_and_key(tmp_path, body, key):
    p = tmp_path / "ax.yaml"
    p.write_text(body)
    with pytest.raises(ConfigError, match=rf"ax.yaml: {key}: '.*' is not"):
        read_configs([p])


def test_bad_deepspeed_number(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "four"}))
    with pytest.raises(ConfigError, match="ds.json: train_micro_batch_size_per_gpu: 'four' is not an integer"):
        read_configs([p])


def test_format_choices_match_the_readers():
    from tuneplan.commands.from_config import FORMAT_CHOICES
    from tuneplan.configs import FORMATS

    assert FORMAT_CHOICES == FORMATS


def test_axolotl_batch_size_gives_accumulation(tmp_path):
    p = tmp_path / "ax.yml"
    p.write_text("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 2\nbatch_size: 16\n")
    j = read_configs([p]).job_kwargs()
    assert (j["micro_batch"], j["grad_accum"], j["method"]) == (2, 8, "full")
    assert "gpus" not in j


# ---- any mapping: a result or a one-line ConfigError, never a crash ----------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KEYS = sorted({
    "base_model", "adapter", "load_in_4bit", "load_in_8bit", "lora_r", "lora_alpha", "lora_target_linear",
    "lora_target_modules", "lora_modules_to_save", "unfrozen_parameters", "micro_batch_size", "batch_size",
    "gradient_accumulation_steps", "sequence_len", "sample_packing", "pad_to_sequence_len", "gradient_checkpointing",
    "activation_offloading", "bf16", "fp16", "bfloat16", "float32", "fp8", "attn_implementation", "flash_attention",
    "optimizer", "num_epochs", "max_steps", "deepspeed", "fsdp", "fsdp_config", "tensor_parallel_size",
    "finetuning_type", "quantization_bit", "quantization_method", "lora_rank", "lora_target", "use_dora",
    "freeze_trainable_layers", "pure_bf16", "cutoff_len", "packing", "neat_packing", "stage", "flash_attn",
    "disable_gradient_checkpointing", "max_samples", "dataset", "model_name_or_path", "per_device_train_batch_size",
    "num_train_epochs", "optim", "torch_dtype", "use_peft", "max_length", "max_seq_length", "padding_free",
    "model", "tokenizer", "checkpointer", "epochs", "dtype", "enable_activation_checkpointing", "checkpoint_dir", "precision", "quantize", "devices", "num_nodes", "train", "lora_query", "lora_mlp",
    "num_processes", "num_machines", "mixed_precision", "distributed_type", "deepspeed_config",
    "zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "use_cpu",
})
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 100_000), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["auto", "lora", "qlora", "full", "freeze", "cpu",
                                                          "FSDP", "DEEPSPEED", "bf16", "all", "3", "full_shard"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(KEYS + ["_component_", "stage", "device", "offload_param", "enabled",
                                            "zero_stage", "fsdp_sharding_strategy", "packed", "max_seq_len"]),
                    inner, max_size=4)), max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=8),
       fmt=st.sampled_from([None, "axolotl", "llamafactory", "torchtune", "trl", "litgpt", "accelerate", "deepspeed"]))
def test_any_mapping_reads_or_fails_in_one_line(data, fmt):
    from tuneplan.errors import InputError

    text = json.dumps(data, allow_nan=True)
    try:
        r = read_config_texts([("fuzz.json", text, None)], fmt)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    r.to_dict()
    r.used(), r.assumed(), r.ignored_lines()


@pytest.mark.parametrize("body,want", [
    ("finetuning_type: lora\nstage: dpo\npref_loss: orpo\ncutoff_len: 1024\n", {"stage": "orpo"}),
    ("finetuning_type: lora\nstage: dpo\ncutoff_len: 1024\n", {"stage": "dpo"}),
    ("finetuning_type: full\nstage: kto\ncutoff_len: 1024\n", {"stage": "kto"}),
    ("base_model: x/y\nrl: grpo\ntrl:\n  num_generations: 8\n  max_completion_length: 256\n",
     {"stage": "grpo", "group_size": 8, "completion_len_max": 256}),
    ("base_model: x/y\nrl: ipo\n", {"stage": "dpo"}),
    ("model_name_or_path: x/y\nnum_generations: 4\nmax_completion_length: 128\n",
     {"stage": "grpo", "group_size": 4, "completion_len_max": 128}),
])
def test_stages(tmp_path, body, want):
    p = tmp_path / "c.yaml"
    p.write_text(body)
    j = read_configs([p]).job_kwargs()
    assert {k: j.get(k) for k in want} == want


def test_take_sets_a_stated_value_else_assumes_the_default():
    from tuneplan.configs.base import ConfigRead, Doc

    doc = Doc({"max_steps": -1, "sample_packing": "yes", "seq": None}, "f.yaml")
    assert doc.steps("max_steps") is None  # transformers' -1: not set
    assert doc.flag("sample_packing") is True and doc.flag("seq") is None and doc.flag("absent") is None
    out = ConfigRead()
    out.take("packing", doc.flag("sample_packing"), "f.yaml", "sample_packing", False, "default off")
    out.take("max_steps", doc.steps("max_steps"), "f.yaml", "max_steps")
    out.take("epochs", None, "f.yaml", "num_epochs", 3.0, "num_epochs not set: default")
    assert out.used() == ["packing=True <- f.yaml:sample_packing"]
    assert out.assumed() == ["epochs=3.0 (num_epochs not set: default)"]
