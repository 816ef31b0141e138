"""Flags shared by estimate, predict, plan and curve."""

from __future__ import annotations

import argparse

from tuneplan.specs.job import (
    ADAPTER_DTYPES,
    MASTER_WEIGHTS,
    METHODS,
    OPTIMIZERS,
    PADDINGS,
    PRECISIONS,
    SHARDINGS,
    STAGES,
)


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return v


def nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if v < 0 or v != v:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def add_gpu_args(p: argparse.ArgumentParser, gpu_required: bool = False) -> None:
    g = p.add_argument_group("GPU")
    g.add_argument("--gpu", help="catalog name (see `tuneplan gpus`), e.g. H100-SXM5-80GB")
    g.add_argument("--gpu-file", help="your own GPU as YAML/JSON (keys of `tuneplan gpus --json`)")
    g.add_argument("--peak-tflops", type=positive_float, help="one-off dense peak TFLOP/s")
    g.add_argument("--memory-gib", type=positive_float, help="one-off GPU memory, GiB")
    g.add_argument("--bandwidth-gbs", type=positive_float, help="one-off memory bandwidth, GB/s")
    add_strict_names(g)


def add_strict_names(p) -> None:
    """`--strict-names`: refuse a GPU family name instead of reading it as the catalog's default variant."""
    p.add_argument("--strict-names", action="store_true",
                   help="refuse a GPU family name (A100, A100-80GB, H100...) instead of reading it as the "
                        "catalog's default variant (which the output's assumptions name)")


def add_stack_args(p: argparse.ArgumentParser, m) -> None:
    """Checkpointing modes, offload, the framework and the parallel modes (physics/stack.py)."""
    from tuneplan.specs.framework import framework_names
    from tuneplan.specs.job import CKPT_MODES, CP_MODES

    m.add_argument("--grad-ckpt", nargs="?", const="full", default=None, metavar="MODE",
                   choices=CKPT_MODES + ("true", "false"),
                   help="activation checkpointing: none, selective (Megatron: recompute attention's core), full "
                        "(default when given without a mode), offload (checkpoints kept in host memory)")
    m.add_argument("--no-grad-ckpt", dest="grad_ckpt", action="store_const", const="none", help="no checkpointing")
    m.add_argument("--ckpt-every", type=positive_int, help="checkpoint one layer in every N (default 1: all)")
    m.add_argument("--act-offload", action=argparse.BooleanOptionalAction, default=None,
                   help="offload saved activations to host memory (default off)")
    m.add_argument("--offload", choices=("none", "optimizer", "all"),
                   help="optimizer states (and master weights) on the host; all: parameters too (default none)")
    m.add_argument("--framework", choices=framework_names(),
                   help="the training stack: its kernels and defaults (data/frameworks.yaml; default generic)")
    m.add_argument("--fused-ce", action=argparse.BooleanOptionalAction, default=None,
                   help="fused linear + cross-entropy (Liger, Cut Cross-Entropy): no full logits (default: by framework)")
    g = p.add_argument_group("parallel modes")
    g.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="Megatron sequence parallel with --tp (default: by framework)")
    g.add_argument("--cp-mode", choices=CP_MODES, help="context parallel: ring attention (default) or Ulysses")
    g.add_argument("--vpp", type=positive_int, help="interleaved pipeline: virtual stages per rank (default 1)")


def add_job_args(p: argparse.ArgumentParser, lists: bool = False) -> None:
    m = p.add_argument_group("method")
    m.add_argument("--method", choices=None if lists else METHODS, default=None,
                   metavar="{" + ",".join(METHODS) + "}", help="fine-tuning method (default lora)")
    m.add_argument("--lora-rank", type=positive_int, help="LoRA rank r (default 16)")
    m.add_argument("--lora-targets", help="comma-separated modules (q,k,v,o,gate,up,down) or all-linear (default)")
    m.add_argument("--adapter-dtype", choices=ADAPTER_DTYPES, default=None,
                   help="LoRA-family adapters in fp32 (peft >= 0.12, default: each adapted module keeps an fp32 "
                        "copy of its input) or in the compute dtype (older peft, litgpt, Megatron)")
    m.add_argument("--trainable-layers", type=positive_int, help="freeze: last N blocks trained (default 2)")
    m.add_argument("--precision", choices=PRECISIONS,
                   help="compute precision (default bf16); fp8, nvfp4, mxfp4: the linear layers at low precision")
    m.add_argument("--quant", help="base weight storage: none, int8, nf4, gptq-int4, awq-int4, fp8")
    m.add_argument("--peft-option", action="append", metavar="NAME=VALUE",
                   help="an option of the PEFT method in peft's own config names, e.g. num_virtual_tokens=30, "
                        "oft_block_size=64, n_frequency=2000 (repeatable; the rest take peft's defaults; "
                        "--lora-rank and --lora-targets set r and target_modules)")
    m.add_argument("--trainable-params", type=positive_float,
                   help="--method adapter: the adapter's trainable parameter count (any method tuneplan does "
                        "not name)")
    m.add_argument("--optimizer", choices=OPTIMIZERS, help="default adamw")
    m.add_argument("--master-weights", choices=MASTER_WEIGHTS,
                   help="full fine-tuning in 16 bits: fp32 = mixed precision over an fp32 master copy (16 "
                        "bytes/param with AdamW), none = 16-bit weights trained in place (8), auto (default) "
                        "= fp32 under DeepSpeed ZeRO, tensor parallelism or fp8, else none")
    add_stack_args(p, m)
    m.add_argument("--flash-attn", action=argparse.BooleanOptionalAction, default=None,
                   help="FlashAttention / SDPA memory-efficient attention (default on)")
    m.add_argument("--moe-mode", choices=("sparse", "dense"), help="MoE: top-k experts (sparse, default) or all")
    par = p.add_argument_group("parallelism")
    par.add_argument("--gpus", type=positive_int, help="total GPUs (default 1)")
    par.add_argument("--nodes", type=positive_int, help="nodes (default 1)")
    par.add_argument("--sharding", choices=SHARDINGS, help="default ddp")
    for d in ("tp", "pp", "cp", "ep"):
        par.add_argument(f"--{d}", type=positive_int, help=f"{d.upper()} degree (default 1)")
    par.add_argument("--micro-batch", type=positive_int, help="samples per GPU per micro-step (default 4)")
    par.add_argument("--grad-accum", type=positive_int, help="gradient-accumulation steps (default 1)")
    w = p.add_argument_group("work")
    w.add_argument("--examples", type=positive_float, help="training examples")
    w.add_argument("--tokens-per-example", type=positive_float, help="mean tokens per example, after templating")
    w.add_argument("--tokens", type=positive_float, help="total tokens per epoch (instead of examples)")
    w.add_argument("--epochs", type=positive_float, help="default 1")
    w.add_argument("--seq-len", type=positive_int, help="padded/packed length (default: mean tokens per example)")
    w.add_argument("--packing", action="store_true", default=None, help="pack examples into seq-len samples")
    w.add_argument("--padding", choices=PADDINGS, default=None,
                   help="unpacked examples: padded to --seq-len (max, default) or each batch to its longest "
                        "example (longest: HF's collator; batch shapes vary, so torch reserves more memory)")
    w.add_argument("--eval-every", type=nonneg_int, help="optimizer steps between evaluations")
    w.add_argument("--eval-examples", type=nonneg_int, help="examples per evaluation")
    w.add_argument("--save-every", type=nonneg_int, help="optimizer steps between checkpoint saves")
    w.add_argument("--load-time-s", type=nonneg_float, help="model load time, s (default weights / disk)")
    w.add_argument("--disk-gbs", type=positive_float, help="disk bandwidth for load and saves, GB/s (default 2)")
    add_vision_args(p)
    c = p.add_argument_group("money and energy")
    c.add_argument("--rate", type=nonneg_float, help="$ per GPU-hour (default: cheapest on-demand price)")
    c.add_argument("--provider", help="take the price from this provider")
    c.add_argument("--prices", help="price file (CSV/YAML) instead of the shipped one")
    c.add_argument("--grid-gco2-kwh", type=nonneg_float, help="grid carbon intensity (default 480 g/kWh)")


def add_vision_args(p: argparse.ArgumentParser) -> None:
    """Vision-language models: images per example, the assumed resolution, frozen or trained tower."""
    vl = p.add_argument_group("vision-language models")
    vl.add_argument("--images-per-example", type=nonneg_int,
                    help="images per training example; their tokens join each sample's sequence (default 0)")
    vl.add_argument("--image-size", type=nonneg_int,
                    help="image side in px for dynamic-resolution towers (Qwen2-VL/2.5-VL; default 448)")
    vl.add_argument("--train-vision-tower", action="store_true", default=None,
                    help="train the vision tower too (default: frozen)")


def add_stage_args(p: argparse.ArgumentParser, lists: bool = False, rollout: bool = True) -> None:
    """Training stage flags (tuneplan.physics.stages, docs/stages.md); `rollout` False leaves out the
    rollout engine and GPUs (the planner enumerates them)."""
    st = p.add_argument_group("stage (preference and RL fine-tuning)")
    st.add_argument("--stage", choices=None if lists else STAGES, default=None,
                    metavar="{" + ",".join(STAGES) + "}",
                    help="sft (default), preference dpo/orpo/kto/simpo/cpo, or RL grpo/ppo/rloo")
    st.add_argument("--precompute-ref", action="store_true", default=None,
                    help="dpo/kto: reference log-probs computed once before training (no reference model)")
    st.add_argument("--group-size", type=positive_int, help="RL: completions per prompt (TRL: grpo 8, rloo 2)")
    st.add_argument("--completion-len", type=positive_int, help="RL: new tokens per completion (TRL: 512); the "
                    "prompt length is --seq-len")
    st.add_argument("--prompts-per-step", type=positive_int,
                    help="RL: prompts per optimizer step (default: micro-batch x grad-accum x GPUs / group size)")
    if rollout:
        st.add_argument("--rollout-engine", choices=("hf", "vllm"), help="RL: HF generate in the training "
                        "process (default) or vLLM")
        st.add_argument("--rollout-gpus", type=nonneg_int, help="RL with vllm: GPUs of --gpus serving vLLM "
                        "(default 0: colocated in the training process)")
    st.add_argument("--reward-model", help="RL: reward model (catalog name / HF id; default: a rule-based reward)")
    st.add_argument("--kl-beta", type=nonneg_float, help="RL: KL coefficient (TRL: grpo 0 = no reference model, "
                    "rloo/ppo 0.05)")
    st.add_argument("--ppo-epochs", type=positive_int, help="PPO: update epochs per batch of rollouts (4)")


JOB_FIELDS = {
    "method": "method", "lora_rank": "lora_rank", "lora_targets": "lora_targets",
    "trainable_layers": "trainable_layers", "precision": "precision", "quant": "quant",
    "peft_option": "peft_options", "trainable_params": "trainable_params",
    "optimizer": "optimizer", "master_weights": "master_weights", "grad_ckpt": "grad_ckpt", "flash_attn": "flash_attn", "moe_mode": "moe_mode",
    "gpus": "gpus", "nodes": "nodes", "sharding": "sharding", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep",
    "micro_batch": "micro_batch", "grad_accum": "grad_accum", "examples": "examples",
    "tokens_per_example": "tokens_per_example", "tokens": "tokens", "epochs": "epochs", "seq_len": "seq_len",
    "packing": "packing", "padding": "padding", "adapter_dtype": "adapter_dtype", "eval_every": "eval_every", "eval_examples": "eval_examples",
    "save_every": "save_every", "load_time_s": "load_time_s", "disk_gbs": "disk_gbs",
    "images_per_example": "images_per_example", "image_size": "image_size",
    "train_vision_tower": "train_vision_tower", "rate": "rate_usd_per_gpu_hour", "grid_gco2_kwh": "grid_gco2_kwh",
    "ckpt_every": "ckpt_every", "act_offload": "act_offload", "offload": "offload", "framework": "framework",
    "fused_ce": "fused_ce", "sequence_parallel": "sequence_parallel", "cp_mode": "cp_mode", "vpp": "vpp",
    "stage": "stage", "precompute_ref": "precompute_ref", "group_size": "group_size",
    "completion_len": "completion_len", "prompts_per_step": "prompts_per_step",
    "rollout_engine": "rollout_engine", "rollout_gpus": "rollout_gpus", "reward_model": "reward_model",
    "kl_beta": "kl_beta", "ppo_epochs": "ppo_epochs",
}


def job_kwargs(args: argparse.Namespace) -> dict:
    out = {}
    for attr, fld in JOB_FIELDS.items():
        v = getattr(args, attr, None)
        if v is not None:
            out[fld] = v
    return out
