"""GaLore-AdamW (`--optimizer galore-adamw`, physics/memory.py galore_state_elements): each block linear's
moments at rank r on its larger side and the projector on its smaller one, r x (min + 2 max) elements per
matrix (galore_torch 1.0 GaLoreProjector / GaLoreAdamW, which transformers' `galore_adamw` runs). Checked
by hand on Llama-3.1-8B, against ms-swift's GaLore tables, and through configs, runs rows and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from tuneplan.errors import InputError
from tuneplan.physics.constants import BYTES_PER_GIB
from tuneplan.physics.memory import memory
from tuneplan.physics.terms import build_arrays, model_terms
from tuneplan.specs.catalog import resolve_model
from tuneplan.specs.gpu import gpu_catalog
from tuneplan.specs.job import make_job

H100 = gpu_catalog()["H100-SXM5-80GB"]
LLAMA8 = resolve_model("meta-llama/Llama-3.1-8B")


def _mem(**kw) -> dict:
    job = make_job(**{"method": "full", "master_weights": "none", "micro_batch": 1, "seq_len": 512, **kw})
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in memory(build_arrays([(LLAMA8, H100, job, 512)])).items()}


def test_galore_states_by_hand() -> None:
    t = model_terms(LLAMA8, make_job(method="full", optimizer="galore-adamw"))
    # per layer: q, o 4096 x 4096; k, v 4096 x 1024; gate, up, down 4096 x 14336 (32 layers)
    assert t.galore_min_dims == 32 * (4096 + 1024 + 1024 + 4096 + 3 * 4096)
    assert t.galore_max_dims == 32 * (4 * 4096 + 3 * 14336)
    assert t.galore_rank == 128  # transformers' default
    galore, adamw = _mem(optimizer="galore-adamw"), _mem(optimizer="adamw")
    # bf16 in place: AdamW's two bf16 moments (4 bytes) on the weights GaLore does not project (embeddings,
    # head, norms), and 2 bytes per projected element
    projected = 128 * (t.galore_min_dims + 2 * t.galore_max_dims) * 2
    rest = (t.params_trainable - t.params_block_linear) * 4
    assert galore["optimizer_gib"] == pytest.approx((projected + rest) / BYTES_PER_GIB, rel=1e-9)
    assert adamw["optimizer_gib"] == pytest.approx(t.params_trainable * 4 / BYTES_PER_GIB, rel=1e-9)
    assert galore["gradients_gib"] == pytest.approx(adamw["gradients_gib"])  # autograd's full gradients
    # a lower rank holds less; the moments scale with the rank
    low = _mem(optimizer="galore-adamw", galore_rank=32)
    assert low["optimizer_gib"] == pytest.approx((projected / 4 + rest) / BYTES_PER_GIB, rel=1e-9)


def test_galore_is_full_fine_tuning_only() -> None:
    with pytest.raises(InputError, match="galore-adamw is full fine-tuning"):
        make_job(method="lora", optimizer="galore-adamw")
    with pytest.raises(InputError, match="galore-rank"):
        make_job(method="full", optimizer="galore-adamw", galore_rank=0)


def test_ms_swift_galore_tables() -> None:
    """ms-swift's tuner benchmark (Qwen-7B-Chat full fine-tuning with GaLore at rank 128, bf16, one A100,
    torch.cuda.max_memory_reserved): 47.02 GiB, 72.5 predicted when GaLore was counted as AdamW."""
    from conftest import SHARED
    from tuneplan.estimators.tuneplan_physics import TuneplanEstimator
    from tuneplan.learn.measured import training_set
    from tuneplan.learn.predict_table import memory_for_kind, predict_configs
    from tuneplan.runs import read_runs

    df = read_runs([SHARED / "reference" / "runs" / "ms-swift.csv"]).df
    ts = training_set(df)
    ids = list(ts.df["id"].astype(str))
    i = ids.index("ms-swift-104")
    assert ts.configs[i].job.optimizer == "galore-adamw"
    mem = memory_for_kind(predict_configs([ts.configs[i]], TuneplanEstimator(), with_max_batch=False), [ts.mem_kind[i]])
    assert mem[0] == pytest.approx(47.02, rel=0.05)


def test_configs_runs_rows_and_memory_table(tmp_path, capsys) -> None:
    from tuneplan.cli import main
    from tuneplan.configs import read_configs
    from tuneplan.learn.dataset import row_to_config
    from tuneplan.plan.memory_table import memory_table

    hf = tmp_path / "hf.yaml"
    hf.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nbf16: true\noptim: galore_adamw\n"
                  "optim_target_modules: [attn, mlp]\noptim_args: rank=64, update_proj_gap=100, scale=0.25\n")
    kw = read_configs([hf]).job_kwargs()
    assert kw["optimizer"] == "galore-adamw" and kw["galore_rank"] == 64
    lf = tmp_path / "lf.yaml"
    lf.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\nfinetuning_type: full\nuse_galore: true\n")
    kw = read_configs([lf]).job_kwargs()
    assert kw["optimizer"] == "galore-adamw" and kw["galore_rank"] == 16  # LLaMA-Factory's default
    row = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM5-80GB", "method": "full", "seq_len": "512",
           "micro_batch_size": "1", "gpus": "1", "optimizer": "galore-adamw", "galore_rank": "32"}
    assert row_to_config(row).job.galore_rank == 32
    with pytest.raises(InputError, match="galore_rank"):
        row_to_config({**row, "galore_rank": "many"})
    t = memory_table("meta-llama/Llama-3.1-8B", methods=["full", "lora"], precisions=["bf16"], optimizer="galore-adamw")
    plain = memory_table("meta-llama/Llama-3.1-8B", methods=["full", "lora"], precisions=["bf16"])
    by = {(r["method"], r["weights"]): r["memory_per_gpu_gib"] for r in t.rows}
    base = {(r["method"], r["weights"]): r["memory_per_gpu_gib"] for r in plain.rows}
    assert by[("full", "bf16 weights trained in place")] < base[("full", "bf16 weights trained in place")] - 20
    assert by[("lora", "bf16")] == pytest.approx(base[("lora", "bf16")])  # the other methods keep AdamW
    assert any("GaLore" in n for n in t.notes)
    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--method", "lora",
                 "--optimizer", "galore-adamw"]) == 2
    assert "galore-adamw is full fine-tuning" in capsys.readouterr().err
