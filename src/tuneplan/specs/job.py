"""What a fine-tuning job is: method, precision, parallelism, batch shape and the work to do.

Validated with pydantic; every failure becomes an `InputError` naming the field and the allowed
values (the CLI prints it as one line and exits 2).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator

from tuneplan.errors import InputError
from tuneplan.specs.limits import JOB_BOUNDS
from tuneplan.specs.peft import LORA_EQUIVALENT, PEFT_METHOD_NAMES, canonical, method_options, parse_options

METHODS = ("full", "lora", "qlora", "gptq-lora", "alora", "dora", "freeze") + PEFT_METHOD_NAMES
LORA_FAMILY = ("lora", "qlora", "gptq-lora", "alora", "dora")
PRECISIONS = ("bf16", "fp16", "fp32", "fp8", "nvfp4", "mxfp4")
LOW_PRECISIONS = ("fp8", "nvfp4", "mxfp4")
"""Training precisions whose linear layers run below 16 bits (physics/precision.py: the rest stays bf16)."""
CKPT_MODES = ("none", "selective", "full", "offload")
"""Activation checkpointing: none; selective (Megatron's: recompute attention's core, keep the linears'
inputs); full (keep each checkpointed layer's input, recompute the layer); offload (keep each layer's
input in host memory, recompute the layer)."""
CP_MODES = ("ring", "ulysses")
FRAMEWORK_DEFAULT = "generic"
MASTER_WEIGHTS = ("auto", "fp32", "none")
OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "sgd-momentum", "adafactor")
SHARDINGS = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-hybrid", "fsdp-grad-op",
             "zero3-offload", "fsdp-offload")
QUANTS = ("none", "int8", "nf4", "gptq-int4", "awq-int4", "aqlm-2bit", "fp8")
MOE_MODES = ("sparse", "dense")
PADDINGS = ("max", "longest")
ADAPTER_DTYPES = ("fp32", "compute")
STAGES = ("sft", "dpo", "orpo", "kto", "simpo", "cpo", "grpo", "ppo", "rloo")
"""Training stages: supervised (sft), preference optimisation (dpo, orpo, kto, simpo, cpo) and RL with
generated rollouts (grpo, ppo, rloo). Their physics: `tuneplan.physics.stages`, docs/stages.md."""
PREFERENCE_STAGES = ("dpo", "orpo", "kto", "simpo", "cpo")
RL_STAGES = ("grpo", "ppo", "rloo")
ROLLOUT_ENGINES = ("hf", "vllm")
ALL_LINEAR = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2", "shared_gate",
              "shared_up", "shared_down", "in_proj", "x_proj", "out_proj", "q_a", "q_b", "kv_a", "kv_b",
              "dense", "wo", "wi", "wi_0", "wi_1")
DEFAULT_LORA_RANK = 16
"""LoRA rank r when not given: a common fine-tuning recipe choice (peft's own default is 8)."""
DEFAULT_MICRO_BATCH = 4
"""Samples per GPU per forward/backward when not given."""
DEFAULT_FREEZE_TRAINABLE_LAYERS = 2
"""`freeze` trains the last N blocks; 2 is LLaMA-Factory's freeze_trainable_layers default."""

Method = Literal["full", "lora", "qlora", "gptq-lora", "alora", "dora", "freeze",  # + specs/peft.py's catalogue
                 "rslora", "pissa", "olora", "eva", "loftq", "lora-fa", "adalora", "ia3", "loha", "lokr", "oft",
                 "boft", "vera", "fourierft", "hra", "bone", "prefix-tuning", "prompt-tuning", "p-tuning",
                 "ln-tuning", "adapter"]
Precision = Literal["bf16", "fp16", "fp32", "fp8", "nvfp4", "mxfp4"]
Optimizer = Literal["adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "sgd-momentum", "adafactor"]
Stage = Literal["sft", "dpo", "orpo", "kto", "simpo", "cpo", "grpo", "ppo", "rloo"]
Sharding = Literal["none", "ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-hybrid", "fsdp-grad-op",
                   "zero3-offload", "fsdp-offload"]


def _bounded(info: ValidationInfo, v):
    """A field's value within its physical bound (tuneplan.specs.limits.JOB_BOUNDS)."""
    upper = JOB_BOUNDS.get(info.field_name or "")
    if v is not None and upper is not None and v > upper:
        raise ValueError(f"{v:g} is beyond any physical fine-tuning run (at most {upper:,.0f})")
    return v


class JobSpec(BaseModel):
    """A fine-tuning job. Counts are per run; `micro_batch` is samples per GPU per micro-step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method = "lora"
    lora_rank: int = DEFAULT_LORA_RANK
    lora_targets: tuple[str, ...] = ("all-linear",)
    trainable_layers: int = DEFAULT_FREEZE_TRAINABLE_LAYERS
    precision: Precision = "bf16"
    quant: str | None = None  # base weights: None = by method (qlora nf4, gptq-lora gptq-int4) / checkpoint
    optimizer: Optimizer = "adamw"
    master_weights: Literal["auto", "fp32", "none"] = "auto"
    grad_ckpt: bool = False
    # --grad-ckpt none|selective|full|offload (a bool still works: true = full, false = none); "auto" = by grad_ckpt
    ckpt_mode: Literal["auto", "none", "selective", "full", "offload"] = "auto"
    ckpt_every: int = 1  # checkpoint one layer in every N (Megatron recompute_num_layers, unsloth's offload share)
    act_offload: bool = False  # activation CPU offload of the saved tensors (Megatron / torchtune / NeMo)
    framework: str = FRAMEWORK_DEFAULT  # data/frameworks.yaml: the kernels and defaults the stack uses
    fused_ce: bool | None = None  # fused / chunked cross-entropy (no full fp32 logits); None: by framework
    sequence_parallel: bool | None = None  # Megatron sequence parallel with tp > 1; None: by framework
    cp_mode: Literal["ring", "ulysses"] = "ring"  # context parallel: ring attention or Ulysses all-to-all
    vpp: int = 1  # interleaved pipeline: virtual stages per pipeline rank
    offload: Literal["none", "optimizer", "all"] = "none"  # optimizer states (ZeRO-offload) / also parameters
    flash_attn: bool = True
    gpus: int = 1
    nodes: int = 1
    sharding: Sharding = "ddp"
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch: int = DEFAULT_MICRO_BATCH
    grad_accum: int = 1
    seq_len: int | None = None
    examples: float | None = None
    tokens_per_example: float | None = None
    tokens: float | None = None
    epochs: float = 1.0
    packing: bool = False
    padding: Literal["max", "longest"] = "max"  # unpacked samples: padded to seq_len, or to the batch's longest
    # LoRA-family adapters: fp32 (peft >= 0.12's autocast_adapter_dtype: each adapted module's 16-bit input
    # is cast to fp32 and kept for backward) or the compute dtype (older peft, litgpt, Megatron)
    adapter_dtype: Literal["fp32", "compute"] = "fp32"
    # PEFT methods of specs/peft.py: their options (peft config field names and values, e.g. ("r", "256"),
    # ("num_virtual_tokens", "20")); the generic `adapter`'s trainable parameter count
    peft_options: tuple[tuple[str, str], ...] = ()
    trainable_params: float | None = None
    moe_mode: Literal["sparse", "dense"] = "sparse"
    # vision-language models: images per training example (their tokens join each sample's sequence),
    # the assumed image side in px for dynamic-resolution towers (0: the tower's own / the default),
    # and whether the vision tower is trained (default: frozen, as LLaMA-Factory / TRL VLM recipes do)
    images_per_example: int = 0
    image_size: int = 0
    train_vision_tower: bool = False
    load_time_s: float | None = None  # None: weights' bytes over disk bandwidth
    eval_every: int = 0  # optimizer steps between evaluation passes (0 = none)
    eval_examples: int = 0
    save_every: int = 0  # optimizer steps between checkpoint saves (0 = only at the end)
    save_final: bool = True
    disk_gbs: float = 2.0  # GB/s, checkpoint save and model load
    rate_usd_per_gpu_hour: float | None = None
    grid_gco2_kwh: float | None = None
    # ---- training stage (physics/stages.py; None = the stage's TRL default, said in the assumptions) ----
    stage: Stage = "sft"
    precompute_ref: bool = False  # dpo/kto: reference log-probs computed once before training
    group_size: int | None = None  # RL: completions per prompt (TRL num_generations)
    completion_len: int | None = None  # RL: generated tokens per completion (TRL max_completion_length)
    prompts_per_step: int | None = None  # RL: prompts per optimizer step (None: global batch / group size)
    rollout_engine: Literal["hf", "vllm"] = "hf"  # RL: HF generate in the training process, or vLLM
    rollout_gpus: int = 0  # RL with vllm: GPUs (of --gpus) serving vLLM; 0 = colocated in the training process
    reward_model: str | None = None  # RL: reward model (catalog name / HF id); None = a rule-based reward
    kl_beta: float | None = None  # RL: KL coefficient (0: no reference model)
    ppo_epochs: int | None = None  # PPO: optimisation passes over each batch of rollouts

    @model_validator(mode="before")
    @classmethod
    def _ckpt_words(cls, data):
        """`grad_ckpt` takes a mode word too (none, selective, full, offload, or true/false as text)."""
        if isinstance(data, dict) and isinstance(data.get("grad_ckpt"), str):
            data = dict(data)
            word = data["grad_ckpt"].strip().lower()
            word = {"true": "full", "1": "full", "yes": "full", "on": "full", "false": "none", "0": "none",
                    "no": "none", "off": "none"}.get(word, word)
            if word not in CKPT_MODES:
                raise ValueError(f"grad_ckpt: unknown mode '{data['grad_ckpt']}' (allowed: {', '.join(CKPT_MODES)})")
            data["ckpt_mode"] = word
            data["grad_ckpt"] = word != "none"
        elif isinstance(data, dict) and data.get("ckpt_mode") not in (None, "auto"):
            data = dict(data)
            data["grad_ckpt"] = data["ckpt_mode"] != "none"
        return data

    @field_validator("framework")
    @classmethod
    def _framework(cls, v: str) -> str:
        from tuneplan.specs.framework import framework_names

        v = (v or FRAMEWORK_DEFAULT).strip().lower()
        if v not in framework_names():
            raise ValueError(f"unknown framework '{v}' (allowed: {', '.join(framework_names())})")
        return v

    @field_validator("gpus", "nodes", "tp", "pp", "cp", "ep", "micro_batch", "grad_accum", "lora_rank",
                     "trainable_layers", "ckpt_every", "vpp")
    @classmethod
    def _positive(cls, v: int, info: ValidationInfo) -> int:
        if v < 1:
            raise ValueError("must be a positive integer")
        return _bounded(info, v)

    @field_validator("group_size", "completion_len", "prompts_per_step", "ppo_epochs")
    @classmethod
    def _opt_positive(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("must be a positive integer")
        return v

    @field_validator("seq_len")
    @classmethod
    def _seq(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and v < 1:
            raise ValueError("must be a positive integer")
        return _bounded(info, v)

    @field_validator("method", mode="before")
    @classmethod
    def _method_alias(cls, v):
        return canonical(v) if isinstance(v, str) else v

    @field_validator("peft_options", mode="before")
    @classmethod
    def _peft_options(cls, v):
        return parse_options(v)

    @field_validator("examples", "tokens_per_example", "tokens", "epochs", "disk_gbs", "trainable_params")
    @classmethod
    def _pos_float(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is not None and (not math.isfinite(v) or v <= 0):
            raise ValueError("must be a positive number")
        return _bounded(info, v)

    @field_validator("rate_usd_per_gpu_hour", "grid_gco2_kwh", "load_time_s", "kl_beta")
    @classmethod
    def _nonneg(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is not None and (not math.isfinite(v) or v < 0):
            raise ValueError("must be a number >= 0")
        return _bounded(info, v)

    @field_validator("eval_every", "eval_examples", "save_every", "rollout_gpus", "images_per_example",
                     "image_size")
    @classmethod
    def _nonneg_int(cls, v: int, info: ValidationInfo) -> int:
        if v < 0:
            raise ValueError("must be an integer >= 0")
        return _bounded(info, v)

    @field_validator("quant")
    @classmethod
    def _quant(cls, v: str | None) -> str | None:
        if v is not None and v not in QUANTS:
            raise ValueError(f"unknown quantisation '{v}' (allowed: {', '.join(QUANTS)})")
        return v

    @model_validator(mode="after")
    def _combos(self) -> JobSpec:
        if self.gpus % self.nodes:
            raise ValueError(f"gpus ({self.gpus}) must be divisible by nodes ({self.nodes})")
        model_par = self.tp * self.pp * self.cp
        if self.gpus % model_par:
            raise ValueError(f"gpus ({self.gpus}) must be divisible by tp x pp x cp ({model_par})")
        if self.ep > 1 and (self.gpus // model_par) % self.ep:
            raise ValueError(f"data-parallel degree ({self.gpus // model_par}) must be divisible by ep ({self.ep})")
        if self.method in ("qlora", "gptq-lora", "loftq") and self.precision == "fp32":
            raise ValueError(f"{self.method} needs a 16-bit compute precision (bf16 or fp16), not fp32")
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp ({self.vpp}) needs pipeline parallelism (pp > 1)")
        if self.method == "full" and self.quant not in (None, "none"):
            raise ValueError(f"full fine-tuning cannot train quantised ({self.quant}) weights")
        method_options(self.method, self.peft_options)  # unknown options: InputError naming the allowed ones
        self._stage_combos()
        return self

    def _stage_combos(self) -> None:
        """Stage options that do not apply to the stage, or a rollout split that leaves no trainer."""
        rl_only = {"group_size": self.group_size, "completion_len": self.completion_len,
                   "prompts_per_step": self.prompts_per_step, "reward_model": self.reward_model,
                   "kl_beta": self.kl_beta, "rollout_gpus": self.rollout_gpus or None,
                   "rollout_engine": None if self.rollout_engine == "hf" else self.rollout_engine}
        if self.stage not in RL_STAGES:
            given = [k for k, v in rl_only.items() if v is not None]
            if given:
                raise ValueError(f"{given[0].replace('_', '-')} applies to the RL stages "
                                 f"({', '.join(RL_STAGES)}), not --stage {self.stage}")
        if self.ppo_epochs is not None and self.stage != "ppo":
            raise ValueError(f"ppo-epochs applies to --stage ppo, not --stage {self.stage}")
        if self.precompute_ref and self.stage not in ("dpo", "kto"):
            raise ValueError(f"precompute-ref applies to the stages with a reference model (dpo, kto), "
                             f"not --stage {self.stage}")
        if self.rollout_gpus:
            if self.rollout_engine != "vllm":
                raise ValueError("rollout-gpus needs --rollout-engine vllm (HF generate runs in the training "
                                 "process)")
            train = self.gpus - self.rollout_gpus
            if train < 1:
                raise ValueError(f"rollout-gpus ({self.rollout_gpus}) must leave training GPUs of the "
                                 f"{self.gpus} (--gpus counts both)")
            model_par = self.tp * self.pp * self.cp
            if train % model_par or train % self.nodes:
                raise ValueError(f"training GPUs (gpus - rollout-gpus = {train}) must be divisible by "
                                 f"tp x pp x cp ({model_par}) and by nodes ({self.nodes})")

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
            return checkpoint_quant if checkpoint_quant in ("gptq-int4", "awq-int4") else "gptq-int4"
        if self.method == "full":
            return "none"
        return checkpoint_quant if self.quant is None else "none"

    def fp32_master(self) -> bool:
        """Whether a 16-bit full (or freeze) fine-tuning keeps an fp32 master copy of the trained
        weights, with fp32 optimizer moments. `fp32`: automatic mixed precision over fp32 weights
        (16 bytes per parameter with AdamW). `none`: the 16-bit weights are trained in place (HF
        Trainer or TRL on a bf16-loaded model, ms-swift, litgpt bf16-true, torchtune; torch's AdamW
        then allocates its moments in bf16: 8 bytes per parameter). `auto`: DeepSpeed ZeRO and
        Megatron (tensor parallel) keep fp32 masters, fp8 training keeps them too; everything else
        (one GPU, DDP, FSDP, a model split over GPUs layer by layer with a device map) trains the
        16-bit weights in place, unless the framework (data/frameworks.yaml `master_weights`) keeps
        fp32 masters (Megatron, torchtitan, llm-foundry, DeepSpeed) or trains in place (unsloth,
        torchtune, ms-swift, litgpt)."""
        if self.master_weights != "auto":
            return self.master_weights == "fp32"
        from tuneplan.specs.framework import get_framework

        fw_master = get_framework(self.framework).master_weights
        if fw_master != "auto":
            return fw_master == "fp32"
        return self.sharding.startswith("zero") or self.tp > 1 or self.precision in LOW_PRECISIONS

    def variable_shapes(self) -> bool:
        """Whether batches vary in length from step to step: unpacked samples padded only to the
        longest in their batch (HF's DataCollatorWithPadding, TRL and most SFT scripts without packing)."""
        return self.padding == "longest" and not self.packing

    def sharding_kind(self) -> str:
        """Normalised sharding: none, ddp, zero1, zero2, zero3 (fsdp full), hybrid, offload."""
        s = self.sharding
        if self.dp * self.cp == 1:  # shards span data x context parallel ranks
            return "none" if s in ("ddp", "none") else s if "offload" in s else "none"
        return {"fsdp": "zero3", "fsdp-grad-op": "zero2", "fsdp-hybrid": "hybrid",
                "fsdp-offload": "zero3-offload"}.get(s, s)


def _framework_defaults(clean: dict) -> dict:
    """Settings a named framework decides when the job leaves them out: the adapters' dtype and how
    unpacked samples are padded (data/frameworks.yaml); the estimate's assumptions say both."""
    name = clean.get("framework")
    if not isinstance(name, str) or name.strip().lower() == FRAMEWORK_DEFAULT:
        return clean
    from tuneplan.specs.framework import get_framework, load_frameworks

    if name.strip().lower() not in load_frameworks():
        return clean  # the field validator names the allowed values
    fw = get_framework(name)
    out = dict(clean)
    out.setdefault("adapter_dtype", "fp32" if fw.adapter_fp32 else "compute")
    if not out.get("packing"):
        out.setdefault("padding", fw.padding)
    return out


def make_job(**kwargs) -> JobSpec:
    """Build a JobSpec, turning pydantic's errors into one-line InputErrors naming the field."""
    clean = {k: v for k, v in kwargs.items() if v is not None}
    clean = _framework_defaults(clean)
    if "lora_targets" in clean and isinstance(clean["lora_targets"], str):
        clean["lora_targets"] = tuple(t.strip() for t in clean["lora_targets"].split(",") if t.strip())
    try:
        return JobSpec(**clean)
    except ValidationError as exc:
        err = exc.errors()[0]
        orig = (err.get("ctx") or {}).get("error")
        if isinstance(orig, InputError):  # already names its field (peft options, ...)
            raise orig from None
        loc = ".".join(str(x) for x in err.get("loc", ())) or "job"
        field = loc.replace("_", "-")
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        allowed = None
        if err.get("type") == "literal_error":
            allowed = {
                "method": METHODS, "precision": PRECISIONS, "optimizer": OPTIMIZERS,
                "sharding": SHARDINGS, "moe_mode": MOE_MODES, "padding": PADDINGS,
                "adapter_dtype": ADAPTER_DTYPES, "ckpt_mode": ("auto",) + CKPT_MODES, "cp_mode": CP_MODES,
                "offload": ("none", "optimizer", "all"), "stage": STAGES, "rollout_engine": ROLLOUT_ENGINES,
            }.get(loc)
            got = err.get("input")
            msg = f"unknown value '{got}'"
        elif err.get("type") in ("int_parsing", "int_from_float", "float_parsing"):
            msg = f"'{err.get('input')}' is not a valid {'integer' if 'int' in err['type'] else 'number'}"
        if not err.get("loc"):
            field = "job"
            if msg.startswith("grad_ckpt: "):  # the mode words' check runs before the fields have locations
                field, msg, allowed = "grad-ckpt", msg.removeprefix("grad_ckpt: ").split(" (allowed")[0], CKPT_MODES
        raise InputError(field, msg, allowed) from None
