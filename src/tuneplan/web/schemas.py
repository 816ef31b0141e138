"""The web API's request bodies (pydantic): what `POST /api/estimate` and `POST /api/plan` accept,
with the bounds that keep an absurd request from reaching the planner. Help texts follow JobSpec's
options (`tuneplan.specs.job.option`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tuneplan.specs.job import (
    Method,
    Optimizer,
    Precision,
    Sharding,
)

ESTIMATORS = ("tuneplan", "kavier", "xia", "planner")
"""The estimators the page offers (slst needs a calibration file of its own)."""
DEFAULT_INTERVAL = 0.8
"""Interval coverage when a request gives none (the CLI's default)."""

# ----------------------------------------------------------------------------------------------------
# request bodies

Float = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=100_000)]
Degree = Annotated[int, Field(ge=1, le=4096)]
NonNegInt = Annotated[int, Field(ge=0, le=10**12)]
Name = Annotated[str, Field(min_length=1, max_length=300)]
Quant = Literal["none", "int8", "nf4", "gptq-int4", "awq-int4"]

METHOD_FIELDS = ("lora_rank", "lora_targets", "adapter_dtype", "trainable_layers", "precision", "quant", "optimizer", "galore_rank",
                 "optimizer_impl", "master_weights", "flash_attn", "moe_mode", "moe_experts", "framework")
WORK_FIELDS = ("examples", "tokens_per_example", "tokens", "epochs", "seq_len", "packing", "padding", "eval_every",
               "eval_examples", "save_every", "load_time_s", "disk_gbs", "grid_gco2_kwh")
JOB_FIELDS = ("method", "lora_rank", "lora_targets", "adapter_dtype", "trainable_layers", "precision", "quant", "optimizer",
              "galore_rank",
              "optimizer_impl", "master_weights", "grad_ckpt", "flash_attn", "moe_mode", "moe_experts", "gpus", "nodes", "sharding", "tp", "pp", "cp", "ep",
              "micro_batch", "grad_accum", "grad_accum_sync", "fsdp_adapter_wrap", "examples", "tokens_per_example", "tokens", "epochs", "seq_len",
              "packing", "padding", "eval_every", "eval_examples", "save_every", "load_time_s", "disk_gbs",
              "grid_gco2_kwh", "framework", "ckpt_mode")
"""Request fields passed to JobSpec under the same name (`rate` goes as `rate`, the API's keyword)."""
STAGE_FIELDS = ("stage", "precompute_ref", "group_size", "completion_len", "prompts_per_step", "reward_model",
                "kl_beta", "ppo_epochs")
"""Preference / RL stage fields (docs/stages.md), estimate and plan alike."""
ROLLOUT_FIELDS = ("rollout_engine", "rollout_gpus")
"""RL rollout placement: estimate only (the planner enumerates it)."""
JOB_FIELDS = JOB_FIELDS + STAGE_FIELDS + ROLLOUT_FIELDS


class ModelChoice(BaseModel):
    """A model: a catalog name, or a pasted config.json (with an optional display name)."""

    model: Name | None = Field(None, description="catalog name or alias, e.g. Qwen/Qwen2.5-7B",
                               examples=["Qwen/Qwen2.5-7B"])
    config_json: dict[str, Any] | None = Field(
        None, description="a pasted Hugging Face config.json, instead of `model`")
    config_name: Annotated[str, Field(max_length=200)] | None = Field(
        None, description="display name for a pasted config (default: custom-model)")

    @model_validator(mode="after")
    def _one_model(self) -> ModelChoice:
        if self.model is None and self.config_json is None:
            raise ValueError("give `model` (a catalog name) or `config_json` (a pasted config.json)")
        if self.model is not None and self.config_json is not None:
            raise ValueError("give `model` or `config_json`, not both")
        return self


class MethodOptions(BaseModel):
    """Options of the method (JobSpec's fields; absent ones take tuneplan's defaults)."""

    lora_rank: Annotated[int, Field(ge=1, le=65_536)] | None = Field(None, description="LoRA rank r (default 16)")
    lora_targets: Annotated[str, Field(min_length=1, max_length=400,
                                       pattern=r"^[A-Za-z0-9_,\- ]+$")] | None = Field(
        None, description="comma-separated modules (q,k,v,o,gate,up,down) or all-linear")
    adapter_dtype: Literal["fp32", "compute"] | None = Field(
        None, description="LoRA-family adapters in fp32 (peft >= 0.12, default: each adapted module keeps an "
                          "fp32 copy of its input) or in the compute dtype")
    trainable_layers: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        None, description="freeze: last N blocks trained (default 2)")
    precision: Precision | None = Field(None, description="compute precision (default bf16)")
    quant: Quant | None = Field(None, description="base weight storage (default: as the method implies)")
    optimizer: Optimizer | None = Field(None, description="default adamw; galore-adamw: full fine-tuning with "
                                                          "GaLore's low-rank moments")
    galore_rank: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="GaLore: projection rank of the block linears' moments (default 128)")
    master_weights: Literal["auto", "fp32", "none"] | None = Field(
        None, description="16-bit full fine-tuning: fp32 master copy, weights trained in place, or auto "
                          "(fp32 under DeepSpeed ZeRO, tensor parallelism and fp8); default: the framework's, "
                          "else fp32")
    optimizer_impl: Literal["foreach", "fused", "for-loop"] | None = Field(
        None, description="how the AdamW step runs: foreach (torch's default: one second-moment-sized temporary "
                          "at the step), fused or for-loop; default: the framework's")
    flash_attn: bool | None = Field(None, description="FlashAttention / SDPA (default on)")
    moe_mode: Literal["sparse", "dense"] | None = Field(None, description="MoE: top-k experts or all")
    moe_experts: Literal["modules", "stacked"] | None = Field(
        None, description="MoE experts as one module per expert (transformers 4) or stacked tensors (transformers "
                          ">= 5: LoRA rebuilds W + BA per stack and holds it for the backward); default: the "
                          "framework's (hf-trainer stacked), else modules")
    framework: Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[a-z0-9_.-]+(@[0-9][0-9a-z.+-]*)?$")] | None = Field(
        None, description="training framework, NAME or NAME@VERSION; an alias resolves (data/frameworks.yaml; see "
                          "/api/options; default hf-trainer, the HF Trainer's current defaults)")


class WorkFields(BaseModel):
    """The work: dataset size, epochs, sequence length, evaluation and checkpoints."""

    examples: Annotated[Float, Field(gt=0, le=1e13)] | None = Field(None, description="training examples")
    tokens_per_example: Annotated[Float, Field(gt=0, le=1e8)] | None = Field(
        None, description="mean tokens per example, after templating")
    tokens: Annotated[Float, Field(gt=0, le=1e16)] | None = Field(
        None, description="total tokens per epoch (instead of examples)")
    epochs: Annotated[Float, Field(gt=0, le=1e5)] | None = Field(None, description="default 1")
    seq_len: Annotated[int, Field(ge=1, le=10_000_000)] | None = Field(
        None, description="padded/packed length (default: tokens per example)")
    packing: bool | None = Field(None, description="pack examples into seq_len samples")
    padding: Literal["max", "longest"] | None = Field(
        None, description="unpacked examples padded to seq_len (max) or each batch to its longest example (longest)")
    eval_every: NonNegInt | None = None
    eval_examples: NonNegInt | None = None
    save_every: NonNegInt | None = None
    load_time_s: Annotated[Float, Field(ge=0, le=1e9)] | None = None
    disk_gbs: Annotated[Float, Field(gt=0, le=1e6)] | None = None
    grid_gco2_kwh: Annotated[Float, Field(ge=0, le=1e5)] | None = Field(
        None, description="grid carbon intensity, g/kWh (default 480)")


class StageFields(BaseModel):
    """The training stage (absent: sft); RL options apply to grpo, ppo and rloo only."""

    stage: Literal["sft", "dpo", "orpo", "kto", "simpo", "cpo", "grpo", "ppo", "rloo"] | None = Field(
        None, description="sft (default), preference dpo/orpo/kto/simpo/cpo, or RL grpo/ppo/rloo")
    precompute_ref: bool | None = Field(None, description="dpo/kto: reference log-probs computed before training")
    group_size: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="RL: completions per prompt (TRL: grpo 8, rloo 2)")
    completion_len: Annotated[int, Field(ge=1, le=10_000_000)] | None = Field(
        None, description="RL: new tokens per completion (TRL: 512)")
    prompts_per_step: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        None, description="RL: prompts per optimizer step")
    reward_model: Name | None = Field(None, description="RL: reward model (default: a rule)")
    kl_beta: Annotated[Float, Field(ge=0, le=1e6)] | None = Field(None, description="RL: KL coefficient")
    ppo_epochs: Annotated[int, Field(ge=1, le=10_000)] | None = Field(None, description="PPO: update epochs")


class RolloutFields(StageFields):
    rollout_engine: Literal["hf", "vllm"] | None = Field(None, description="RL: HF generate (default) or vLLM")
    rollout_gpus: Annotated[int, Field(ge=0, le=1_048_576)] | None = Field(
        None, description="RL with vllm: GPUs of `gpus` serving vLLM (0: colocated)")


class JobFields(MethodOptions, WorkFields):
    """What is trained and how, on how many GPUs, in what batches."""

    method: Method | None = Field(None, description="fine-tuning method (default lora)")
    grad_ckpt: bool | None = Field(None, description="gradient checkpointing (default off)")
    ckpt_mode: Literal["none", "selective", "full", "offload"] | None = Field(
        None, description="activation checkpointing mode (overrides grad_ckpt): none, selective, full, offload")
    nodes: Annotated[int, Field(ge=1, le=10_000)] | None = None
    sharding: Sharding | None = Field(None, description="default ddp")
    tp: Degree | None = None
    pp: Degree | None = None
    cp: Degree | None = None
    ep: Degree | None = None
    micro_batch: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="samples per GPU per micro-step (default 4)")
    grad_accum: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="gradient-accumulation steps (default 1)")
    grad_accum_sync: Literal["every-micro-batch", "no-sync"] | None = Field(
        None, description="FSDP under gradient accumulation: every-micro-batch (a GPU keeps its gradient shard) or "
                          "no-sync (no_sync until the last micro-batch: every GPU holds the unsharded gradients); "
                          "default: the framework's")
    fsdp_adapter_wrap: Literal["separate", "with-block"] | None = Field(
        None, description="FSDP and a PEFT method: adapters in their own units (separate) or inside each block's "
                          "FSDP1 flat parameter (with-block: the frozen weights' gradient allocated too); "
                          "default: the framework's")


class PriceFields(BaseModel):
    provider: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        None, description="take the price from this provider (see /api/options)")
    rate: Annotated[Float, Field(ge=0, le=1e6)] | None = Field(
        None, description="$ per GPU-hour (default: cheapest on-demand price)")


class EstimateRequest(ModelChoice, JobFields, PriceFields, RolloutFields):
    """`POST /api/estimate`: the inputs of `tuneplan estimate`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "model": "Qwen/Qwen2.5-7B", "gpu": "H100-SXM5-80GB", "method": "lora", "gpus": 1,
        "examples": 10000, "tokens_per_example": 512, "epochs": 1}]})

    gpu: Name | None = Field(None, description="catalog GPU name, e.g. H100-SXM5-80GB")
    peak_tflops: Annotated[Float, Field(gt=0, le=1e7)] | None = Field(
        None, description="one-off dense peak TFLOP/s (overrides the catalog GPU's)")
    memory_gib: Annotated[Float, Field(gt=0, le=1e7)] | None = Field(None, description="one-off memory, GiB")
    bandwidth_gbs: Annotated[Float, Field(gt=0, le=1e8)] | None = Field(
        None, description="one-off memory bandwidth, GB/s")
    gpus: Count | None = Field(None, description="total GPUs (default 1)")
    estimator: Literal["tuneplan", "kavier", "xia", "planner"] = "tuneplan"
    interval: Annotated[Float, Field(ge=0, lt=1)] | None = Field(
        None, description="interval coverage (default 0.8; 0 for none)")

    @model_validator(mode="after")
    def _gpu_given(self) -> EstimateRequest:
        figures = (self.peak_tflops, self.memory_gib, self.bandwidth_gbs)
        if self.gpu is None and any(v is None for v in figures):
            missing = [n for n, v in zip(("peak_tflops", "memory_gib", "bandwidth_gbs"), figures,
                                         strict=True) if v is None]
            raise ValueError("give `gpu` (a catalog name) or all of peak_tflops, memory_gib and "
                             f"bandwidth_gbs for your own GPU (missing: {', '.join(missing)})")
        return self


PosIntList = list[Annotated[int, Field(ge=1, le=1_048_576)]]


class PlanRequest(ModelChoice, MethodOptions, WorkFields, PriceFields, StageFields):
    """`POST /api/plan`: the inputs of `tuneplan plan` (a search over GPU type x count x method x batch)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "model": "Qwen/Qwen2.5-7B", "gpus": ["A100-SXM4-80GB", "H100-SXM5-80GB"], "methods": ["lora", "qlora"],
        "max_gpus": 8, "examples": 10000, "tokens_per_example": 512, "epochs": 1, "objective": "cheapest"}]})

    gpus: list[Name] | None = Field(None, max_length=256,
                                    description="GPU types to consider (default: every priced catalog GPU)")
    methods: list[Method] | None = Field(None, max_length=64, description="methods (default full, lora, qlora)")
    max_gpus: Annotated[int, Field(ge=1, le=1_048_576)] = Field(
        8, description="largest GPU count (powers of two up to it)")
    gpu_counts: PosIntList | None = Field(None, max_length=10_000,
                                          description="GPU counts to try instead of powers of two")
    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] | None = Field(None, description="default 8")
    micro_batches: PosIntList | None = Field(None, max_length=10_000,
                                             description="micro-batches to try (default 1,2,4,...,64)")
    global_batch: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        None, description="samples per optimizer step kept by gradient accumulation (default 32)")
    grad_accums: PosIntList | None = Field(None, max_length=10_000,
                                           description="gradient accumulations to try instead of global_batch")
    shardings: list[Sharding] | None = Field(None, max_length=64, description="default ddp, fsdp")
    grad_ckpt: bool | None = Field(None, description="pin gradient checkpointing (default: try both)")
    deadline_h: Annotated[Float, Field(gt=0, le=1e6)] | None = Field(None, description="wall-clock limit, hours")
    budget_usd: Annotated[Float, Field(gt=0, le=1e12)] | None = Field(None, description="cost limit, $")
    objective: Literal["cheapest", "fastest", "energy", "balanced"] = "cheapest"
    interval: Annotated[Float, Field(ge=0, lt=1)] | None = Field(
        None, description="interval coverage (default 0.8; 0 for none)")
    max_candidates: Annotated[int, Field(ge=1, le=5000)] = Field(
        200, description="candidates returned, best first (all are searched; `points` has the best of "
                         "each GPU type x count x method)")


class ModelConfigRequest(BaseModel):
    """`POST /api/model-config`: a pasted config.json to read."""

    model_config = ConfigDict(extra="forbid")
    config_json: dict[str, Any]
    config_name: Annotated[str, Field(max_length=200)] | None = None
