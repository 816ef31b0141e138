"""Unknown Hugging Face ids: config.json fetched into $TUNEPLAN_HOME/hub (mocked Hub), or a one-line
error naming --model path/to/config.json (offline, or without the `hub` extra)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from tests.conftest import SHARED

from tuneplan.cli import main
from tuneplan.specs import catalog

SMOLLM3 = {  # SmolLM3-3B's published shapes (config.json of HuggingFaceTB/SmolLM3-3B): 3.08 B parameters
    "model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
    "vocab_size": 128256, "max_position_embeddings": 65536, "tie_word_embeddings": True, "hidden_act": "silu",
}
FIX = SHARED / "fixtures" / "training-configs"


@pytest.fixture
def fake_hub(monkeypatch):
    """hf_hub_download that 'downloads' config.json into the cache_dir it is given; records the calls."""
    pytest.importorskip("huggingface_hub")
    import huggingface_hub

    calls = []

    class LocalEntryNotFoundError(Exception):
        pass

    def fake(repo_id, filename, **kw):
        calls.append((repo_id, filename, kw))
        target = Path(kw["cache_dir"]) / repo_id.replace("/", "--") / filename
        if kw.get("local_files_only") and not target.is_file():
            raise LocalEntryNotFoundError("not cached")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(SMOLLM3))
        return str(target)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    monkeypatch.setattr(catalog, "_hub_reachable", lambda timeout=3.0: True)
    return calls


def test_fetches_config_json_only_into_tuneplan_home(fake_hub, capsys):
    # (HuggingFaceTB/SmolLM3-3B itself is in the catalog now: a repo id the catalog does not hold)
    argv = ["estimate", "--model", "HuggingFaceTB/SmolLM3-3B-checkpoints", "--gpu", "H100-SXM5-80GB", "--examples", "1000",
            "--seq-len", "2048", "--interval", "0", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert {c[1] for c in fake_hub} == {"config.json"}  # never weights
    home = Path(os.environ["TUNEPLAN_HOME"]) / "hub"
    assert all(Path(c[2]["cache_dir"]) == home for c in fake_hub)
    assert any("fetched from the Hugging Face Hub (no weights, no code), cached at " + str(home) in a
               for a in d["assumptions"])
    n = len(fake_hub)
    catalog._spec_of.cache_clear()
    assert main(argv) == 0  # second time: from the cache, no network call
    capsys.readouterr()
    assert len(fake_hub) == n + 1 and fake_hub[-1][2].get("local_files_only")


def test_smollm3_recipe_with_fetched_config(fake_hub, capsys):
    argv = ["estimate", "--from", str(FIX / "alignment-handbook/smollm3-sft.yaml"),
            "--from", str(FIX / "accelerate/alignment-handbook-zero3.yaml"), "--gpu", "H100-SXM5-80GB",
            "--interval", "0", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "HuggingFaceTB/SmolLM3-3B-checkpoints" and d["gpus"] == 8
    assert d["job"]["seq_len"] == 65536 and d["job"]["sharding"] == "zero3" and d["job"]["packing"] is True


def test_offline_names_model_path(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = main(["estimate", "--model", "some-org/Unknown-Model-7B", "--gpu", "H100-SXM5-80GB", "--examples", "10",
               "--seq-len", "512"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "cannot be reached" in err and "--model path/to/config.json" in err


def test_without_the_hub_extra_names_the_extra(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "huggingface_hub"
                        else real(name, *a))
    rc = main(["estimate", "--model", "some-org/Unknown-Model-7B", "--gpu", "H100-SXM5-80GB", "--examples", "10",
               "--seq-len", "512"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "pip install 'tuneplan[hub]'" in err and "--model path/to/config.json" in err
