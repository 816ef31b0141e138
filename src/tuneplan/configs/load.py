"""Loading a config file safely (JSON, or YAML through `yaml.safe_load` with every explicit tag
refused; both with bounded nesting and YAML alias expansion, tuneplan.errors.MAX_NESTING and
MAX_EXPANDED_NODES) and detecting its format from its keys."""

from __future__ import annotations

import json
import re

from tuneplan.configs.base import FORMATS, ConfigError
from tuneplan.configs.rl import detect, openrlhf_args
from tuneplan.errors import TooComplexError, load_bounded_json, load_bounded_yaml

MAX_CONFIG_BYTES = 4_000_000
"""Largest config file read (bytes): training configs are a few kB; the largest fixture is ~14 kB."""
SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".py", ".ps1", ".bat", ".cmd")


def load_file(name: str, content: bytes | str) -> tuple[dict, str]:
    """(the parsed mapping, the text). One-line ConfigError for anything else."""
    if isinstance(content, bytes):
        if len(content) > MAX_CONFIG_BYTES:
            raise ConfigError(name, "", f"larger than {MAX_CONFIG_BYTES // 1_000_000} MB: not a training config")
        try:
            text = content.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ConfigError(name, "", "not UTF-8 text (a binary file?)") from None
    else:
        text = content
    stripped = text.lstrip()
    launch = openrlhf_args(text)  # an OpenRLHF launch script: its arguments read as text, never run
    if launch is not None:
        return launch, text
    if name.lower().endswith(SCRIPT_SUFFIXES) or stripped.startswith("#!"):
        raise ConfigError(name, "", "a script, not a config: tuneplan never runs it; pass the config files it "
                          "launches with --from" + _script_refs(text))
    if name.lower().endswith(".json") or stripped.startswith(("{", "[")):
        try:
            data = load_bounded_json(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(name, f"line {exc.lineno}", f"not valid JSON ({exc.msg})") from None
        except TooComplexError as exc:
            raise ConfigError(name, "", f"{exc}: not a training config") from None
        except ValueError as exc:  # an integer of more than 4,300 digits
            raise ConfigError(name, "", f"holds a value that cannot be read ({exc})") from None
    else:
        data = _safe_yaml(name, text)
    if not isinstance(data, dict):
        raise ConfigError(name, "", "not a mapping of keys to values (is it a training config?)")
    return data, text


def _safe_yaml(name: str, text: str):
    """The YAML document, read with bounded nesting and alias expansion and every explicit tag refused."""
    import yaml

    try:
        return load_bounded_yaml(text, refuse_tags=True)
    except TooComplexError as exc:
        raise ConfigError(name, f"line {exc.line}" if exc.line else "", str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(name, where, f"not valid YAML ({problem})") from None


def _script_refs(text: str) -> str:
    refs = re.findall(r"[\w./-]+\.(?:ya?ml|json)", text)
    uniq = list(dict.fromkeys(refs))
    return f" (it names {', '.join(uniq)})" if uniq else ""


def detect_format(data: dict, name: str, text: str = "") -> str:
    """The format of a parsed config, from the keys only each framework uses."""
    keys = set(data)
    if (keys & {"model_type", "architectures"}) and keys & {"hidden_size", "num_hidden_layers", "n_layer", "d_model",
                                                           "n_embd", "text_config", "vocab_size"}:
        raise ConfigError(name, "", "this is a model config (config.json), not a training config: use --model PATH")
    if keys & {"compute_environment", "distributed_type"}:
        return "accelerate"
    if detect(data):
        return detect(data)
    if keys & {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
               "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"}:
        return "deepspeed"
    if any(isinstance(v, dict) and "_component_" in v for v in data.values()):
        return "torchtune"
    if keys & {"base_model", "sequence_len", "micro_batch_size", "lora_target_linear", "sample_packing",
               "adapter", "unfrozen_parameters"}:
        return "axolotl"
    if keys & {"finetuning_type", "cutoff_len", "lora_target", "quantization_bit", "freeze_trainable_layers"}:
        return "llamafactory"
    if "checkpoint_dir" in keys or (isinstance(data.get("train"), dict) and set(data["train"]) & {
            "global_batch_size", "micro_batch_size", "max_seq_length"}) or keys & {"lora_query", "lora_mlp"}:
        return "litgpt"
    if keys & {"per_device_train_batch_size", "num_train_epochs", "model_name_or_path", "gradient_accumulation_steps",
               "max_seq_length", "max_length", "output_dir", "gradient_checkpointing", "optim"}:
        return "trl"
    raise ConfigError(name, "", f"format not recognised from its keys: give --format (one of {', '.join(FORMATS)})")
