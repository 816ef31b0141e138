"""Training frameworks as data (`tuneplan/data/frameworks.yaml`): the kernels and defaults each one
uses (attention kernel, cross-entropy, fused LoRA / element-wise kernels, distributed optimizer, fp32
gradients, sequence parallel, overlap), each with its source. The physics turns these into time and
memory (physics/frameworks.py); nothing here is fitted."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from tuneplan.errors import InputError

ATTENTION_KERNELS = ("flash1", "flash2", "flash3", "te", "sdpa", "eager")
CROSS_ENTROPY_KINDS = ("none", "chunked", "fused", "bf16")
MOE_EXPERT_LAYOUTS = ("modules", "stacked")
"""How the model code holds a MoE layer's experts (physics/moe_lora.py): an nn.Linear per expert
(transformers 4, most frameworks) or stacked 3-D tensors (transformers >= 5), which peft adapts as a whole."""
OPTIMIZER_IMPLS = ("foreach", "fused", "for-loop")
"""How an AdamW step runs (torch's names): foreach (torch.optim.AdamW's default on CUDA: multi-tensor ops over
all parameters at once, `torch._foreach_sqrt(exp_avg_sqs)` allocating one second-moment-sized temporary),
fused (one kernel per group: torch `fused=True`, apex / Transformer Engine / DeepSpeed FusedAdam) or for-loop
(one parameter at a time); physics/memory.py optimizer_step_bytes."""
GRAD_ACCUM_SYNCS = ("every-micro-batch", "no-sync")
"""How FSDP gradients are reduced under gradient accumulation: every-micro-batch (FSDP's own behaviour: each
backward reduce-scatters its gradients, every rank keeps only its shard) or no-sync (torch FSDP.no_sync /
FSDP2 set_requires_gradient_sync(False) on all but the last micro-batch, as accelerate, transformers'
Trainer and Lightning Fabric do: "FSDP will accumulate the full model gradients (instead of gradient
shards) until the eventual sync", torch/distributed/fsdp/fully_sharded_data_parallel.py no_sync);
physics/fsdp.py."""
FSDP_ADAPTER_WRAPS = ("separate", "with-block")
"""Where FSDP puts a PEFT method's trained weights: separate (their own units: peft's fsdp_auto_wrap_policy,
which transformers' Trainer applies to a peft model, or FSDP2's per-parameter sharding: frozen weights
carry no gradient) or with-block (inside each block's FSDP1 flat parameter beside the frozen weights,
use_orig_params=True: the flat parameter's gradient is allocated whole, "higher than expected gradient
memory usage" in torch FSDP's docstring); physics/fsdp.py."""
FP8_RECIPES = ("te", "torchao", "fp8-params")
"""What an fp8 recipe stores for each linear weight (physics/precision.py fp8_weight_bytes): te (Transformer
Engine: the bf16 weight plus its cached fp8 copy and transpose), torchao (torchao float8: the bf16 weight,
cast on the fly in each GEMM, no copy kept) or fp8-params (Megatron's fp8 primary weights, fp8_param_gather:
the weight itself in fp8 plus its transpose, the fp32 master in the optimizer; under nvfp4 / mxfp4 the same
in fp4, fp4_param_gather)."""
BOOL_FIELDS = ("fused_lora", "fused_elementwise", "distributed_optimizer", "fp32_grads", "sequence_parallel",
               "tp_comm_overlap", "adapter_fp32", "packing")


@dataclass(frozen=True)
class FrameworkSpec:
    name: str
    match: tuple[str, ...]
    attention: str
    cross_entropy: str
    fused_lora: bool
    fused_elementwise: bool
    distributed_optimizer: bool
    fp32_grads: bool
    sequence_parallel: bool
    tp_comm_overlap: bool
    adapter_fp32: bool
    master_weights: str
    packing: bool
    padding: str
    eager_norm_rope: bool = False
    grad_buffers: bool = False
    fused_linears: bool = False
    """Its model code fuses q/k/v into one matrix and gate/up into another (Megatron-Core's linear_qkv and
    linear_fc1), so a LoRA target among them is one adapter on the fused matrix."""
    sources: dict[str, str] = field(default_factory=dict)
    grad_ckpt: bool | None = None
    """Activation checkpointing by default in this framework's recipes (None: the framework does not say)."""
    micro_batch: int | None = None
    """Samples per GPU by default in this framework's recipes (None: the framework does not say)."""
    moe_experts: str = "modules"
    """How its model code holds MoE experts: an nn.Linear per expert (modules) or stacked 3-D tensors
    (stacked: transformers >= 5); physics/moe_lora.py."""
    optimizer_impl: str = "foreach"
    """How its default AdamW step runs (OPTIMIZER_IMPLS; foreach, torch's default, when left out)."""
    grad_accum_sync: str = "every-micro-batch"
    """How its training loop reduces FSDP gradients under accumulation (GRAD_ACCUM_SYNCS; FSDP's own
    every-micro-batch when left out)."""
    fsdp_adapter_wrap: str = "separate"
    """Where its FSDP wrapping puts PEFT adapters (FSDP_ADAPTER_WRAPS; separate when left out)."""
    fp8_recipe: str = "te"
    """What its fp8 training stores per linear weight (FP8_RECIPES; te when left out)."""
    eval_batch: int | None = None
    """Samples per GPU in an evaluation pass by default (None: the framework does not say; the micro-batch)."""
    expandable_segments: bool = False
    """Whether it runs training under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (physics/memory.py)."""
    cp_cross_entropy: str = ""
    """The loss its trainer runs instead under sequence / context parallelism (CROSS_ENTROPY_KINDS; empty:
    `cross_entropy` as without)."""
    aliases: tuple[str, ...] = ()
    """Other names `--framework` and a runs file's `framework` cell accept for it (nemo-toolkit, xtuner...)."""
    version_of: str = ""
    """The package whose version keys the entry's values (transformers for hf-trainer); empty: not versioned."""
    current: str = ""
    """The version of `version_of` the entry's own values describe (the one pip installs today)."""
    version: str = ""
    """The version asked for (`NAME@VERSION`); empty: `current`."""
    changed: tuple[str, ...] = ()
    """The settings a version rule changed from the entry's current values (`versions`)."""

    def job_defaults(self) -> dict:
        """JobSpec fields this framework decides when the job leaves them out (data/frameworks.yaml)."""
        return {k: v for k, v in (("grad_ckpt", self.grad_ckpt), ("micro_batch", self.micro_batch)) if v is not None}

    @property
    def label(self) -> str:
        """The profile's name with the version it stands for (hf-trainer (transformers 5.25))."""
        if not self.version_of:
            return self.name
        v = self.version or self.current
        return f"{self.name} {v}" if self.version_of == self.name else f"{self.name} ({self.version_of} {v})"

    def summary(self) -> str:
        """One line of what the framework runs, for the assumptions."""
        on = [k.replace("_", " ") for k in BOOL_FIELDS if getattr(self, k) and k not in ("packing", "adapter_fp32")]
        ce = CROSS_ENTROPY_WORDS.get(self.cross_entropy, self.cross_entropy)
        if self.cp_cross_entropy:
            ce += f"; {CROSS_ENTROPY_WORDS[self.cp_cross_entropy]} under context parallelism"
        return (f"framework {self.label}: attention {self.attention}, cross-entropy {ce}"
                + (f", {', '.join(on)}" if on else "")
                + (", eager fp32 RMSNorm and RoPE op chains" if self.eager_norm_rope else "")
                + (", persistent gradient buffers" if self.grad_buffers else "")
                + f", adapters {'fp32' if self.adapter_fp32 else 'in the compute dtype'}"
                + f", {'packed' if self.packing else 'padded to the ' + self.padding} samples by default"
                + ("" if self.grad_ckpt is None else
                   f", activation checkpointing {'on' if self.grad_ckpt else 'off'} by default")
                + ("" if self.micro_batch is None else f", micro-batch {self.micro_batch} by default")
                + (", MoE experts as stacked tensors" if self.moe_experts == "stacked" else "")
                + ("" if self.eval_batch is None else f", evaluation batch {self.eval_batch} by default")
                + (", expandable allocator segments" if self.expandable_segments else ""))


CROSS_ENTROPY_WORDS = {"none": "unfused (fp32 copy of the logits)", "chunked": "chunked", "fused": "fused with the output "
                       "projection", "bf16": "unfused over the bf16 logits"}
"""The cross-entropy kinds of data/frameworks.yaml in a sentence."""


CHOICES = {"optimizer_impl": OPTIMIZER_IMPLS, "grad_accum_sync": GRAD_ACCUM_SYNCS, "moe_experts": MOE_EXPERT_LAYOUTS,
           "fsdp_adapter_wrap": FSDP_ADAPTER_WRAPS, "fp8_recipe": FP8_RECIPES,
           "cp_cross_entropy": ("", *CROSS_ENTROPY_KINDS)}
"""An entry's optional settings and their values: the first when left out (torch's own behaviour)."""
OPTIONAL_BOOLS = ("eager_norm_rope", "grad_buffers", "fused_linears")  # Switches an entry may leave out (false).
JOB_DEFAULTS = {"grad_ckpt": bool, "micro_batch": int, "eval_batch": int, "expandable_segments": bool}
"""Defaults of the framework's recipes an entry may state (None when it does not say)."""


def _parse(name: str, d: dict) -> FrameworkSpec:
    """An entry of data/frameworks.yaml, checked: each setting of its kind, each optional one given with
    its source."""
    sources = d.get("sources") or {}

    def fail(key: str, why: str) -> ValueError:
        return ValueError(f"frameworks.yaml: {name}.{key} {why}")

    def need(key: str, allowed: tuple[str, ...]) -> str:
        if key not in d:
            raise ValueError(f"frameworks.yaml: {name} has no '{key}'")
        return choice(key, allowed)

    def choice(key: str, allowed: tuple[str, ...]) -> str:
        v = d.get(key, allowed[0])
        if v not in allowed:
            raise fail(key, f"= {v!r} (allowed: {', '.join(allowed)})")
        return v

    got: dict = {}
    for k in BOOL_FIELDS + OPTIONAL_BOOLS:
        if k not in d and k in BOOL_FIELDS:
            raise ValueError(f"frameworks.yaml: {name} has no '{k}'")
        got[k] = d.get(k, False)
        if not isinstance(got[k], bool):
            raise fail(k, "must be true or false")
    for k, allowed in CHOICES.items():
        got[k] = choice(k, allowed)
    for k, kind in JOB_DEFAULTS.items():
        v = got[k] = d.get(k)
        if v is not None and (not isinstance(v, kind) or (kind is int and (isinstance(v, bool) or v < 1))):
            raise fail(k, f"must be {'true or false' if kind is bool else 'a positive integer'}")
    for k in (*CHOICES, *JOB_DEFAULTS):
        if d.get(k) is not None and not sources.get(k):
            raise fail(k, f"needs its source (sources: {k}: ...)")
    got["expandable_segments"] = bool(got["expandable_segments"])
    return FrameworkSpec(
        name=name, match=tuple(str(m).lower() for m in d.get("match") or ()),
        attention=need("attention", ATTENTION_KERNELS), cross_entropy=need("cross_entropy", CROSS_ENTROPY_KINDS),
        master_weights=need("master_weights", ("auto", "fp32", "none")), padding=need("padding", ("max", "longest")),
        sources={str(k): str(v) for k, v in sources.items()}, aliases=tuple(str(a).lower() for a in d.get("aliases") or ()),
        version_of=str(d.get("version_of") or ""), current=str(d.get("current") or ""), **got)


@lru_cache(maxsize=1)
def _raw_frameworks() -> dict[str, dict]:
    from tuneplan.data import load_yaml

    return load_yaml("frameworks.yaml")["frameworks"]


@lru_cache(maxsize=1)
def load_frameworks() -> dict[str, FrameworkSpec]:
    """The frameworks at their current versions, by name."""
    out = {name: _parse(name, {k: v for k, v in d.items() if k != "versions"}) for name, d in _raw_frameworks().items()}
    seen: dict[str, str] = {}
    for name, spec in out.items():
        for a in (name, *spec.aliases):
            if a in seen and seen[a] != name:
                raise ValueError(f"frameworks.yaml: '{a}' names both {seen[a]} and {name}")
            seen[a] = name
        for rule in _raw_frameworks()[name].get("versions") or ():
            _check_rule(name, spec, rule)
    return out


def framework_names() -> tuple[str, ...]:
    return tuple(load_frameworks())


def framework_aliases() -> dict[str, str]:
    """Every alias of data/frameworks.yaml -> the framework it names."""
    return {a: name for name, spec in load_frameworks().items() for a in spec.aliases}


def _version(text: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def _check_rule(name: str, spec: FrameworkSpec, rule: dict) -> None:
    """A `versions` rule: `before: VERSION` and the settings that differ below it, each with its source."""
    if not spec.version_of or not spec.current:
        raise ValueError(f"frameworks.yaml: {name} has versions but no version_of / current")
    if not isinstance(rule, dict) or _version(str(rule.get("before", ""))) is None:
        raise ValueError(f"frameworks.yaml: {name}.versions: each rule needs 'before: VERSION'")
    keys = [k for k in rule if k not in ("before", "sources")]
    if not keys:
        raise ValueError(f"frameworks.yaml: {name}.versions before {rule['before']} changes nothing")
    for k in keys:
        if not (rule.get("sources") or {}).get(k):
            raise ValueError(f"frameworks.yaml: {name}.versions before {rule['before']}: {k} needs its source")


def framework_version_rules(name: str) -> list[dict]:
    """The `versions` rules of a profile as data/frameworks.yaml gives them (newest bound first)."""
    return [dict(r) for r in _raw_frameworks()[name].get("versions") or ()]


def split_framework(text: str) -> tuple[str, str]:
    """('NAME', 'VERSION') of `NAME[@VERSION]`, the name lower-cased and stripped."""
    name, _, version = str(text or "").strip().partition("@")
    return name.strip().lower(), version.strip()


def resolve_framework(text: str | None) -> str:
    """The canonical `NAME[@VERSION]` of a framework given by name, alias (nemo-toolkit, xtuner, ...) and
    optionally version (`hf-trainer@4.46`); an unknown name or a bad version is an InputError naming the
    allowed values."""
    name, version = split_framework(text or "generic")
    fw = load_frameworks()
    key = name if name in fw else framework_aliases().get(name)
    if key is None:
        raise InputError("framework", f"unknown framework '{name}' (NAME or NAME@VERSION; `tuneplan frameworks` "
                                      "lists the aliases)", list(fw))
    if not version:
        return key
    spec = fw[key]
    if not spec.version_of:
        raise InputError("framework", f"{key} has no versioned defaults: give it without '@{version}'",
                         [n for n, s in fw.items() if s.version_of])
    if _version(version) is None:
        raise InputError("framework", f"'{version}' is not a version number of {spec.version_of} (e.g. {key}@{spec.current})")
    return f"{key}@{version}"


def get_framework(name: str) -> FrameworkSpec:
    """The profile of `NAME[@VERSION]` (aliases resolve): the entry's values, changed by every `versions` rule
    whose `before` is above VERSION."""
    return _framework(resolve_framework(name))


@lru_cache(maxsize=64)
def _framework(key: str) -> FrameworkSpec:
    name, version = split_framework(key)
    spec = load_frameworks()[name]
    if not version:
        return spec
    d = {k: v for k, v in _raw_frameworks()[name].items() if k != "versions"}
    sources = dict(d.get("sources") or {})
    changed: list[str] = []
    v = _version(version)
    for rule in _raw_frameworks()[name].get("versions") or ():
        if v < _version(str(rule["before"])):
            for k, val in rule.items():
                if k not in ("before", "sources"):
                    d[k] = val
                    sources[k] = rule["sources"][k]
                    changed.append(k)
    d["sources"] = sources
    out = _parse(name, d)
    return replace(out, version=version, changed=tuple(dict.fromkeys(changed)))


def framework_for_text(text: str | None) -> str:
    """The framework a runs file's `framework` cell names ('nemo', 'trl-sft (run_sft.py)', ...): the
    entry whose `match` substring occurs earliest in it (the stack named first: 'llama-factory
    (modified, hf-trainer)' is llama-factory), else generic."""
    low = str(text or "").strip().lower()
    if not low:
        return "generic"
    fw = load_frameworks()
    name, version = split_framework(low)
    if name in fw or name in framework_aliases():
        try:
            return resolve_framework(low)
        except InputError:
            return resolve_framework(name)
    best, pos = "generic", len(low) + 1
    for name, spec in fw.items():
        for m in (*spec.match, *spec.aliases):
            i = low.find(m)
            if 0 <= i < pos:
                best, pos = name, i
    return best
