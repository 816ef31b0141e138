"""peft's catalogue of methods that train a causal LM, as tuneplan names them, with their options.

Each method names the peft config it stands for, the options that change its cost (trainable
parameters, FLOPs, memory) with peft's default and where that default comes from, and whether it
takes a rank (`--lora-rank`) and target modules (`--lora-targets`). Options are given as
`--peft-option NAME=VALUE` (peft's own config field names); an option not given takes the default
below, and the estimate says so. The cost model of each method is `tuneplan.physics.peft_methods`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from tuneplan.errors import InputError

PEFT_TESTED_VERSIONS = ("0.21", "0.22")
"""peft releases (major.minor) whose LoRA over transformers 5's stacked MoE experts the physics knows
(physics/moe_lora.py, read from each release's utils/transformers_weight_conversion.py). The newest
stands in when peft is not installed; pyproject.toml pins peft below the next release."""

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)?(?:[.+-]?[0-9A-Za-z.+-]*)?\s*$")


def peft_version_key(version: str) -> tuple[int, int]:
    """(major, minor) of a peft version string ('0.22.0', '0.21', '0.22.0rc1'); InputError naming
    --peft-version otherwise."""
    m = _VERSION.match(str(version))
    if not m:
        raise InputError("peft-version", f"'{version}' is not a version (e.g. 0.22 or 0.22.0; tested releases: "
                         f"{', '.join(PEFT_TESTED_VERSIONS)})")
    return int(m.group(1)), int(m.group(2))


@cache
def installed_peft_version() -> str | None:
    """The installed peft's version from its distribution metadata (peft is not imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("peft")
    except PackageNotFoundError:
        return None


def default_peft_version() -> str:
    """The peft version an estimate follows when the job names none: the installed one, else the
    newest tested release."""
    return installed_peft_version() or PEFT_TESTED_VERSIONS[-1]

DEFAULT_VIRTUAL_TOKENS = 20
"""Virtual tokens of prompt, prefix and p-tuning when not given: peft has no default
(`PromptLearningConfig.num_virtual_tokens=None`); 20 is the value of peft's prompt-based methods guide
(docs/source/task_guides/prompt_based_methods.md)."""

DEFAULT_GENERIC_ADAPTER_RANK = 8
"""A runs row of an unnamed adapter with no trainable-parameter count: the count stands in as peft's
default LoRA (r = 8 on the query and value projections), said in the row's defaults."""


@dataclass(frozen=True)
class Option:
    """One peft config field that changes the cost: its default (peft's, unless said) and why."""

    default: int | float | str | bool
    why: str


@dataclass(frozen=True)
class PeftMethod:
    name: str
    peft_config: str  # the peft config class it stands for
    summary: str  # one line for the assumptions
    rank: int | None = None  # peft's default rank r (None: the method takes no rank)
    targets: str = "attention-qv"  # peft's default targets: attention-qv, ia3, norms, none
    options: dict[str, Option] = field(default_factory=dict)
    lora_like: bool = False  # trained exactly like LoRA (same shapes, same passes): the LoRA physics


_VT = Option(DEFAULT_VIRTUAL_TOKENS, "peft has no default; 20 as in peft's prompt-based methods guide")

CATALOGUE: dict[str, PeftMethod] = {m.name: m for m in (
    PeftMethod("rslora", "LoraConfig(use_rslora=True)", "LoRA with rank-stabilised scaling alpha/sqrt(r): "
               "trained exactly as LoRA", lora_like=True),
    PeftMethod("pissa", "LoraConfig(init_lora_weights='pissa')", "LoRA initialised from the principal singular "
               "vectors (the SVD at start-up is not costed): trained exactly as LoRA", lora_like=True),
    PeftMethod("olora", "LoraConfig(init_lora_weights='olora')", "LoRA initialised by a QR decomposition of the "
               "weights (start-up only): trained exactly as LoRA", lora_like=True),
    PeftMethod("eva", "LoraConfig(init_lora_weights='eva')", "LoRA initialised from the SVD of activations of a "
               "few batches (start-up only): trained exactly as LoRA", lora_like=True),
    PeftMethod("loftq", "LoraConfig(init_lora_weights='loftq')", "LoRA over a quantised base, initialised to "
               "offset the quantisation error: trained as QLoRA (NF4 base unless --quant says otherwise)",
               lora_like=True),
    PeftMethod("lora-fa", "LoraConfig + peft.optimizers.create_lorafa_optimizer", "LoRA with the A matrices "
               "frozen: only B trains, no copy of each adapted module's input kept for A's gradient"),
    PeftMethod("adalora", "AdaLoraConfig", "SVD-form LoRA P diag(E) Q at init_r, pruned towards target_r "
               "(all init_r ranks stay allocated and trained); importance scores per trainable parameter",
               options={"init_r": Option(12, "AdaLoraConfig.init_r"),
                        "target_r": Option(8, "AdaLoraConfig.target_r (the budget; does not change memory)")}),
    PeftMethod("ia3", "IA3Config", "learned vectors scaling the keys, values and the MLP down projection's input",
               targets="ia3"),
    PeftMethod("loha", "LoHaConfig", "Hadamard product of two low-rank pairs; the delta weight is built every "
               "forward and multiplied in fp32", rank=8),
    PeftMethod("lokr", "LoKrConfig", "Kronecker product of a small matrix and a (low-rank) matrix; the delta "
               "weight is built every forward and multiplied in fp32", rank=8,
               options={"decompose_both": Option(False, "LoKrConfig.decompose_both"),
                        "decompose_factor": Option(-1, "LoKrConfig.decompose_factor")}),
    PeftMethod("oft", "OFTConfig", "block-diagonal orthogonal rotation of each adapted module's input "
               "(Cayley-Neumann parametrisation)",
               options={"oft_block_size": Option(32, "OFTConfig.oft_block_size"),
                        "r": Option(0, "OFTConfig.r (blocks; 0: in_features / oft_block_size)"),
                        "num_cayley_neumann_terms": Option(5, "OFTConfig.num_cayley_neumann_terms")}),
    PeftMethod("boft", "BOFTConfig", "butterfly product of block-diagonal orthogonal matrices, built as dense "
               "in_features x in_features products every forward, and an output scale",
               options={"boft_block_size": Option(4, "BOFTConfig.boft_block_size"),
                        "boft_block_num": Option(0, "BOFTConfig.boft_block_num"),
                        "boft_n_butterfly_factor": Option(1, "BOFTConfig.boft_n_butterfly_factor; peft keeps a "
                                                           "value above 1 only where its fbd CUDA extension "
                                                           "builds, else it trains with 1")}),
    PeftMethod("vera", "VeraConfig", "shared frozen random projections A and B (one pair for the model) with "
               "trained scaling vectors per module", rank=256),
    PeftMethod("fourierft", "FourierFTConfig", "n_frequency trained spectral coefficients per module; the delta "
               "weight is an inverse 2-D FFT built every forward and multiplied in fp32",
               options={"n_frequency": Option(1000, "FourierFTConfig.n_frequency")}),
    PeftMethod("hra", "HRAConfig", "r Householder reflections of the input space; the adapted weight W H is "
               "built every forward and replaces the base matmul, in fp32", rank=8),
    PeftMethod("bone", "MissConfig (Bone, renamed MiSS in peft 0.17)", "block-shared matrix added to the "
               "output from the input's r-sized chunks summed", rank=64,
               options={"init_weights": Option("true", "MissConfig.init_weights (true: MiSS; bat: Bone's "
                                                     "block-affine form, the weight built every forward)")}),
    PeftMethod("prefix-tuning", "PrefixTuningConfig", "trained key/value prefixes in every attention layer: "
               "attention runs over seq_len + num_virtual_tokens keys", targets="none",
               options={"num_virtual_tokens": _VT,
                        "prefix_projection": Option(False, "PrefixTuningConfig.prefix_projection"),
                        "encoder_hidden_size": Option(0, "PrefixTuningConfig.encoder_hidden_size "
                                                       "(0: the hidden size)")}),
    PeftMethod("prompt-tuning", "PromptTuningConfig", "trained input embeddings prepended to every sample: "
               "the model runs over seq_len + num_virtual_tokens positions", targets="none",
               options={"num_virtual_tokens": _VT}),
    PeftMethod("p-tuning", "PromptEncoderConfig", "virtual tokens from a trained prompt encoder (an MLP) "
               "prepended to every sample", targets="none",
               options={"num_virtual_tokens": _VT,
                        "encoder_hidden_size": Option(0, "PromptEncoderConfig.encoder_hidden_size "
                                                       "(0: the hidden size)"),
                        "encoder_reparameterization_type": Option("MLP", "PromptEncoderConfig "
                                                                "(MLP or LSTM)"),
                        "encoder_num_layers": Option(2, "PromptEncoderConfig.encoder_num_layers (LSTM only)")}),
    PeftMethod("ln-tuning", "LNTuningConfig", "the normalisation layers trained (every block parameter outside "
               "the linear layers, and the final norm)", targets="norms"),
    PeftMethod("adapter", "any other adapter (--trainable-params N)", "a generic adapter of N trainable "
               "parameters, costed like LoRA adapters: 2 FLOPs per parameter per token forward, fp32 weights, "
               "gradients and optimizer states", targets="none"),
)}
ALIASES = {"miss": "bone", "prefix": "prefix-tuning", "prompt": "prompt-tuning", "ptuning": "p-tuning",
           "prompt-encoder": "p-tuning", "ln": "ln-tuning", "lorafa": "lora-fa", "generic": "adapter"}
PEFT_METHOD_NAMES = tuple(CATALOGUE)
PEFT_TYPES = {"ADALORA": "adalora", "IA3": "ia3", "LOHA": "loha", "LOKR": "lokr", "OFT": "oft", "BOFT": "boft",
              "VERA": "vera", "FOURIERFT": "fourierft", "HRA": "hra", "MISS": "bone", "BONE": "bone",
              "PREFIX_TUNING": "prefix-tuning", "PROMPT_TUNING": "prompt-tuning", "P_TUNING": "p-tuning",
              "LN_TUNING": "ln-tuning"}
"""peft's `PeftType` values -> tuneplan's method (LORA and its variants are read from the LoRA config)."""
LORA_EQUIVALENT = {"rslora": "lora", "pissa": "lora", "olora": "lora", "eva": "lora", "loftq": "qlora"}
"""LoRA variants that differ only in initialisation or scaling: trained with the same shapes and passes
as the LoRA-family method named, so they share its physics (and its calibration)."""


def canonical(name: str) -> str:
    n = name.strip().lower().replace("_", "-")
    return ALIASES.get(n, n)


def _parse_value(text: str, default: int | float | str | bool, method: str, key: str):
    t = str(text).strip()
    if isinstance(default, bool):
        low = t.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise InputError("peft-option", f"{method} {key}: '{t}' is not true/false")
    if isinstance(default, int):
        try:
            return int(float(t)) if float(t).is_integer() else int(t)
        except ValueError:
            raise InputError("peft-option", f"{method} {key}: '{t}' is not an integer") from None
    if isinstance(default, float):
        try:
            return float(t)
        except ValueError:
            raise InputError("peft-option", f"{method} {key}: '{t}' is not a number") from None
    return t


def parse_options(text) -> tuple[tuple[str, str], ...]:
    """'a=1,b=2', ['a=1', 'b=2'], {'a': 1} or pairs -> sorted (name, value) pairs."""
    if not text:
        return ()
    if isinstance(text, dict):
        return tuple(sorted({str(k): str(v) for k, v in text.items()}.items()))
    items = []
    for p in [text] if isinstance(text, str) else text:
        if isinstance(p, tuple | list) and len(p) == 2:
            items.append((str(p[0]), str(p[1])))
            continue
        for piece in filter(str.strip, str(p).split(",")):
            if "=" not in piece:
                raise InputError("peft-option", f"'{piece.strip()}' is not NAME=VALUE")
            k, v = piece.split("=", 1)
            items.append((k.strip(), v.strip()))
    return tuple(sorted(dict(items).items()))


def method_options(method: str, given: tuple[tuple[str, str], ...]) -> tuple[dict, list[str]]:
    """The method's options (given ones parsed, the rest at their default) and which were defaulted."""
    m = CATALOGUE.get(method)
    opts = m.options if m else {}
    out: dict = {}
    defaulted: list[str] = []
    for k, v in given:
        if k not in opts:
            allowed = sorted(opts) or ["(none: this method takes no options)"]
            raise InputError("peft-option", f"'{k}' is not an option tuneplan models for {method}", allowed)
        out[k] = _parse_value(v, opts[k].default, method, k)
    for k, o in opts.items():
        if k not in out:
            out[k] = o.default
            defaulted.append(k)
    return out, defaulted
