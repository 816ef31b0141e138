"""What a fine-tuning job is: method, precision, parallelism, batch shape and the work to do.

A frozen dataclass whose `__init__` reads each field as its type (text as a config file or a form gives
it: "8", "2.5", "yes") and checks it against its declaration (choices, positive or zero and up, the
bound of specs/limits.py) and the combinations; the first failure is an `InputError` naming the field
and the allowed values (the CLI prints it as one line and exits 2).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, Literal

from tuneplan.errors import InputError
from tuneplan.specs.framework import (  # noqa: F401 - the choice lists of the job options they name
    FSDP_ADAPTER_WRAPS,
    GRAD_ACCUM_SYNCS,
    MOE_EXPERT_LAYOUTS,
    OPTIMIZER_IMPLS,
)
from tuneplan.specs.limits import MAX_GPUS, bound_job_field
from tuneplan.specs.peft import (
    LORA_EQUIVALENT,
    canonical,
    default_peft_version,
    method_options,
    parse_options,
    peft_version_key,
)

Method = Literal["full", "lora", "qlora", "gptq-lora", "alora", "dora", "freeze",  # + specs/peft.py's catalogue
                 "rslora", "pissa", "olora", "eva", "loftq", "lora-fa", "adalora", "ia3", "loha", "lokr", "oft",
                 "boft", "vera", "fourierft", "hra", "bone", "prefix-tuning", "prompt-tuning", "p-tuning",
                 "ln-tuning", "adapter"]
Precision = Literal["bf16", "fp16", "fp32", "fp8", "nvfp4", "mxfp4"]
Optimizer = Literal["adamw", "adamw-8bit", "paged-adamw-8bit", "adamw-4bit", "sgd", "sgd-momentum", "adafactor",
                    "galore-adamw"]
Sharding = Literal["none", "ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-hybrid", "fsdp-grad-op",
                   "zero3-offload", "fsdp-offload"]
Stage = Literal["sft", "dpo", "orpo", "kto", "simpo", "cpo", "rm", "grpo", "ppo", "rloo", "online-dpo", "xpo",
                "nash-md", "gkd"]
"""Training stages: supervised (sft), preference optimisation (dpo, orpo, kto, simpo, cpo), reward-model
training (rm), RL with generated rollouts (grpo, ppo, rloo) and online preference optimisation (online-dpo,
xpo, nash-md: generated and judged pairs), and on-policy distillation from a teacher (gkd). Their physics:
`tuneplan.physics.stages`, docs/stages.md."""
METHODS, PRECISIONS, OPTIMIZERS, SHARDINGS, STAGES = map(typing.get_args, (Method, Precision, Optimizer, Sharding,
                                                                            Stage))
LORA_FAMILY = ("lora", "qlora", "gptq-lora", "alora", "dora")
LOW_PRECISIONS = ("fp8", "nvfp4", "mxfp4")
"""Training precisions whose linear layers run below 16 bits (physics/precision.py: the rest stays bf16)."""
CKPT_MODES = ("none", "selective", "full", "offload")
"""Activation checkpointing: none; selective (Megatron's: recompute attention's core, keep the linears'
inputs); full (keep each checkpointed layer's input, recompute the layer); offload (keep each layer's
input in host memory, recompute the layer)."""
FRAMEWORK_DEFAULT = "generic"
"""The JobSpec's own framework: the physics' neutral stack (what measured rows that name no framework ran)."""
USER_FRAMEWORK_DEFAULT = "hf-trainer"
"""The framework an estimate, plan or curve takes when the user names none (make_job): the HF Trainer's
current defaults (data/frameworks.yaml hf-trainer, at the transformers version pip installs today),
said in the assumptions."""
MASTER_WEIGHTS = ("auto", "fp32", "none")
DEFAULT_MASTER_WEIGHTS = "fp32"
"""A full fine-tuning in 16 bits keeps an fp32 master copy unless told otherwise (--master-weights) or the
framework says (data/frameworks.yaml): mixed precision over fp32 weights (HF Trainer's bf16=True on a
model loaded in fp32, PyTorch AMP, DeepSpeed, Megatron) is what most recipes run; 16 bytes/param with AdamW."""
ZERO_FP32_MASTER = ("deepspeed 0.19.8 runtime/zero/stage_1_and_2.py single_partition_of_fp32_groups ('A partition of the "
                    "fp32 master weights that will be updated by this process') and stage3.py "
                    "fp32_partitioned_groups_flat, in master_weights_and_grads_dtype: float32 unless "
                    "bf16/fp16_master_weights_and_gradients is set")
"""Why DeepSpeed ZeRO keeps fp32 master weights (and so fp32 moments) whichever trainer runs above it."""
QUANTS = ("none", "int8", "nf4", "gptq-int4", "gptq-int8", "awq-int4", "aqlm-2bit", "fp8")
MOE_MODES = ("sparse", "dense")
PADDINGS = ("max", "longest")
ADAPTER_DTYPES = ("fp32", "compute")
PREFERENCE_STAGES = ("dpo", "orpo", "kto", "simpo", "cpo", "rm")
RL_STAGES = ("grpo", "ppo", "rloo", "online-dpo", "xpo", "nash-md")
ROLLOUT_ENGINES = ("hf", "vllm")
STAGE_ALIASES: dict[str, tuple[str, str]] = {
    "dapo": ("grpo", "DAPO is GRPO's computation (a group of sampled completions per prompt, a clipped policy "
                     "gradient on group-relative advantages, no value model) with dynamic sampling: groups whose "
                     "rewards are all equal are dropped and more prompts are generated until the batch is full, "
                     "so generation per step can exceed GRPO's (verl recipe/dapo, the DAPO paper, 2503.14476)"),
    "gspo": ("grpo", "GSPO is GRPO's passes with a sequence-level importance ratio in the clipped loss (2507.18071; "
                     "verl policy_loss.loss_mode gspo)"),
    "dr-grpo": ("grpo", "Dr. GRPO is GRPO without the length and std normalisations of the advantage (2503.20783)"),
    "reinforce++": ("grpo", "REINFORCE++ is PPO's clipped loss with no value model and globally normalised "
                            "advantages: GRPO's passes (OpenRLHF advantage_estimator reinforce, 2501.03262)"),
    "ipo": ("dpo", "IPO is DPO's passes with a squared loss on the log-ratio margin (TRL DPOConfig loss_type ipo)"),
}
"""Stage names of runs files (reference/SCHEMA.md "Stage columns") that are a modelled stage's computation
under another name: the modelled stage and why."""
RL_ONLY = ("group_size", "completion_len", "prompts_per_step", "reward_model", "kl_beta", "rollout_gpus",
           "rollout_engine", "completion_len_max", "rollout_tp", "rollout_sleep", "train_steps_per_rollout",
           "rollout_placement", "rollout_pp", "gpu_memory_utilization", "off_policy_steps", "ref_gpus",
           "old_logprobs", "max_num_seqs", "reward_gpus")
"""Options of the RL stages alone: refused on another stage unless at their default (gkd takes a few)."""
ENGINE_ONLY = ("rollout_tp", "rollout_sleep", "rollout_pp", "rollout_placement", "gpu_memory_utilization",
               "max_num_seqs")
"""Options of a vLLM rollout engine."""
ALL_LINEAR = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2", "shared_gate",
              "shared_up", "shared_down", "in_proj", "x_proj", "out_proj", "q_a", "q_b", "kv_a", "kv_b",
              "dense", "wo", "wi", "wi_0", "wi_1")
DEFAULT_LORA_RANK = 16  # LoRA rank r when not given: a common fine-tuning recipe choice (peft's own default is 8).
DEFAULT_MICRO_BATCH = 4  # Samples per GPU per forward/backward when not given.
DEFAULT_FREEZE_TRAINABLE_LAYERS = 2
"""`freeze` trains the last N blocks; 2 is LLaMA-Factory's freeze_trainable_layers default."""
DEFAULT_GALORE_RANK = 128
"""GaLore's projection rank when not given: transformers' `galore_adamw` default (trainer_optimizer.py
`_get_galore_optimizer`: optim_args rank 128)."""
STAGE_GROUP = "stage (preference and RL fine-tuning)"
VISION_GROUP = "vision-language models"
JOB_GROUPS = ("method", "precision", "batch and sequence", "parallelism", "work and money", STAGE_GROUP, VISION_GROUP)
"""The concerns a job option belongs to (`option`'s `group`): the method and its recipe (adapters,
optimizer, checkpointing, kernels), precision, batch and sequence, parallelism, the work and its money,
the training stage, and the images of vision-language models. Each is a section of `--help` and of the
web API's request model (docs/architecture.md)."""


def read_stage(value: str) -> tuple[str, str]:
    """(modelled stage, note) of a stage name: a modelled stage as it is (note ''), an alias as the
    stage it computes (note: why); InputError naming `stage` for an unknown stage."""
    v = str(value).strip().lower() or "sft"
    if v in STAGES:
        return v, ""
    if v in STAGE_ALIASES:
        stage, why = STAGE_ALIASES[v]
        return stage, f"stage {v} read as {stage}: {why}"
    raise InputError("stage", f"unknown stage '{v}'", STAGES + tuple(STAGE_ALIASES))


def option(default: Any, help: str, group: str, *, flag: str | None = None, number: str = "positive",
           switch_only: bool = False, repeat: bool = False, modes: tuple[str, ...] = (),
           choices: str | None = None, axis: str | None = None, read: Callable[[Any], Any] | None = None,
           check: Callable[[Any], Any] | None = None) -> Any:
    """A JobSpec field that is also an option of `estimate`, `plan`, `curve` and the web API, declared
    once (docs/architecture.md). `help`: its help text everywhere; `group`: its concern (JOB_GROUPS: its
    section of `--help` and of the web request model); `flag`: its name when not `--field-name`; `number`:
    `positive`, or `nonneg` (zero and up); `switch_only`: a bool flag with no --no-...; `repeat`: a flag
    given once per NAME=VALUE pair; `modes`: a bool flag that also takes a mode word (`--grad-ckpt
    selective`); `choices`: a catalog listing a str field's values ("frameworks"), else its Literal type;
    `axis`: the plan axis that searches the field (`methods`, `micro_batches`, `grad_accums`, `shardings`,
    `grad_ckpt`: a value given pins it; `gpu_counts`: the plan chooses; `parallel`, `rollout`: the plan's
    own flags or enumeration); `read`: reads the given value before its type does (aliases, NAME=VALUE
    text); `check`: checks (and may normalise) the typed value beyond type, number and bound. A field
    declared without `option` is no flag."""
    extra = {"group": group, "flag": flag or None, "number": number, "switch_only": switch_only, "repeat": repeat,
             "modes": list(modes) or None, "choices": choices, "axis": axis, "read": read, "check": check}
    return field(default=default, metadata={"help": help, **{k: v for k, v in extra.items() if v}})


def _method_alias(v: Any) -> Any:
    """A method's other names (specs/peft.py: "LoRA", "prefix" ...) read as the catalogue's."""
    return canonical(v) if isinstance(v, str) else v


def _known_framework(v: str) -> str:
    """A framework NAME or NAME@VERSION: an alias (nemo, xtuner...) stored as the profile's name, a version
    kept (hf-trainer@4.46); an unknown one is an InputError naming the field and the allowed names."""
    from tuneplan.specs.framework import resolve_framework

    return resolve_framework(v or FRAMEWORK_DEFAULT)


def _peft_version(v: str | None) -> str | None:
    """A peft release as text (0.22, 0.22.0): checked, kept as given."""
    if v is not None:
        peft_version_key(v)
        return v.strip()
    return v


def _known_quant(v: str) -> str:
    if v not in QUANTS:
        raise InputError("quant", f"unknown quantisation '{v}'", QUANTS)
    return v


@dataclass(frozen=True)
class Option:
    """A JobSpec field as the interfaces see it: its type (resolved), default, help text and the
    keys `option` declares (group, flag, number, ...; empty for a field that is no option)."""

    name: str
    type: Any
    default: Any
    help: str | None
    extra: dict
    kind: Any = None  # the type without `| None`
    nullable: bool = False  # None allowed
    choices: tuple = ()  # a Literal's values


@cache
def job_fields() -> dict[str, Option]:
    """Every JobSpec field by name, in declaration order."""
    hints = typing.get_type_hints(JobSpec)
    out = {}
    for f in fields(JobSpec):
        hint = hints[f.name]
        inner = [t for t in typing.get_args(hint) if t is not type(None)]
        nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and len(inner) == 1
        kind = inner[0] if nullable else hint
        out[f.name] = Option(f.name, hint, f.default, f.metadata.get("help"),
                             {k: v for k, v in f.metadata.items() if k != "help"}, kind, nullable,
                             typing.get_args(kind) if typing.get_origin(kind) is Literal else ())
    return out


def job_options() -> dict[str, Option]:
    """JobSpec's options (the fields declared with `option`) by name, in declaration order: what the
    CLI's job flags and the web API's request fields are generated from."""
    return {n: o for n, o in job_fields().items() if o.extra}


def plan_axes() -> dict[str, str]:
    """The options `tuneplan plan` searches (declared with `axis=`), each with its plan axis: not
    flags or request fields of a plan."""
    return {n: o.extra["axis"] for n, o in job_options().items() if o.extra.get("axis")}


@dataclass(frozen=True, init=False)
class JobSpec:
    """A fine-tuning job. Counts are per run; `micro_batch` is samples per GPU per micro-step.

    `JobSpec(**fields)` reads and checks each given field (the rest take their defaults) and then the
    combinations; `given` is the set of fields given (the physics uses a PEFT method's own defaults
    where the rank or targets are not). Frozen: `updated(...)` makes a changed copy."""

    method: Method = option("lora", "fine-tuning method (default lora)", "method", axis="methods",
                            read=_method_alias)
    lora_rank: int = option(DEFAULT_LORA_RANK, "LoRA rank r (default 16)", "method")
    lora_targets: tuple[str, ...] = option(
        ("all-linear",), "comma-separated modules (q,k,v,o,gate,up,down) or all-linear (default)", "method")
    trainable_layers: int = option(DEFAULT_FREEZE_TRAINABLE_LAYERS, "freeze: last N blocks trained (default 2)",
                                   "method")
    precision: Precision = option("bf16", "compute precision (default bf16); fp8, nvfp4, mxfp4: the linear layers at low "
                                                    "precision", "precision")
    quant: str | None = option(None, "base weight storage: none, int8, nf4, gptq-int4, gptq-int8, awq-int4, aqlm-2bit, fp8 (default: as the "
                                     "method and checkpoint imply: qlora nf4, gptq-lora gptq-int4)", "precision", check=_known_quant)
    optimizer: Optimizer = option("adamw", "optimizer (default adamw; galore-adamw: full fine-tuning with GaLore's "
                                           "low-rank moments of the block linears)", "method")
    galore_rank: int = option(DEFAULT_GALORE_RANK, "GaLore: projection rank r of the block linears' moments "
                                                   f"(default {DEFAULT_GALORE_RANK}, transformers' default)", "method")
    optimizer_impl: Literal["foreach", "fused", "for-loop"] = option(
        "foreach", "how the AdamW step runs: foreach (torch's default: one second-moment-sized temporary for all "
                   "trained weights at the step), fused (torch fused=True, apex / DeepSpeed FusedAdam) or for-loop "
                   "(default: the framework's)", "method")
    master_weights: Literal["auto", "fp32", "none"] | None = option(
        None, "full fine-tuning in 16 bits: fp32 = mixed precision over an fp32 master copy (16 bytes/param "
              "with AdamW), none = 16-bit weights trained in place (8), auto = fp32 under DeepSpeed ZeRO, tensor "
              "parallelism or fp8, else none; default: the framework's (data/frameworks.yaml), else fp32", "precision")
    grad_ckpt: bool = option(False, "activation checkpointing: none, selective (Megatron: recompute attention's "
                                    "core), full (default when given without a mode), offload (checkpoints in "
                                    "host memory)", "method", modes=CKPT_MODES, axis="grad_ckpt")
    # --grad-ckpt none|selective|full|offload (a bool still works: true = full, false = none); "auto" = by grad_ckpt
    ckpt_mode: Literal["auto", "none", "selective", "full", "offload"] = "auto"
    ckpt_every: int = option(1, "checkpoint one layer in every N (default 1: all)", "method")
    act_offload: bool = option(False, "offload saved activations to host memory (default off)", "method")
    act_offload_layers: int = option(0, "offload the saved activations of this many layers to host memory, the "
                                        "rest stay (Megatron-Core cpu_offloading_num_layers: below the layer "
                                        "count, no --pp, no --grad-ckpt; default 0)", "method", number="nonneg")
    optimizer_in_bwd: bool = option(False, "optimizer step inside the backward, each parameter's as soon as its "
                                           "gradient is ready (torchtune optimizer_in_bwd): one gradient alive at a "
                                           "time; needs --grad-accum 1 (default off)", "method")
    fp32_grads: bool | None = option(None, "full fine-tuning: gradients accumulated and reduced in an fp32 buffer "
                                           "(Megatron's main_grad with --accumulate-allreduce-grads-in-fp32, FSDP2 "
                                           "reduce_dtype fp32 over fp32 weights; default: the framework's)", "precision")
    expandable_segments: bool | None = option(None, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching "
                                                    "allocator grows one segment, so batches of other lengths keep no "
                                                    "blocks of their own (default: the framework's)", "method")
    framework: str = option(FRAMEWORK_DEFAULT, "the training stack, NAME or NAME@VERSION (hf-trainer@4.46): its "
                                               "kernels and defaults (data/frameworks.yaml, `tuneplan frameworks`; "
                                               "default hf-trainer, the HF Trainer's current defaults)", "method",
                            choices="frameworks", check=_known_framework)
    fused_ce: bool | None = option(None, "fused linear + cross-entropy (Liger, Cut Cross-Entropy): no full logits "
                                         "(default: by framework)", "method")
    sequence_parallel: bool | None = option(None, "Megatron sequence parallel with --tp (default: by framework)",
                                            "parallelism")
    cp_mode: Literal["ring", "ulysses"] = option("ring", "context parallel: ring attention (default) or Ulysses",
                                                 "parallelism")
    vpp: int = option(1, "interleaved pipeline: virtual stages per rank (default 1)", "parallelism")
    offload: Literal["none", "optimizer", "all"] = option(
        "none", "optimizer states (and master weights) on the host; all: parameters too (default none)", "method")
    flash_attn: bool = option(True, "FlashAttention / SDPA memory-efficient attention (default on)", "method")
    gpus: int = option(1, "total GPUs (default 1)", "parallelism", axis="gpu_counts")
    nodes: int = option(1, "nodes (default 1; above 8 GPUs, nodes of 8: the HGX / DGX server)", "parallelism",
                        axis="gpu_counts")
    sharding: Sharding = option("ddp", "data-parallel sharding (default ddp)", "parallelism", axis="shardings")
    tp: int = option(1, "TP degree (default 1)", "parallelism", axis="parallel")
    pp: int = option(1, "PP degree (default 1)", "parallelism", axis="parallel")
    cp: int = option(1, "CP degree (default 1)", "parallelism", axis="parallel")
    ep: int = option(1, "EP degree (default 1)", "parallelism", axis="parallel")
    etp: int | None = option(None, "expert tensor parallel degree: each expert's weights split over etp GPUs (default: "
                                   "--tp, as Megatron-Core's expert_tensor_parallel_size)", "parallelism", axis="parallel")
    micro_batch: int = option(DEFAULT_MICRO_BATCH, "samples per GPU per micro-step (default 4)", "batch and sequence", axis="micro_batches")
    grad_accum: int = option(1, "gradient-accumulation steps (default 1)", "batch and sequence", axis="grad_accums")
    grad_accum_sync: Literal["every-micro-batch", "no-sync"] = option(
        "every-micro-batch", "FSDP under gradient accumulation: every-micro-batch (each backward reduce-scatters, a GPU "
                             "keeps its gradient shard) or no-sync (FSDP no_sync until the last micro-batch, as HF "
                             "Trainer / accelerate and Lightning Fabric run it: every GPU holds the unsharded gradients; "
                             "default: the framework's)", "parallelism")
    fsdp_adapter_wrap: Literal["separate", "with-block"] = option(
        "separate", "FSDP and a PEFT method: separate (adapters in their own units: peft's fsdp_auto_wrap_policy, "
                    "HF Trainer; FSDP2) or with-block (inside each block's FSDP1 flat parameter, as litgpt's "
                    "FSDPStrategy before 0.5.11: the gradient of the frozen weights is allocated too; default: "
                    "the framework's)", "parallelism")
    seq_len: int | None = option(None, "padded/packed length (default: the mean tokens per example)", "batch and sequence")
    examples: float | None = option(None, "training examples", "work and money")
    tokens_per_example: float | None = option(None, "mean tokens per example, after templating", "work and money")
    tokens: float | None = option(None, "total tokens per epoch (instead of examples)", "work and money")
    epochs: float = option(1.0, "epochs (default 1)", "work and money")
    packing: bool = option(False, "pack examples into seq-len samples", "batch and sequence", switch_only=True)
    padding: Literal["max", "longest"] = option(
        "max", "unpacked examples: padded to --seq-len (max, default) or each batch to its longest example "
               "(longest: HF's collator; batch shapes vary, so torch reserves more memory)", "batch and sequence")
    # LoRA-family adapters: fp32 (peft >= 0.12's autocast_adapter_dtype: each adapted module's 16-bit input
    # is cast to fp32 and kept for backward) or the compute dtype (older peft, litgpt, Megatron)
    adapter_dtype: Literal["fp32", "compute"] = option(
        "fp32", "LoRA-family adapters in fp32 (peft >= 0.12, default: each adapted module keeps an fp32 copy of "
                "its input) or in the compute dtype (older peft, litgpt, Megatron)", "precision")
    # PEFT methods of specs/peft.py: their options (peft config field names and values, e.g. ("r", "256"),
    # ("num_virtual_tokens", "20")); the generic `adapter`'s trainable parameter count
    peft_options: tuple[tuple[str, str], ...] = option(
        (), "an option of the PEFT method in peft's own config names, e.g. num_virtual_tokens=30, oft_block_size=64, "
            "n_frequency=2000 (repeatable; the rest take peft's defaults; --lora-rank and --lora-targets set r and "
            "target_modules)", "method", flag="peft-option", repeat=True, read=parse_options)
    trainable_params: float | None = option(
        None, "--method adapter: the adapter's trainable parameter count (any method tuneplan does not name)", "method")
    moe_mode: Literal["sparse", "dense"] = option("sparse", "MoE: top-k experts (sparse, default) or all", "method")
    fp8_recipe: Literal["te", "torchao", "fp8-params"] | None = option(
        None, "what --precision fp8 stores per linear weight: te (bf16 weight + cached fp8 copy and transpose), "
              "torchao (bf16 weight, cast on the fly) or fp8-params (Megatron's fp8 primary weights); default: the "
              "framework's", "method")
    moe_experts: Literal["modules", "stacked"] = option(
        "modules", "MoE experts as one module per expert (modules: transformers 4, default) or stacked tensors (stacked: transformers >= 5, --framework hf-trainer's default; LoRA re-materialises each stack as W + BA and holds it for the backward)", "method")
    # which MoE types' stacked experts peft's LoRA reaches depends on its release (physics/moe_lora.py)
    peft_version: str | None = option(
        None, "--moe-experts stacked: the peft release (e.g. 0.22) whose LoRA reach over the stacked experts the "
              "estimate follows (default: the installed peft, else 0.22, the newest tested)", "method",
        check=_peft_version)
    # vision-language models: images per training example (their tokens join each sample's sequence),
    # the assumed image side in px for dynamic-resolution towers (0: the tower's own / the default),
    # and whether the vision tower is trained (default: frozen, as LLaMA-Factory / TRL VLM recipes do)
    images_per_example: int = option(0, "images per training example; their tokens join each sample's sequence "
                                        "(default 0)", VISION_GROUP, number="nonneg")
    image_size: int = option(0, "image side in px for dynamic-resolution towers (Qwen2-VL/2.5-VL; default 448)",
                             VISION_GROUP, number="nonneg")
    train_vision_tower: bool = option(False, "train the vision tower too (default: frozen)", VISION_GROUP,
                                      switch_only=True)
    load_time_s: float | None = option(None, "model load time, s (default weights / disk)", "work and money",
                                       number="nonneg")
    eval_every: int = option(0, "optimizer steps between evaluations (default 0: none)", "work and money", number="nonneg")
    eval_examples: int = option(0, "examples per evaluation", "work and money", number="nonneg")
    eval_batch_size: int | None = option(None, "samples per GPU in an evaluation pass (default: the framework's, "
                                               "HF Trainer per_device_eval_batch_size 8; else the micro-batch)",
                                         "work and money")
    save_every: int = option(0, "optimizer steps between checkpoint saves (default 0: only at the end)", "work and money",
                             number="nonneg")
    save_final: bool = True
    disk_gbs: float = option(2.0, "disk bandwidth for load and saves, GB/s (default 2)", "work and money")
    rate_usd_per_gpu_hour: float | None = option(
        None, "$ per GPU-hour (default: the cheapest on-demand price)", "work and money", flag="rate",
        number="nonneg")
    grid_gco2_kwh: float | None = option(None, "grid carbon intensity, g/kWh (default 480, world average)",
                                         "work and money", number="nonneg")
    # ---- training stage (physics/stages.py; None = the stage's TRL default, said in the assumptions) ----
    stage: Stage = option("sft", "sft (default), preference dpo/orpo/kto/simpo/cpo/rm, RL grpo/ppo/rloo, or online "
                          "preference online-dpo/xpo/nash-md, or distillation gkd", STAGE_GROUP)
    precompute_ref: bool = option(False, "dpo/kto: reference log-probs computed once before training (no reference "
                                         "model)", STAGE_GROUP, switch_only=True)
    group_size: int | None = option(None, "RL: completions per prompt (TRL: grpo 8, rloo 2)", STAGE_GROUP)
    completion_len: int | None = option(None, "RL: new tokens per completion (TRL: 512); the prompt length is "
                                              "--seq-len", STAGE_GROUP)
    prompts_per_step: int | None = option(None, "RL: prompts per optimizer step (default: micro-batch x grad-accum "
                                                "x GPUs / group size)", STAGE_GROUP)
    rollout_engine: Literal["hf", "vllm"] = option("hf", "RL: HF generate in the training process (default) or "
                                                         "vLLM", STAGE_GROUP, axis="rollout")
    rollout_gpus: int = option(0, "RL with vllm: GPUs of --gpus serving vLLM (default 0: colocated in the training "
                                  "process)", STAGE_GROUP, number="nonneg", axis="rollout")
    reward_model: str | None = option(None, "RL: reward model (catalog name / HF id; default: a rule-based reward)",
                                      STAGE_GROUP)
    teacher_model: str | None = option(None, "GKD: the teacher (catalog name / HF id; default: the student's "
                                             "architecture)", STAGE_GROUP)
    kl_beta: float | None = option(None, "RL: KL coefficient (TRL: grpo 0 = no reference model, rloo/ppo 0.05)",
                                   STAGE_GROUP, number="nonneg")
    ppo_epochs: int | None = option(None, "PPO: update epochs per batch of rollouts (4)", STAGE_GROUP)
    completion_len_max: int | None = option(None, "RL: the longest completion (the generation cap); a synchronous "
                                                  "step waits for it (default: --completion-len, all the same "
                                                  "length)", STAGE_GROUP)
    rollout_tp: int | None = option(None, "RL with vllm: tensor parallel size of one engine (default: the training "
                                          "tp x pp when colocated, 1 on --rollout-gpus)", STAGE_GROUP, axis="rollout")
    rollout_sleep: bool = option(False, "RL with vllm colocated: the engine sleeps while training (verl, NeMo RL; "
                                        "TRL vllm_enable_sleep_mode): the peak is the larger phase, not their sum",
                                 STAGE_GROUP, switch_only=True, axis="rollout")
    train_steps_per_rollout: int | None = option(None, "RL: optimizer steps per batch of rollouts (mini-batches; "
                                                       "default 1)", STAGE_GROUP)
    old_logprobs: bool = option(False, "RL: an old-policy log-prob forward over all completions every step (verl, "
                                       "NeMo RL, OpenRLHF; default TRL's rule: only with several optimizer steps "
                                       "per rollout batch, or PPO)", STAGE_GROUP, switch_only=True)
    rollout_placement: Literal["colocated", "separate"] | None = option(
        None, "RL with vllm: the engine on the training GPUs (colocated) or on --rollout-gpus of its own (separate; "
              "default: separate when --rollout-gpus is given)", STAGE_GROUP, axis="rollout")
    rollout_pp: int | None = option(None, "RL with vllm: pipeline parallel size of one engine (default 1)",
                                    STAGE_GROUP, axis="rollout")
    gpu_memory_utilization: float | None = option(
        None, "RL with vllm: share of a GPU's memory the engine reserves (default: 0.9 separate, vLLM; colocated "
              "0.5 sleeping, verl, 0.3 awake, TRL)", STAGE_GROUP, axis="rollout")
    max_num_seqs: int | None = option(None, "RL with vllm: sequences one engine decodes at once (default 256, verl's "
                                            "max_num_seqs); more per engine decode in waves", STAGE_GROUP,
                                      axis="rollout")
    off_policy_steps: int = option(0, "RL: steps generation runs ahead of training (0 synchronous, default; 1 "
                                      "verl one-step-off; k fully async): generation overlaps the update",
                                   STAGE_GROUP, number="nonneg", axis="rollout")
    value_model: Literal["model", "head"] | None = option(
        None, "PPO: the value estimate from a separate critic model (default) or a head on the policy", STAGE_GROUP)
    critic_gpus: int = option(0, "PPO: GPUs of --gpus holding the critic (value model; default 0: on the "
                                 "training GPUs)", STAGE_GROUP, number="nonneg")
    ref_gpus: int = option(0, "RL: GPUs of --gpus holding the reference model (default 0: on the training GPUs)",
                           STAGE_GROUP, number="nonneg")
    reward_gpus: int = option(0, "RL: GPUs of --gpus holding the reward model (default 0: on the training GPUs)",
                              STAGE_GROUP, number="nonneg")

    def __init__(self, **given: Any) -> None:
        self.__dict__.update(_read_fields(given))  # frozen: set here only
        self.__dict__["given"] = frozenset(given)
        try:
            self._combos()
        except InputError:
            raise
        except ValueError as exc:
            raise InputError("job", str(exc)) from None

    def updated(self, **changes: Any) -> JobSpec:
        """A copy with these fields changed, not checked again (a job derived from a checked one: the
        RL trainer's share of the GPUs, a reward model's pass); the changed fields count as given."""
        unknown = set(changes) - set(job_fields())
        if unknown:
            raise TypeError(f"JobSpec has no field {sorted(unknown)[0]!r}")
        new = object.__new__(JobSpec)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        new.__dict__["given"] = self.given | frozenset(changes)
        return new

    def _combos(self) -> None:
        if self.gpus % self.nodes:
            raise ValueError(f"gpus ({self.gpus}) must be divisible by nodes ({self.nodes})")
        model_par = self.tp * self.pp * self.cp
        if self.gpus % model_par:
            raise ValueError(f"gpus ({self.gpus}) must be divisible by tp x pp x cp ({model_par})")
        # Megatron-Core lays the experts over tp x cp x dp ranks of each pipeline stage: ep x etp of them
        # hold one copy of the experts, the rest are the experts' data-parallel replicas (RL: of the
        # training GPUs, not the engines' or the other models')
        expert_par, ranks = self.ep * self.expert_tp, self.training_gpus // self.pp
        if expert_par > 1 and ranks > 0 and ranks % expert_par:
            raise ValueError(f"tp x cp x data-parallel ({ranks}) must be divisible by ep x etp "
                             f"({self.ep} x {self.expert_tp})")
        if self.method in ("qlora", "gptq-lora", "loftq") and self.precision == "fp32":
            raise ValueError(f"{self.method} needs a 16-bit compute precision (bf16 or fp16), not fp32")
        if self.optimizer_in_bwd and self.grad_accum > 1:  # torchtune's recipes refuse it too
            raise ValueError(f"optimizer-in-bwd steps each parameter during the backward: it needs grad-accum 1, "
                             f"not {self.grad_accum}")
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp ({self.vpp}) needs pipeline parallelism (pp > 1)")
        if self.optimizer == "galore-adamw" and self.method != "full":
            raise ValueError(f"optimizer galore-adamw is full fine-tuning (GaLore projects the full weights' "
                             f"gradients), not {self.method}")
        if self.method == "full" and self.quant not in (None, "none"):
            raise ValueError(f"full fine-tuning cannot train quantised ({self.quant}) weights")
        method_options(self.method, self.peft_options)  # unknown options: InputError naming the allowed ones
        self._stage_combos()

    def _stage_combos(self) -> None:
        """Stage options that do not apply to the stage, or a rollout split that leaves no trainer."""
        gkd = ("completion_len", "rollout_engine", "gpu_memory_utilization", "rollout_sleep") * (self.stage == "gkd")
        if self.teacher_model and self.stage != "gkd":
            raise ValueError(f"teacher-model applies to --stage gkd, not --stage {self.stage}")
        if self.stage not in RL_STAGES:
            given = [k for k in RL_ONLY if getattr(self, k) != job_fields()[k].default and k not in gkd]
            if given:
                raise ValueError(f"{given[0].replace('_', '-')} applies to the RL stages "
                                 f"({', '.join(RL_STAGES)}), not --stage {self.stage}")
        for k in ("ppo_epochs", "value_model", "critic_gpus"):
            if getattr(self, k) and self.stage != "ppo":
                raise ValueError(f"{k.replace('_', '-')} applies to --stage ppo, not --stage {self.stage}")
        if self.precompute_ref and self.stage not in ("dpo", "kto"):
            raise ValueError(f"precompute-ref applies to the stages with a reference model (dpo, kto), "
                             f"not --stage {self.stage}")
        if None not in (self.completion_len_max, self.completion_len) and self.completion_len_max < self.completion_len:
            raise ValueError(f"completion-len-max ({self.completion_len_max}) must be at least --completion-len "
                             f"({self.completion_len}, the mean)")
        engine = [k for k in ENGINE_ONLY if getattr(self, k) not in (None, False)]
        if engine and self.rollout_engine != "vllm":
            raise ValueError(f"{engine[0].replace('_', '-')} needs --rollout-engine vllm (HF generate runs in the "
                             "training model's own layout)")
        if (self.rollout_placement == "separate") != bool(self.rollout_gpus) and self.rollout_placement:
            raise ValueError(f"rollout-placement {self.rollout_placement} "
                             + ("needs --rollout-gpus N (the engine's own GPUs)" if self.rollout_gpus == 0 else
                                "takes no --rollout-gpus (the engine shares the training GPUs)"))
        if self.critic_gpus and self.value_model == "head":
            raise ValueError("critic-gpus: a value head has no critic model to place (--value-model head)")
        if self.off_policy_steps and not self.rollout_gpus:
            raise ValueError("off-policy-steps needs the engine on GPUs of its own (--rollout-gpus N): colocated, "
                             "generation and training take turns on the same GPUs")
        if self.rollout_sleep and self.rollout_gpus:
            raise ValueError("rollout-sleep applies to an engine colocated with training (--rollout-gpus 0)")
        pool = self.rollout_gpus or self.training_gpus
        if self.rollout_tp is not None and pool % self.rollout_tp:
            raise ValueError(f"rollout-tp ({self.rollout_tp}) must divide the generation GPUs ({pool}: "
                             f"{'--rollout-gpus' if self.rollout_gpus else 'the training GPUs, colocated'})")
        if self.rollout_pp is not None and pool % (self.rollout_pp * (self.rollout_tp or 1)):
            raise ValueError(f"rollout-tp x rollout-pp must divide the generation GPUs ({pool})")
        if self.rollout_gpus and self.rollout_engine != "vllm":
            raise ValueError("rollout-gpus needs --rollout-engine vllm (HF generate runs in the training process)")
        train = self.training_gpus
        if train < 1:
            raise ValueError(f"rollout-gpus, critic-gpus, ref-gpus and reward-gpus ({self.gpus - train}) must leave "
                             f"training GPUs of the {self.gpus} (--gpus counts them all)")
        if train != self.gpus:
            model_par = self.tp * self.pp * self.cp
            if train % model_par:
                raise ValueError(f"training GPUs (--gpus less the rollout, critic, reference and reward GPUs = "
                                 f"{train}) must be divisible by tp x pp x cp ({model_par})")

    @property
    def training_gpus(self) -> int:
        """The GPUs that train the policy: --gpus less the engine's, the critic's, the reference's and the
        reward model's own GPUs."""
        return self.gpus - self.rollout_gpus - self.critic_gpus - self.ref_gpus - self.reward_gpus

    def training_job(self, gpus: int, **changes: Any) -> JobSpec:
        """This job on `gpus` of its GPUs (a trainer's or a model's own pool): nodes of the same size
        (the last one partly used), no other pools."""
        per_node = self.gpus // self.nodes
        return self.updated(gpus=gpus, nodes=-(-gpus // per_node), rollout_gpus=0, critic_gpus=0, ref_gpus=0,
                            reward_gpus=0, **changes)

    # ---- derived -------------------------------------------------------------------------------
    @property
    def checkpointing(self) -> str:
        """The activation-checkpointing mode in effect: none, selective, full or offload."""
        if not self.grad_ckpt:
            return "none"
        return self.ckpt_mode if self.ckpt_mode not in ("auto", "none") else "full"

    @property
    def dp(self) -> int:
        """Data-parallel degree: what remains of the GPUs after tensor, pipeline and context parallel."""
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel degree: `etp`, else `tp` (megatron-core ModelParallelConfig's
        expert_tensor_parallel_size=None means tensor_model_parallel_size)."""
        return self.etp or self.tp

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def is_lora_family(self) -> bool:
        return self.method in LORA_FAMILY or self.method in LORA_EQUIVALENT or self.method in ("adalora", "lora-fa")

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step, all GPUs."""
        return self.micro_batch * self.grad_accum * self.dp

    def base_quant(self, checkpoint_quant: str = "none") -> str:
        """Storage of the frozen base weights."""
        if self.quant not in (None, "none"):
            return self.quant
        if self.method in ("qlora", "loftq"):
            return "nf4"
        if self.method == "gptq-lora":
            return checkpoint_quant if checkpoint_quant in ("gptq-int4", "gptq-int8", "awq-int4") else "gptq-int4"
        if self.method == "full":
            return "none"
        return checkpoint_quant if self.quant is None else "none"

    def fp32_master(self) -> bool:
        """Whether a 16-bit full (or freeze) fine-tuning keeps an fp32 master copy of the trained weights,
        with fp32 optimizer moments. `fp32`: mixed precision over fp32 weights (16 bytes per parameter with
        AdamW). `none`: the 16-bit weights trained in place (HF Trainer or TRL on a bf16-loaded model,
        ms-swift, litgpt bf16-true, torchtune; torch's AdamW then keeps bf16 moments: 8 bytes per parameter).
        `auto`: fp32 under DeepSpeed ZeRO, Megatron (tensor parallel) and fp8, else in place, unless the
        framework's `master_weights` (data/frameworks.yaml) says. ZeRO's engine keeps them whichever trainer
        runs above it (`ZERO_FP32_MASTER`). Not given: the framework's choice, else fp32
        (`DEFAULT_MASTER_WEIGHTS`); measured runs that do not say are read with `auto` (learn/dataset.py)."""
        if self.master_weights in ("fp32", "none"):
            return self.master_weights == "fp32"
        if self.sharding.startswith("zero"):
            return True  # ZERO_FP32_MASTER
        from tuneplan.specs.framework import get_framework

        fw_master = get_framework(self.framework).master_weights
        if fw_master != "auto":
            return fw_master == "fp32"
        if self.master_weights is None:
            return DEFAULT_MASTER_WEIGHTS == "fp32"  # not given: mixed precision over fp32 weights
        return self.sharding.startswith("zero") or self.tp > 1 or self.precision in LOW_PRECISIONS

    def eval_batch(self) -> int:
        """Samples per GPU in an evaluation pass: as given, else the framework's default
        (data/frameworks.yaml `eval_batch`), else the training micro-batch."""
        from tuneplan.specs.framework import get_framework

        return self.eval_batch_size or get_framework(self.framework).eval_batch or self.micro_batch

    def variable_shapes(self) -> bool:
        """Whether batches vary in length from step to step: unpacked samples padded only to the
        longest in their batch (HF's DataCollatorWithPadding, TRL and most SFT scripts without packing)."""
        return self.padding == "longest" and not self.packing

    def length_gap(self) -> float:
        """Tokens a lone example falls short of the sequence cap on average (seq_len - tokens_per_example
        when batches are padded only to their longest, else 0): a micro-batch runs at its longest
        example's length (physics/run.batch_lengths)."""
        if not (self.variable_shapes() and self.seq_len and self.tokens_per_example):
            return 0.0
        return max(float(self.seq_len) - float(self.tokens_per_example), 0.0)

    def sharding_kind(self) -> str:
        """Normalised sharding: none, ddp, zero1, zero2, zero3 (fsdp full), hybrid, offload."""
        s = self.sharding
        if self.dp * self.cp == 1:  # shards span data x context parallel ranks
            return "none" if s in ("ddp", "none") else s if "offload" in s else "none"
        return {"fsdp": "zero3", "fsdp-grad-op": "zero2", "fsdp-hybrid": "hybrid",
                "fsdp-offload": "zero3-offload"}.get(s, s)


def _framework_defaults(clean: dict) -> dict:
    """Settings a named framework decides when the job leaves them out: the adapters' dtype, how
    unpacked samples are padded, and, where the entry says, activation checkpointing and the
    micro-batch of its recipes (data/frameworks.yaml); the estimate's assumptions say them."""
    if clean.get("framework") is None:
        clean = {**clean, "framework": USER_FRAMEWORK_DEFAULT}  # the HF Trainer's current defaults, said
    name = clean.get("framework")
    if not isinstance(name, str) or name.strip().lower() == FRAMEWORK_DEFAULT:
        return clean
    from tuneplan.specs.framework import get_framework

    try:
        fw = get_framework(name)
    except InputError:
        return clean  # the field validator names the allowed values
    out = dict(clean)
    for k, v in fw.job_defaults().items():  # checkpointing / micro-batch of the framework's recipes
        if k != "grad_ckpt" or out.get("ckpt_mode") in (None, "auto"):
            out.setdefault(k, v)
    out.setdefault("adapter_dtype", "fp32" if fw.adapter_fp32 else "compute")
    for k in ("moe_experts", "optimizer_impl", "grad_accum_sync", "fsdp_adapter_wrap", "fp8_recipe"):
        out.setdefault(k, getattr(fw, k))
    if not out.get("packing"):
        out.setdefault("padding", fw.padding)
    return out


GPUS_PER_SERVER = 8
"""GPUs per node of a job or row that states more GPUs than that and no node count: NVIDIA HGX / DGX
baseboards hold 8 (nvidia.com/en-us/data-center/hgx/), as do the clouds' GPU instances (AWS p4d/p5,
GCP a3, Azure ND v5); an NVL72 part's NVLink domain spans such nodes (physics.stack)."""


def servers(gpus: int) -> int:
    """Nodes of at most GPUS_PER_SERVER GPUs holding `gpus`, the same number on each."""
    nodes = -(-gpus // GPUS_PER_SERVER)
    while gpus % nodes:
        nodes += 1
    return nodes


def make_job(**kwargs) -> JobSpec:
    """Build a JobSpec from keyword arguments (None: not given), with the framework's defaults for
    what is not given and `lora_targets` as comma-separated text; errors: one-line InputErrors."""
    clean = _framework_defaults({k: v for k, v in kwargs.items() if v is not None})
    gpus = clean.get("gpus")
    if "nodes" not in clean and type(gpus) in (int, str) and str(gpus).isdigit() and \
            GPUS_PER_SERVER < int(gpus) <= MAX_GPUS:
        clean["nodes"] = servers(int(gpus))  # more GPUs than one server holds: said in the assumptions
    if clean.get("moe_experts") == "stacked" and "peft_version" not in clean:
        clean["peft_version"] = default_peft_version()  # the installed peft, read when the job is made
    if "lora_targets" in clean and isinstance(clean["lora_targets"], str):
        clean["lora_targets"] = tuple(t.strip() for t in clean["lora_targets"].split(",") if t.strip())
    job = JobSpec(**clean)
    # the fields the caller said (`given` adds the framework's defaults): what an interval's width reads
    job.__dict__["stated"] = frozenset(k for k, v in kwargs.items() if v is not None)
    return job


# ---- reading and checking the fields ------------------------------------------------------------

CKPT_WORDS = {"true": "full", "1": "full", "yes": "full", "on": "full", "false": "none", "0": "none", "no": "none",
              "off": "none"}
"""`grad_ckpt` as text: a mode word, or a switch word (true = full, false = none)."""
# the words a switch reads as text (case-insensitive)
TRUE_WORDS = frozenset(("1", "on", "t", "true", "y", "yes"))
FALSE_WORDS = frozenset(("0", "off", "f", "false", "n", "no"))


class _Bad(ValueError):
    """A value that is not of its field's type (the message; the field is added by `_read_fields`)."""


def _read_fields(given: dict) -> dict:
    """Every field's value: the given ones read as their type and checked, the rest their defaults."""
    data = _ckpt_words(dict(given))
    opts = job_fields()
    out = {name: opt.default for name, opt in opts.items()}
    for name in sorted((k for k in data if k in opts), key=_position().__getitem__):  # errors in field order
        try:
            out[name] = _checked(name, opts[name], data[name])
        except InputError:
            raise
        except ValueError as exc:  # _Bad too
            raise InputError(name.replace("_", "-"), str(exc)) from None
    unknown = [k for k in given if k not in opts]
    if unknown:  # a misspelt keyword of the Python API (micro_bach=): named as given, with the closest
        from tuneplan.errors import UnknownNameError

        raise UnknownNameError(unknown[0], unknown[0], list(out), what="job option")
    return out


@cache
def _position() -> dict[str, int]:
    return {name: i for i, name in enumerate(job_fields())}


def _ckpt_words(data: dict) -> dict:
    """`grad_ckpt` takes a mode word too (none, selective, full, offload, or true/false as text); a
    `ckpt_mode` other than auto switches checkpointing on or off."""
    if isinstance(data.get("grad_ckpt"), str):
        word = data["grad_ckpt"].strip().lower()
        word = CKPT_WORDS.get(word, word)
        if word not in CKPT_MODES:
            raise InputError("grad-ckpt", f"unknown mode '{data['grad_ckpt']}'", CKPT_MODES)
        data["ckpt_mode"] = word
        data["grad_ckpt"] = word != "none"
    elif data.get("ckpt_mode") not in (None, "auto"):
        data["grad_ckpt"] = data["ckpt_mode"] != "none"
    return data


def _checked(name: str, opt: Option, v: Any) -> Any:
    """One field's value read as its type and checked against its declaration."""
    if "read" in opt.extra:
        v = opt.extra["read"](v)
    if v is None and opt.nullable:
        return None
    if opt.choices:
        if isinstance(v, str) and v in opt.choices:
            return str(v)
        raise InputError(name.replace("_", "-"), f"unknown value '{v}'", opt.choices)
    if type(v) is not opt.kind:  # already of its type: nothing to read
        v = _as_type(opt.kind, v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        _in_range(name, opt, v)
    if "check" in opt.extra:
        v = opt.extra["check"](v)
    return v


def _in_range(name: str, opt: Option, v: float) -> None:
    """Positive (or zero and up, `number="nonneg"`), finite, and within JOB_BOUNDS."""
    nonneg = opt.extra.get("number") == "nonneg"
    if isinstance(v, int):
        if v < 0 or (v == 0 and not nonneg):
            raise ValueError("must be an integer >= 0" if nonneg else "must be a positive integer")
    elif not math.isfinite(v) or v < 0 or (v == 0 and not nonneg):
        raise ValueError("must be a number >= 0" if nonneg else "must be a positive number")
    bound_job_field(name, v)


def _as_type(kind: Any, v: Any) -> Any:
    """`v` read as `kind` (int, float, bool, str, a tuple of them), text included (Literals: `_checked`)."""
    if kind is bool:
        if isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", "") == "b":  # numpy's bool too
            return bool(v)
        if isinstance(v, numbers.Real) and v in (0, 1):
            return bool(v)
        if isinstance(v, str) and v.strip().lower() in TRUE_WORDS | FALSE_WORDS:
            return v.strip().lower() in TRUE_WORDS
        raise _Bad(f"'{v}' is not a valid switch (allowed: true, false)")
    if kind is int:
        if isinstance(v, bool):  # an Integral too: micro_batch=True read as 1
            raise _Bad(f"'{v}' is a switch, not an integer")
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real) and math.isfinite(v) and v == int(v):
            return int(v)
        if isinstance(v, str) and v.strip().lstrip("+-").isdigit() and v.strip().isascii():
            return int(v.strip())
        raise _Bad(f"'{v}' is not a valid integer")
    if kind is float:
        if isinstance(v, numbers.Real):
            return float(v)
        if isinstance(v, str):
            with contextlib.suppress(ValueError):
                return float(v.strip())
        raise _Bad(f"'{v}' is not a valid number")
    if kind is str:
        if isinstance(v, str):
            return str(v)
        raise _Bad(f"'{v}' is not text")
    if typing.get_origin(kind) is tuple:
        if isinstance(v, (str, bytes, dict)) or not isinstance(v, typing.Iterable):
            raise _Bad(f"'{v}' is not a list")
        items = list(v)
        args = typing.get_args(kind)
        inner = [args[0]] * len(items) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(inner) != len(items):
            raise _Bad(f"{items} is not {len(inner)} values")
        out = []
        for i, (k, x) in enumerate(zip(inner, items, strict=True)):
            try:
                out.append(_as_type(k, x))
            except _Bad as bad:
                raise _Bad(f"item {i + 1}: {bad}") from None
        return tuple(out)
    raise TypeError(f"JobSpec fields of type {kind!r} are not read")
