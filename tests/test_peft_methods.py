"""PEFT methods (issue 14 part 4): each method's trainable parameter count equals the count of the real
peft model (peft 0.21, built from a small config with random weights on the CPU), and the FLOP and
memory terms of a few methods check against a hand count."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from conftest import tiny_llama_config
from tuneplan.errors import InputError
from tuneplan.physics.peft_methods import lokr_factorization, method_terms, peft_assumptions
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.architectures import model_from_config
from tuneplan.specs.job import METHODS, make_job

peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = tiny_llama_config()  # h 64, I 128, 2 layers, 4 heads, 2 KV heads
ODD = tiny_llama_config(hidden_size=96, intermediate_size=160, num_attention_heads=6, num_key_value_heads=2,
                        num_hidden_layers=3)  # h 96: LoKr factors 8 x 12, head_dim 16, KV 32


def hf_model(cfg: dict):
    torch.manual_seed(0)
    conf = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k != "architectures"})
    return transformers.LlamaForCausalLM(conf)


def peft_config(method: str, opts: dict, r: int | None, targets: list[str] | None):
    """The peft config a tuneplan method and its options stand for."""
    t = {"target_modules": targets} if targets else {}
    rk = {"r": r} if r else {}
    lora = {"rslora": {"use_rslora": True}, "pissa": {"init_lora_weights": "pissa"},
            "olora": {"init_lora_weights": "olora"}, "lora": {}, "lora-fa": {}, "dora": {"use_dora": True}}
    if method in lora:
        return peft.LoraConfig(task_type="CAUSAL_LM", **rk, **t, **lora[method])
    cls = {"adalora": peft.AdaLoraConfig, "ia3": peft.IA3Config, "loha": peft.LoHaConfig, "lokr": peft.LoKrConfig,
           "oft": peft.OFTConfig, "boft": peft.BOFTConfig, "vera": peft.VeraConfig,
           "fourierft": peft.FourierFTConfig, "hra": peft.HRAConfig, "bone": peft.MissConfig,
           "prefix-tuning": peft.PrefixTuningConfig, "prompt-tuning": peft.PromptTuningConfig,
           "p-tuning": peft.PromptEncoderConfig, "ln-tuning": peft.LNTuningConfig}[method]
    kw = dict(opts)
    if method == "adalora":
        kw["total_step"] = 10
    if method in ("prefix-tuning", "prompt-tuning", "p-tuning"):
        kw.setdefault("num_virtual_tokens", 20)  # tuneplan's default (peft has none)
    if method == "bone" and "init_weights" in kw:
        kw["init_weights"] = "bat" if kw["init_weights"] == "bat" else True
    return cls(task_type="CAUSAL_LM", **rk, **t, **kw)


def peft_count(cfg: dict, method: str, opts: dict, r: int | None, targets: list[str] | None,
               monkeypatch: pytest.MonkeyPatch | None = None) -> int:
    if method == "boft" and monkeypatch is not None:
        # without its CUDA extension (fbd, built with ninja) peft falls back to one butterfly factor: count
        # the shapes peft builds where the extension is there
        import peft.tuners.boft.layer as boft_layer

        monkeypatch.setattr(boft_layer, "get_fbd_cuda", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = peft.get_peft_model(hf_model(cfg), peft_config(method, opts, r, targets))
        if method == "lora-fa":
            from peft.optimizers import create_lorafa_optimizer

            create_lorafa_optimizer(model, r=r or 8, lora_alpha=16, lr=1e-4)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def tuneplan_count(cfg: dict, method: str, opts: dict, r: int | None, targets: list[str] | None) -> float:
    job = {"method": method, "peft_options": {k: str(v) for k, v in opts.items()}}
    if r:
        job["lora_rank"] = r
    elif method in ("lora", "dora", "rslora", "pissa", "olora"):
        job["lora_rank"] = 8  # peft's default (tuneplan's LoRA default: 16)
    if targets:
        job["lora_targets"] = ",".join(targets)
    elif method in ("lora", "dora", "rslora", "pissa", "olora", "lora-fa", "adalora"):
        job["lora_targets"] = "q_proj,v_proj"  # peft's default for Llama (tuneplan's LoRA default: all-linear)
    model = model_from_config(cfg, "tiny")
    return model_terms(model, make_job(**job)).params_trainable


CASES = [  # (config, method, options, rank, targets): every method at peft's defaults, then with options
    (SMALL, m, {}, None, None) for m in ("lora", "rslora", "pissa", "olora", "dora", "adalora", "ia3", "loha",
                                         "lokr", "oft", "vera", "fourierft", "hra", "prefix-tuning",
                                         "prompt-tuning", "p-tuning", "ln-tuning")
] + [
    (SMALL, "lora-fa", {}, 8, None),
    (SMALL, "boft", {"boft_block_size": 4}, None, None),
    (SMALL, "bone", {}, 16, None),  # MiSS's default r = 64 is h itself here
    (ODD, "lora", {}, 4, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    (ODD, "adalora", {"init_r": 6, "target_r": 4}, None, ["q_proj", "v_proj", "down_proj"]),
    (ODD, "lora-fa", {}, 4, ["q_proj", "v_proj", "up_proj"]),
    (ODD, "ia3", {}, None, None),
    (ODD, "loha", {}, 4, ["q_proj", "k_proj", "down_proj"]),
    (ODD, "lokr", {"decompose_both": True}, 2, ["q_proj", "v_proj", "gate_proj", "down_proj"]),
    (ODD, "lokr", {"decompose_factor": 4}, 16, ["q_proj", "o_proj"]),
    (ODD, "oft", {"oft_block_size": 16}, None, ["q_proj", "v_proj", "down_proj"]),
    (ODD, "oft", {"oft_block_size": 0, "r": 4}, None, None),
    (ODD, "oft", {"oft_block_size": 20}, None, None),  # not a divisor of 96: peft adjusts to 24
    (ODD, "boft", {"boft_block_size": 8, "boft_n_butterfly_factor": 2}, None, None),
    (ODD, "boft", {"boft_block_size": 0, "boft_block_num": 4}, None, ["q_proj", "v_proj", "up_proj"]),
    (ODD, "vera", {}, 8, ["q_proj", "v_proj", "up_proj"]),
    (ODD, "fourierft", {"n_frequency": 50}, None, ["q_proj", "v_proj", "down_proj"]),
    (ODD, "hra", {}, 4, ["q_proj", "v_proj", "gate_proj"]),
    (ODD, "bone", {}, 8, ["q_proj", "v_proj", "up_proj"]),
    (ODD, "bone", {"init_weights": "bat"}, 8, ["q_proj", "v_proj"]),
    (ODD, "prefix-tuning", {"num_virtual_tokens": 7}, None, None),
    (ODD, "prefix-tuning", {"num_virtual_tokens": 5, "prefix_projection": True, "encoder_hidden_size": 24}, None,
     None),
    (ODD, "prompt-tuning", {"num_virtual_tokens": 11}, None, None),
    (ODD, "p-tuning", {"num_virtual_tokens": 9, "encoder_hidden_size": 40}, None, None),
    (ODD, "ln-tuning", {}, None, None),
]


@pytest.mark.parametrize(("cfg", "method", "opts", "r", "targets"), CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_trainable_count_is_peft_exact(cfg, method, opts, r, targets, monkeypatch):
    assert tuneplan_count(cfg, method, opts, r, targets) == peft_count(cfg, method, opts, r, targets, monkeypatch)


def test_every_peft_method_has_a_count_case():
    covered = {c[1] for c in CASES}
    peft_methods = set(METHODS) - {"full", "freeze", "qlora", "gptq-lora", "alora", "adapter"}
    # eva and loftq: an initialisation of LoRA (same shapes), checked through lora; adapter: N given
    assert peft_methods - covered == {"eva", "loftq"}


def test_lokr_factorization_matches_peft():
    from peft.tuners.lokr.layer import factorization

    for dim in (1, 2, 7, 12, 64, 96, 127, 128, 160, 4096, 11008, 14336):
        for f in (-1, 2, 4, 5):
            assert lokr_factorization(dim, f) == factorization(dim, f)


def test_lora_variants_share_lora_physics():
    model = model_from_config(SMALL, "tiny")
    lora = model_terms(model, make_job(method="lora"))
    for m in ("rslora", "pissa", "olora", "eva"):
        assert model_terms(model, make_job(method=m)) == lora
    assert model_terms(model, make_job(method="loftq")) == model_terms(model, make_job(method="qlora"))


def test_hand_counted_terms():
    model = model_from_config(SMALL, "tiny")  # q 64->64, v 64->32, k 64->32, down 128->64, 2 layers
    ia3 = method_terms(model, make_job(method="ia3", precision="bf16"))
    # vectors: k out 32, v out 32, down in 128 per layer; each multiply keeps its 16-bit operand
    assert ia3["trainable"] == 2 * (32 + 32 + 128)
    assert ia3["peft_saved_bytes"] == 2 * (32 + 32 + 128) * 2.0
    assert ia3["adapter_flops"] == 0.0 and ia3["peft_fp32_flops"] == 0.0
    vera = method_terms(model, make_job(method="vera", lora_rank=16))
    assert vera["adapter_flops"] == 2 * 2.0 * 16 * ((64 + 64) + (64 + 32))  # 2 r (i + o) per module per token
    assert vera["peft_buffer_bytes"] == 4.0 * 16 * (64 + 64)  # fp32 A (r x max in) and B (max out x r)
    loha = method_terms(model, make_job(method="loha"))
    assert loha["peft_fp32_flops"] == 2 * 2.0 * (64 * 64 + 64 * 32)  # x @ delta_W in fp32
    assert loha["peft_fixed_act_bytes"] == 2 * 4.0 * (64 * 64 + 64 * 32)  # delta_W kept for backward
    assert loha["peft_step_flops_fp32"] == 2 * ((4.0 * 8 * 64 * 64 + 2.0 * 64 * 64) + (4.0 * 8 * 64 * 32 + 2.0 * 64 * 32))
    prefix = method_terms(model, make_job(method="prefix-tuning", peft_options="num_virtual_tokens=10"))
    assert prefix["adapter_flops"] == 4.0 * 64 * 2 * 10  # QK^T and AV over 10 more keys, per token
    boft = method_terms(model, make_job(method="boft"))
    assert boft["peft_step_flops"] == 2 * 2 * 6.0 * 64**3  # q and v, 2 layers, one butterfly factor
    oft = method_terms(model, make_job(method="oft"))
    assert oft["adapter_flops"] == 2 * 2 * 2.0 * 64 * 32  # block rotation of the 64-wide input, blocks of 32


def test_prompt_tuning_lengthens_the_sequence_not_the_tokens():
    from tuneplan.physics.step import tokens_per_step
    from tuneplan.specs.gpu import resolve_gpu

    model = model_from_config(SMALL, "tiny")
    gpu = resolve_gpu("H100-SXM5-80GB")
    job = make_job(method="prompt-tuning", peft_options={"num_virtual_tokens": 30}, micro_batch=2)
    a = build_arrays([(model, gpu, job, 100)])
    assert a["seq_len"][0] == 130 and tokens_per_step(a)[0] == 200


def test_methods_cost_what_they_build():
    import tuneplan

    kw = dict(gpu="H100-SXM5-80GB", examples=1000, tokens_per_example=1024, calibration="none", interval=0)
    lora = tuneplan.estimate("meta-llama/Llama-3.1-8B", method="lora", lora_targets="q,v", lora_rank=8, **kw)
    loha = tuneplan.estimate("meta-llama/Llama-3.1-8B", method="loha", **kw)
    ia3 = tuneplan.estimate("meta-llama/Llama-3.1-8B", method="ia3", **kw)
    prompt = tuneplan.estimate("meta-llama/Llama-3.1-8B", method="prompt-tuning", **kw)
    long_prompt = tuneplan.estimate("meta-llama/Llama-3.1-8B", method="prompt-tuning",
                                    peft_options={"num_virtual_tokens": 200}, **kw)
    assert loha.step_time_s > 1.5 * lora.step_time_s  # full-size fp32 matmuls with delta_W
    assert ia3.step_time_s < lora.step_time_s
    assert long_prompt.step_time_s > 1.1 * prompt.step_time_s  # (1024 + 200) / (1024 + 20) positions
    assert long_prompt.tokens_per_s < prompt.tokens_per_s
    assert any("Trainable parameters 524,288" in a for a in ia3.assumptions)


def test_unknown_option_and_missing_count_are_input_errors():
    model = model_from_config(SMALL, "tiny")
    with pytest.raises(InputError, match="peft-option.*oft_block_size"):
        make_job(method="vera", peft_options="oft_block_size=8")
    with pytest.raises(InputError, match="trainable-params"):
        model_terms(model, make_job(method="adapter"))
    assert model_terms(model, make_job(method="adapter", trainable_params=1234)).params_trainable == 1234


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuneplan.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("method", ["ia3", "vera"])
def test_cli_estimate_peft_method(method):
    r = _cli("estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100-SXM4-80GB", "--method", method,
             "--examples", "1000", "--tokens-per-example", "512", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["method"] == method and d["tokens_per_s"] > 0
    said = [a for a in d["assumptions"] if a.startswith(f"Method {method}")]
    assert said and "peft's default" in said[0] and "Trainable parameters" in said[0]


def test_cli_unknown_method_lists_the_allowed():
    r = _cli("estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100-SXM4-80GB", "--method", "glorax")
    assert r.returncode == 2
    for m in ("ia3", "vera", "prefix-tuning", "adapter", "lora"):
        assert m in r.stderr
    assert "Traceback" not in r.stderr


def test_assumptions_name_defaults():
    model = model_from_config(SMALL, "tiny")
    text = " ".join(peft_assumptions(model, make_job(method="fourierft")))
    assert "n_frequency = 1000 (default: FourierFTConfig.n_frequency)" in text
    text = " ".join(peft_assumptions(model, make_job(method="prompt-tuning")))
    assert "num_virtual_tokens = 20" in text and "peft has no default" in text


# ---- runs rows of method 'other' (issue 14 part 6) -----------------------------------------------

ROW = {"id": "x-1", "source": "x", "model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-SXM4-80GB", "gpus": "1",
       "method": "other", "micro_batch_size": "2", "seq_len": "512", "tokens_per_s": "1000", "precision": "bf16"}


def _read(tmp_path, **cells):
    import csv

    from tuneplan.runs import read_runs

    row = {**ROW, **cells}
    path = tmp_path / "x.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    return read_runs(path).df.to_dict("records")[0]


@pytest.mark.parametrize(("notes", "method"), [
    ("exp_name adalora; tuner adalora; tuner_params rank=8/target=ALL/use_rslora=False/use_dora=False", "adalora"),
    ("ChatGLM's official P-Tuning v2 script, pre_seq_len 128", "prefix-tuning"),
    ("trained with (IA)^3 vectors", "ia3"),
    ("peft VeRA, r=256", "vera"),
    ("exp_name x; tuner lora; use_dora=False", "lora"),
])
def test_other_rows_take_the_method_their_notes_name(tmp_path, notes, method):
    from tuneplan.learn.dataset import row_to_config

    row = _read(tmp_path, notes=notes)
    assert row["method"] == method and "named in the notes" in row["defaults_used"]
    assert "generic-adapter" not in row["caveats"]
    cfg = row_to_config(row)
    assert cfg.job.method == method
    if method == "prefix-tuning":
        assert dict(cfg.job.peft_options)["num_virtual_tokens"] == "128"


def test_other_row_naming_no_method_is_a_generic_adapter_with_a_caveat(tmp_path):
    from tuneplan.learn.dataset import row_to_config

    row = _read(tmp_path, notes="method: LLaMA-Adapter v1 (not LoRA); trainable parameters 1,229,760")
    assert row["method"] == "adapter" and "generic-adapter" in row["caveats"]
    cfg = row_to_config(row)
    assert cfg.job.method == "adapter" and cfg.job.trainable_params == 1229760
    bare = row_to_config(_read(tmp_path, notes="LISA layer-wise sampling"))
    # no count stated: peft's default LoRA (r = 8 on q, v) stands in, and says so
    assert bare.job.trainable_params == 32 * 8 * ((4096 + 4096) + (4096 + 4096))
    assert any("trainable_params" in u for u in bare.defaults_used)


def test_rows_without_a_setting_name_the_missing_column():
    from tuneplan.learn.dataset import configs_from_rows

    row = {k: v for k, v in ROW.items() if k != "seq_len"}
    row["method"] = "ia3"
    _, errors = configs_from_rows([row, {**ROW, "gpu": ""}])
    assert errors[0].startswith("seq_len:") and errors[1].startswith("gpu:")


def test_callback_records_peft_methods_by_name():
    from tuneplan.integrations.describe import _method

    assert _method(None, {"peft_type": "IA3"}, "none") == "ia3"
    assert _method(None, {"peft_type": "ADALORA"}, "none") == "adalora"  # not read as LoRA
    assert _method(None, {"peft_type": "PREFIX_TUNING"}, "none") == "prefix-tuning"
    assert _method(None, {"peft_type": "LORA"}, "nf4") == "qlora"
