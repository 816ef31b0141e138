"""One profiled configuration, the grid of them, and parsing of the profiler's options.

No torch here: this module is imported by the CLI on every start.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from tuneplan.errors import InputError, TuneplanError

METHODS = ("full", "lora", "dora", "qlora", "gptq-lora")
PRECISIONS = ("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16")
OPTIMIZERS = ("adamw", "sgd", "adafactor", "adamw-8bit")
ATTN_IMPLS = ("sdpa", "eager", "flash_attention_2")
SHARDINGS = ("none", "ddp", "fsdp")

# canonical LoRA target names (runs schema) -> module names in Llama-style transformers models
LORA_TARGET_MODULES = {
    "q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
    "gate": "gate_proj", "up": "up_proj", "down": "down_proj",
}

T = TypeVar("T")


@dataclass(frozen=True)
class ProfileConfig:
    """Everything that defines one measured configuration."""

    model: str
    method: str = "full"
    seq_len: int = 512
    micro_batch: int = 1
    grad_accum: int = 1
    layers: int | None = None  # truncate to this many layers (None: the whole model)
    lora_rank: int = 16
    lora_alpha: int | None = None  # default 2 * rank
    lora_targets: str = "all-linear"
    precision: str = ""  # "" -> fp32 on CPU, bf16 on CUDA
    optimizer: str = "adamw"
    grad_ckpt: bool = False
    attn: str = "sdpa"
    nproc: int = 1
    sharding: str = "none"  # none | ddp | fsdp (ddp by default when nproc > 1)
    steps: int = 8
    warmup: int = 2
    device: str = "auto"
    threads: int | None = None
    max_mem_gib: float | None = None
    config_override: tuple[tuple[str, Any], ...] = ()
    seed: int = 0
    gpu_name: str | None = None  # the `gpu` column; default local-cpu / the CUDA device's catalog name
    timeout_s: float = 1800.0  # for torchrun launches
    stage: str = "sft"  # sft | dpo | grpo (dpo, grpo: TRL's trainers, profile/stages.py)
    trainer: str = "loop"  # sft: the profiler's own loop, or "trl" (TRL's SFTTrainer); dpo/grpo: always trl
    group_size: int = 8  # grpo: completions per prompt (TRL num_generations default)
    completion_len: int = 64  # grpo: new tokens per completion (all generated: min_new_tokens)
    isolate: bool = False  # each configuration in a child process: a death by the OOM killer is an oom row

    @property
    def is_lora(self) -> bool:
        return self.method in ("lora", "dora", "qlora", "gptq-lora")

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch * self.seq_len * self.grad_accum * self.nproc

    @property
    def effective_sharding(self) -> str:
        if self.nproc <= 1:
            return "none"
        return "ddp" if self.sharding in ("", "none") else self.sharding

    def label(self) -> str:
        """Short text for progress lines."""
        parts = [self.method, f"r={self.lora_rank}" if self.is_lora else "", f"mb={self.micro_batch}",
                 f"seq={self.seq_len}", f"ga={self.grad_accum}" if self.grad_accum > 1 else "",
                 f"layers={self.layers}" if self.layers else "", self.precision, "ckpt" if self.grad_ckpt else "",
                 f"{self.effective_sharding}x{self.nproc}" if self.nproc > 1 else ""]
        return " ".join(p for p in parts if p)

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # config_override's pairs become lists

    @classmethod
    def from_json(cls, text: str) -> ProfileConfig:
        d = json.loads(text)
        d["config_override"] = tuple(tuple(kv) for kv in d.get("config_override") or ())
        return cls(**d)

    def validate(self) -> None:
        """Checks that need no torch; raises InputError."""
        for name, allowed, what in (("method", METHODS, "method"), ("precision", PRECISIONS, "precision"),
                                    ("optimizer", OPTIMIZERS, "optimizer"), ("sharding", SHARDINGS, "sharding"),
                                    ("attn", ATTN_IMPLS, "attention implementation")):
            value = getattr(self, name)
            if value not in allowed and (value or name != "precision"):  # precision "": the device's default
                raise InputError(name, f"unknown {what} '{value}'", allowed)
        for name in ("seq_len", "micro_batch", "grad_accum", "nproc", "steps", "lora_rank", "group_size",
                     "completion_len"):
            if getattr(self, name) < 1:
                raise InputError(name.replace("_", "-"), f"must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise InputError("warmup", "must be >= 0")
        if self.layers is not None and self.layers < 1:
            raise InputError("layers", f"must be >= 1, got {self.layers}")
        if self.threads is not None and self.threads < 1:
            raise InputError("threads", "must be >= 1")
        if self.max_mem_gib is not None and self.max_mem_gib <= 0:
            raise InputError("max-mem-gib", "must be > 0")
        if self.sharding == "fsdp" and self.nproc < 2:
            raise InputError("sharding", "fsdp needs --nproc 2 or more")


# ---------------------------------------------------------------- parsing


def parse_list(text: str | None, conv: Callable[[str], T], field_name: str) -> list[T]:
    """Comma-separated values, each converted (none given: an empty list); InputError naming the field
    on a bad value."""
    if not text:
        return []
    out: list[T] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(conv(item))
        except InputError:
            raise
        except (TypeError, ValueError):
            raise InputError(field_name, f"bad value '{item}'") from None
    if not out:
        raise InputError(field_name, "is empty")
    return out


def parse_int(s: str) -> int:
    s = s.strip().lower()
    if re.fullmatch(r"\d+k", s):
        return int(s[:-1]) * 1024
    return int(s)


def parse_layers(s: str) -> int | None:
    """A layer count, or `full`/`all` for the whole model."""
    if s.strip().lower() in ("full", "all", "none"):
        return None
    return parse_int(s)


def parse_on_off(s: str) -> bool:
    v = s.strip().lower()
    if v in ("on", "1", "true", "yes"):
        return True
    if v in ("off", "0", "false", "no"):
        return False
    raise InputError("grad-ckpt", f"bad value '{s}'", ["on", "off"])


_DURATION_PART = r"(\d+(?:\.\d+)?)(h|hr|hours?|min|minutes?|m|sec|seconds?|s)?"
"""A number and its unit (none: seconds); the longer unit names first, so `10min` is one part."""


def parse_duration(text: str) -> float:
    """`90s`, `10m`, `1h`, `1h30m`, `600` (seconds) -> seconds."""
    s = str(text).strip().lower().replace(" ", "")
    if not s:
        raise InputError("budget", "is empty; give a duration like 90s, 10m or 1h")
    if not re.fullmatch(f"(?:{_DURATION_PART})+", s):
        raise InputError("budget", f"cannot read duration '{text}'; give e.g. 90s, 10m, 1h or 1h30m")
    unit_s = {"h": 3600.0, "m": 60.0, "s": 1.0}
    total = sum(float(n) * unit_s[(unit or "s")[0]] for n, unit in re.findall(_DURATION_PART, s))
    if total <= 0:
        raise InputError("budget", f"'{text}' is no time at all; give e.g. --budget 10m")
    return total


def parse_overrides(text: str | None) -> tuple[tuple[str, Any], ...]:
    """`hidden_size=256,num_hidden_layers=2,tie_word_embeddings=true` -> ((key, value), ...).

    Values are read as JSON when they parse (numbers, true/false, null, lists), else kept as text.
    """
    if not text:
        return ()
    out: list[tuple[str, Any]] = []
    for part in re.split(r",(?=\s*[A-Za-z_][\w.]*\s*=)", text.strip()):
        if not part.strip():
            continue
        if "=" not in part:
            raise InputError("config-override", f"'{part}' is not key=value")
        key, raw = (x.strip() for x in part.split("=", 1))
        if not re.fullmatch(r"[A-Za-z_]\w*", key):
            raise InputError("config-override", f"bad key '{key}'")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = {"true": True, "false": False, "none": None}.get(raw.lower(), raw)
        out.append((key, value))
    return tuple(out)


def lora_target_modules(targets: str) -> str | list[str]:
    """`all-linear` stays as is (peft's own keyword); `q,v` -> ["q_proj", "v_proj"]."""
    t = (targets or "all-linear").strip()
    if t in ("all-linear", "all", "all_linear"):
        return "all-linear"
    return [LORA_TARGET_MODULES.get(x.strip(), x.strip()) for x in t.split(",") if x.strip()]


# ---------------------------------------------------------------- the grid


GRID_KEYS = ("method", "seq_len", "micro_batch", "grad_accum", "layers", "lora_rank", "precision",
             "grad_ckpt", "attn", "optimizer", "nproc")


def expand_grid(base: ProfileConfig, **lists: Iterable[Any]) -> list[ProfileConfig]:
    """Every combination of the given lists (keys among GRID_KEYS), in a stable order.

    LoRA rank only varies for LoRA-like methods (full fine-tuning gets one row per other setting).
    """
    keys = [k for k in GRID_KEYS if k in lists]
    unknown = set(lists) - set(GRID_KEYS)
    if unknown:
        raise TypeError(f"unknown grid keys: {sorted(unknown)}")
    values = [list(dict.fromkeys(lists[k])) for k in keys]
    out: list[ProfileConfig] = []
    seen: set[ProfileConfig] = set()
    for combo in itertools.product(*values):
        cfg = replace(base, **dict(zip(keys, combo, strict=True)))
        if not cfg.is_lora and cfg.lora_rank != base.lora_rank:
            cfg = replace(cfg, lora_rank=base.lora_rank)
        if cfg in seen:
            continue
        seen.add(cfg)
        cfg.validate()
        out.append(cfg)
    return out


# ---------------------------------------------------------------- model configs


@dataclass
class ModelSource:
    """A model's raw config.json dict (keys starting with `_` removed) and where it came from."""

    name: str
    hf_id: str
    config: dict
    origin: str


def load_model_source(model: str) -> ModelSource:
    """The config of a catalog name, a config.json path (or a folder holding one), or a Hub id.

    Through the catalog (`tuneplan.specs.catalog.load_model_config`: aliases, checkpoint variants,
    inferred values, Hub when reachable).
    """
    if not model or not str(model).strip():
        raise InputError("model", "is empty")
    model = str(model).strip()
    p = Path(model).expanduser()
    raw_file: dict | None = None
    if p.is_dir() and (p / "config.json").is_file():
        p = p / "config.json"
    if p.is_file():
        from tuneplan.errors import parse_user_json, read_user_text
        from tuneplan.specs.limits import MAX_CONFIG_FILE_BYTES

        # bounded as every config.json: size, UTF-8, nesting (a 3,000-deep file is one line, not a RecursionError)
        raw_file = parse_user_json(read_user_text(p, "model", "config.json", MAX_CONFIG_FILE_BYTES), "model", str(p))
        if not isinstance(raw_file, dict):
            raise InputError("model", f"{p} is not a Hugging Face config.json")
    from tuneplan.specs import catalog

    cfg = dict(catalog.load_model_config(model))  # InputError with the closest names
    if raw_file is not None:
        hf_id = str(raw_file.get("_hf_id") or raw_file.get("_name_or_path") or model)
    else:
        try:
            hf_id = catalog.resolve_model(model).name
        except TuneplanError:
            hf_id = model
    if not cfg.get("model_type"):
        raise InputError("model", f"the config of '{model}' has no model_type; transformers cannot build it "
                                  "(add model_type to the config.json)")
    return ModelSource(model, hf_id, cfg, str(p) if raw_file is not None else "catalog")


def apply_overrides(config: dict, overrides: Iterable[tuple[str, Any]]) -> dict:
    return {**config, **dict(overrides)}
