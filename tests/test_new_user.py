"""What a new user trips on (issue 34 point 6): one clear line each, or the right answer."""

from __future__ import annotations

import pytest

from conftest import SHARED
from tuneplan.cli import main
from tuneplan.errors import InputError, UnknownNameError

TORCHTUNE = SHARED / "fixtures" / "training-configs" / "torchtune" / "llama3_1-8B_lora_single_device.yaml"


def _err(capsys, argv) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_plan_gpus_takes_types_not_a_count(capsys):
    err = _err(capsys, ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "8", "--examples", "1000",
                        "--tokens-per-example", "512"])
    assert "plan's --gpus takes GPU types" in err and "--max-gpus 8" in err


def test_model_config_given_to_from(capsys, tmp_path):
    from tuneplan.specs.catalog import model_catalog

    cfg = tmp_path / "config.json"
    cfg.write_text(model_catalog()["meta-llama/Llama-3.1-8B"].read_text())
    err = _err(capsys, ["estimate", "--from", str(cfg), "--gpu", "H100-SXM5-80GB"])
    assert "this is a model config" in err and "use --model PATH" in err


def test_torchtune_null_max_seq_len_names_the_key(capsys):
    if not TORCHTUNE.exists():
        pytest.skip("no shared fixtures")
    err = _err(capsys, ["estimate", "--from", str(TORCHTUNE), "--gpu", "H100-SXM5-80GB"])
    assert "tokenizer.max_seq_len is null" in err and TORCHTUNE.name in err and "--seq-len" in err
    assert main(["estimate", "--from", str(TORCHTUNE), "--gpu", "H100-SXM5-80GB", "--seq-len", "2048",
                 "--json"]) == 0


def test_torchtune_null_max_seq_len_takes_the_lengths_of_data(capsys, tmp_path):
    # untruncated samples are the data's lengths: --data gives them (it was refused, asking for --seq-len)
    if not TORCHTUNE.exists():
        pytest.skip("no shared fixtures")
    from sample_data import write_jsonl

    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b c d " * 50}, {"text": "e f " * 10}])
    assert main(["estimate", "--from", str(TORCHTUNE), "--gpu", "H100-SXM5-80GB", "--data", str(data),
                 "--json"]) == 0
    assert "or --data" in _err(capsys, ["estimate", "--from", str(TORCHTUNE), "--gpu", "H100-SXM5-80GB"])


def test_api_misspelt_keyword_names_the_closest():
    import tuneplan

    with pytest.raises(UnknownNameError, match="closest: micro_batch") as exc:
        tuneplan.estimate("meta-llama/Llama-3.1-8B", "H100-SXM5-80GB", micro_bach=4)
    assert isinstance(exc.value, InputError) and exc.value.field == "micro_bach"


def test_dir_lists_the_lazy_names():
    import tuneplan

    names = dir(tuneplan)
    assert {"estimate", "plan_run", "plan", "EstimateResult", "__version__"} <= set(names)
    assert all(hasattr(tuneplan, n) for n in ("estimate", "plan_run", "EstimateResult"))
