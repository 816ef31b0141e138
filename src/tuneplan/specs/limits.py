"""Bounds on every size tuneplan reads: what is physically meaningful for a fine-tuning run, with a wide
margin above the largest published figure. A value beyond a bound is refused with an InputError naming
the field and the bound (never a minutes-long computation, an overflow, or a NaN figure), and the
configurations that cannot run (tensor parallelism over more heads than the model has, ...) are refused
naming the constraint; the legal but odd ones are warned about.

Each bound: a name, a unit, and the largest figure it leaves headroom over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from tuneplan.errors import InputError

MAX_LAYERS = 10_000
"""Transformer blocks: Llama-3.1-405B has 126, the deepest published decoders a few hundred."""
MAX_HIDDEN = 1_000_000
"""Hidden width: Llama-3.1-405B 16,384, Nemotron-4-340B 18,432."""
MAX_INTERMEDIATE = 10_000_000
"""MLP width: Llama-3.1-405B 53,248."""
MAX_HEADS = 100_000
"""Attention (or key-value) heads: the largest published models have 128-256."""
MAX_VOCAB = 100_000_000
"""Vocabulary entries: Gemma-3 has 262,144."""
MAX_EXPERTS = 1_000_000
"""MoE experts per layer: DeepSeek-V3 has 256 routed experts."""
MAX_POSITIONS = 1_000_000_000
"""Context window (tokens): the longest published windows are 10 million."""
MAX_SEQ_LEN = 100_000_000
"""Tokens per sample: 10x the longest published context window (10M)."""
MAX_MICRO_BATCH = 1_000_000
"""Samples per GPU per micro-step: no GPU holds a million sequences of a transformer's activations."""
MAX_GPUS = 10_000_000
"""GPUs in one job: the largest clusters are ~10^5-10^6 GPUs."""
MAX_PARALLEL_DEGREE = 1_000_000
"""Tensor, pipeline, context or expert parallel degree."""
MAX_GRAD_ACCUM = 100_000_000
"""Gradient-accumulation steps per optimizer step."""
MAX_LORA_RANK = 1_000_000
"""LoRA rank: at most the hidden width (MAX_HIDDEN)."""
MAX_EXAMPLES = 1e15
"""Training examples per epoch: 100x the largest published corpora counted in documents."""
MAX_TOKENS = 1e18
"""Tokens per epoch: ~10^4 x the largest pre-training corpora (~10^14 tokens)."""
MAX_EPOCHS = 1e6
"""Passes over the data."""
MAX_STEPS_BETWEEN = 10**15
"""eval_every / save_every / eval_examples: counts, bounded so their products stay finite."""
MAX_SECONDS = 1e12
"""Any duration given in seconds (load time): ~30,000 years."""
MAX_RATE_USD_PER_GPU_HOUR = 1e6
"""$ per GPU-hour: on-demand prices are $0.1-$100."""
MAX_GRID_GCO2_KWH = 1e5
"""Grid carbon intensity, g/kWh: coal is ~1,000."""
MAX_DISK_GBS = 1e6
"""Disk bandwidth, GB/s: an NVMe array gives tens."""
MAX_IMAGE_SIDE = 1_000_000
"""Image side in pixels (vision-language towers resize to ~10^3)."""
MAX_RL_COUNT = 1_000_000
"""RL counts: completions per prompt, prompts per step, PPO epochs (TRL's defaults are 2-64)."""
MAX_KL_BETA = 1e6
"""KL coefficient of RL fine-tuning (TRL's defaults are 0-0.05)."""
MAX_TFLOPS = 1e7
"""Peak TFLOP/s of one device: an H200 gives ~2,000 (fp8 dense)."""
MAX_MEMORY_GIB = 1e7
"""Memory of one device, GiB: today's largest hold ~300."""
MAX_BANDWIDTH_GBS = 1e8
"""Memory bandwidth of one device, GB/s: today's fastest ~8,000."""
MAX_TDP_W = 1e6
"""Power of one device, W: today's largest ~1,500."""
MAX_NAME_CHARS = 1024
"""Characters in a model or GPU name or path: a Hub id is at most 96, a typical path under 300."""
MAX_CONFIG_FILE_BYTES = 16 * 1024 * 1024
"""Bytes of a config.json or GPU file read: the largest published config.json files are ~100 kB."""

JOB_BOUNDS: dict[str, float] = {
    "gpus": MAX_GPUS, "nodes": MAX_GPUS, "tp": MAX_PARALLEL_DEGREE, "pp": MAX_PARALLEL_DEGREE,
    "cp": MAX_PARALLEL_DEGREE, "ep": MAX_PARALLEL_DEGREE, "etp": MAX_PARALLEL_DEGREE, "micro_batch": MAX_MICRO_BATCH,
    "eval_batch_size": MAX_MICRO_BATCH,
    "grad_accum": MAX_GRAD_ACCUM, "lora_rank": MAX_LORA_RANK, "galore_rank": MAX_LORA_RANK, "trainable_layers": MAX_LAYERS,
    "seq_len": MAX_SEQ_LEN, "examples": MAX_EXAMPLES, "tokens_per_example": MAX_SEQ_LEN, "tokens": MAX_TOKENS,
    "epochs": MAX_EPOCHS, "eval_every": MAX_STEPS_BETWEEN, "eval_examples": MAX_STEPS_BETWEEN,
    "save_every": MAX_STEPS_BETWEEN, "load_time_s": MAX_SECONDS, "disk_gbs": MAX_DISK_GBS,
    "rate_usd_per_gpu_hour": MAX_RATE_USD_PER_GPU_HOUR, "grid_gco2_kwh": MAX_GRID_GCO2_KWH,
    "ckpt_every": MAX_LAYERS, "act_offload_layers": MAX_LAYERS, "vpp": MAX_LAYERS, "trainable_params": MAX_TOKENS,
    "images_per_example": MAX_MICRO_BATCH, "image_size": MAX_IMAGE_SIDE, "rollout_gpus": MAX_GPUS,
    "group_size": MAX_RL_COUNT, "prompts_per_step": MAX_RL_COUNT, "ppo_epochs": MAX_RL_COUNT,
    "completion_len": MAX_SEQ_LEN, "kl_beta": MAX_KL_BETA, "completion_len_max": MAX_SEQ_LEN,
    "rollout_tp": MAX_GPUS, "train_steps_per_rollout": MAX_RL_COUNT, "rollout_pp": MAX_GPUS,
    "gpu_memory_utilization": 1.0, "off_policy_steps": MAX_RL_COUNT, "critic_gpus": MAX_GPUS, "ref_gpus": MAX_GPUS,
    "reward_gpus": MAX_GPUS, "max_num_seqs": MAX_RL_COUNT,
}
"""Upper bound of each JobSpec field (field name -> largest value accepted)."""

CONFIG_BOUNDS: dict[str, float] = {
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "n_embed", "dim", "model_dim", "d_kv", "head_dim",
                     "kv_lora_rank", "q_lora_rank", "moe_intermediate_size", "shared_expert_intermediate_size"),
                    MAX_HIDDEN),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers",
                     "first_k_dense_replace"), MAX_LAYERS),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "n_heads", "num_key_value_heads",
                     "num_kv_heads", "n_head_kv", "num_query_groups", "kv_n_heads"), MAX_HEADS),
    **dict.fromkeys(("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", "d_ff"), MAX_INTERMEDIATE),
    **dict.fromkeys(("vocab_size", "padded_vocab_size", "n_vocab"), MAX_VOCAB),
    **dict.fromkeys(("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts",
                     "num_experts_per_tok", "n_shared_experts", "moe_topk"), MAX_EXPERTS),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                     "max_sequence_length", "sliding_window"), MAX_POSITIONS),
}
"""Upper bound of each size key of a config.json (nested text/vision configs are checked too)."""

MAX_CONFIG_DEPTH = 8
"""Nesting levels of a config.json that are checked (text_config, vision_config, ...)."""
MAX_CONFIG_LIST = 100_000
"""Entries of a list in a config.json (layer_types and the like have one per layer)."""


MAX_INT_DIGITS = 30
"""Digits of an integer given on the command line or in a request: every bound here has at most 19;
longer ones are refused before int() (which is quadratic in the digits) or a float conversion (which
overflows beyond 309 digits)."""


def shown_number(value: Any) -> str:
    """A number for a message: `:g`, or an integer too large for a float as its digit count."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**300:
        return f"{'a negative' if value < 0 else 'an'} integer of {len(str(abs(value))):,} digits"
    return f"{value:g}"


def bound_number(field: str, value: Any, upper: float, lower: float = 0.0) -> Any:
    """`value` if it is a finite number in [lower, upper], else InputError naming the field and the bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(field, f"must be a finite number (got {value})")
    if value > upper:
        raise InputError(field, f"{shown_number(value)} is beyond any physical fine-tuning run "
                                f"(at most {upper:,.0f})")
    if value < lower:
        raise InputError(field, f"must be >= {lower:g} (got {shown_number(value)})")
    return value


def bound_job_field(field: str, value: Any) -> Any:
    """A JobSpec field checked against JOB_BOUNDS (None and unbounded fields pass)."""
    upper = JOB_BOUNDS.get(field)
    if value is None or upper is None:
        return value
    return bound_number(field.replace("_", "-"), value, upper)


def check_name(field: str, name: Any) -> None:
    """Names and paths of at most MAX_NAME_CHARS characters."""
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        raise InputError(field, f"name of {len(name):,} characters (at most {MAX_NAME_CHARS}): "
                                f"'{name[:40]}...'")


def check_config_sizes(config: Mapping[str, Any], where: str = "config", depth: int = 0) -> None:
    """Refuse a config.json whose sizes are not finite, negative or beyond CONFIG_BOUNDS, before any
    counting (a config with 10^9 layers would otherwise take minutes and gigabytes)."""
    if depth > MAX_CONFIG_DEPTH:
        raise InputError(where, f"nested more than {MAX_CONFIG_DEPTH} levels deep")
    for key, value in config.items():
        field = key if depth == 0 else f"{where}.{key}"
        if isinstance(value, Mapping):
            check_config_sizes(value, field, depth + 1)
        elif isinstance(value, (list, tuple)):
            if len(value) > MAX_CONFIG_LIST:
                raise InputError(field, f"a list of {len(value):,} entries (at most {MAX_CONFIG_LIST:,})")
        elif isinstance(value, float) and not math.isfinite(value):
            raise InputError(field, f"must be a finite number (got {value})")
        elif key in CONFIG_BOUNDS and isinstance(value, (int, float)) and not isinstance(value, bool):
            bound_number(field, value, CONFIG_BOUNDS[key])


def check_job_for_model(model: Any, job: Any, seq_len: int | None, known_targets: Iterable[str]) -> list[str]:
    """Refuse a job the model cannot run (InputError naming the constraint); return warnings for the
    legal but odd ones. `model` is a ModelSpec, `job` a JobSpec."""
    heads = int(getattr(model, "n_heads", 0) or 0)
    kv = int(getattr(model, "n_kv_heads", 0) or 0)
    layers = int(getattr(model, "n_layers", 0) or 0)
    warnings: list[str] = []
    if heads and job.tp > heads:
        raise InputError("tp", f"tensor parallelism splits attention heads: tp {job.tp} is more than "
                               f"{getattr(model, 'name', 'the model')}'s {heads} heads")
    if heads and job.tp > 1 and heads % job.tp:
        warnings.append(f"tp {job.tp} does not divide the {heads} attention heads: Megatron and most frameworks "
                        "refuse it (the estimate splits the work evenly)")
    elif kv and job.tp > kv:
        warnings.append(f"tp {job.tp} is more than the {kv} key-value heads: they are replicated on each rank")
    if layers and job.pp > layers:
        raise InputError("pp", f"pipeline parallelism splits layers: pp {job.pp} is more than the model's "
                               f"{layers} layers")
    experts = int(getattr(model, "n_experts", 0) or 0)
    if job.ep > max(experts, 1):  # Megatron-Core needs num_moe_experts divisible by expert_model_parallel_size
        name = getattr(model, "name", "the model")
        raise InputError("ep", "expert parallelism splits the experts: " + (
            f"ep {job.ep} is more than {name}'s {experts} experts" if experts else
            f"{name} is a dense model (no experts): --ep 1"))
    if job.act_offload_layers and (job.pp > 1 or job.grad_ckpt):  # megatron-core 0.14 transformer_config.py refuses all three
        raise InputError("act-offload-layers", "Megatron-Core offloads activations only without pipeline "
                                               "parallelism and without recompute (--pp 1, no --grad-ckpt)")
    if layers and job.act_offload_layers >= layers:
        raise InputError("act-offload-layers", f"{job.act_offload_layers} layers offloaded, but "
                                               f"{getattr(model, 'name', 'the model')} has {layers}: at most "
                                               f"{layers - 1} (Megatron-Core keeps one on the GPU)")
    if seq_len and job.cp > seq_len:
        raise InputError("cp", f"context parallelism splits the sequence: cp {job.cp} is more than "
                               f"seq-len {seq_len} tokens")
    if layers and job.method == "freeze" and job.trainable_layers > layers:
        raise InputError("trainable-layers", f"{job.trainable_layers} is more than the model's {layers} layers "
                                             "(use --method full to train every layer)")
    known_targets = list(known_targets)
    unknown = [t for t in job.lora_targets if t not in ("all-linear", "all", *known_targets)]
    if unknown and job.method in ("lora", "qlora", "gptq-lora", "alora", "dora"):
        raise InputError("lora-targets", f"unknown module(s) {', '.join(repr(t) for t in unknown)}",
                         ["all-linear", *known_targets])
    if job.tokens is not None and job.examples is not None:
        raise InputError("tokens", "give --tokens (tokens per epoch) or --examples (with --tokens-per-example), "
                                   "not both: one would be ignored")
    return warnings


def check_grad_accum_vs_data(samples_per_epoch: float, global_batch: int) -> list[str]:
    """A warning when one optimizer step needs more samples than an epoch holds."""
    if samples_per_epoch and global_batch > samples_per_epoch:
        return [f"one optimizer step takes {global_batch:,} samples (micro-batch x grad-accum x data-parallel) "
                f"but an epoch holds {samples_per_epoch:,.0f}: the epoch is a single partial step"]
    return []


GPU_BOUNDS: dict[str, float] = {
    "memory_gib": MAX_MEMORY_GIB, "memory_bandwidth_gbs": MAX_BANDWIDTH_GBS, "tdp_w": MAX_TDP_W,
    "intra_node_gbs": MAX_BANDWIDTH_GBS, "inter_node_gbps": MAX_BANDWIDTH_GBS * 8, "matmul_efficiency": 1.0,
    "host_link_gbs": MAX_BANDWIDTH_GBS,
}
"""Upper bound of each numeric field of a GPU entry (peak_tflops: MAX_TFLOPS per precision)."""


def _gpu_number(field: str, value: Any, upper: float) -> None:
    if value is None or value == "":
        return
    if isinstance(value, bool):
        raise InputError(field, f"must be a number (got {value})")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InputError(field, f"must be a number (got '{str(value)[:40]}')") from None
    bound_number(field, x, upper)


def check_gpu_figures(d: Mapping[str, Any]) -> None:
    """A user's GPU entry: every figure a finite number in [0, bound] (a negative TDP would give
    negative energy, a NaN bandwidth NaN step times)."""
    for key, upper in GPU_BOUNDS.items():
        _gpu_number(key, d.get(key), upper)
    peaks = d.get("peak_tflops")
    if isinstance(peaks, Mapping):
        for k, v in peaks.items():
            _gpu_number(f"peak_tflops.{k}", v, MAX_TFLOPS)
    elif peaks is not None and not isinstance(peaks, (list, tuple)):
        _gpu_number("peak_tflops", peaks, MAX_TFLOPS)


MAX_PROFILE_STEPS = 100_000
"""Timed or warm-up optimizer steps per profiled configuration: 8 and 2 by default; 10^5 steps of a
small model already take hours on a CPU."""
MAX_PROFILE_PROCESSES = 4096
"""Data-parallel processes (--nproc) of one profiled configuration on one machine."""
MAX_GROUP_SIZE = 65_536
"""GRPO completions per prompt (TRL's default 8)."""
MAX_SEED = 2**32 - 1
"""Random seeds: numpy's generators take 32-bit seeds."""
MAX_REVEAL_ROWS = 10**9
"""Rows of a held-out source revealed to a fit (`validate --reveal`)."""

MAX_CURVE_POINTS = 8_192
"""Micro-batches one `curve` sweeps (1..N): more points than any plot shows (the default sweep stops at
1,024). Each point is a JSON record and a plotted marker: 65,536 of them took > 30 s to print."""
MAX_GLOBAL_BATCH = 10**12
"""Samples per optimizer step: MAX_MICRO_BATCH x the largest data-parallel groups."""


def check_space_bounds(space: Any) -> None:
    """A planner's search axes (gpu_counts, micro_batches, grad_accums, global_batch, gpus_per_node)."""
    for field, values, upper in (("gpu-counts", space.gpu_counts, MAX_GPUS),
                                 ("micro-batches", space.micro_batches, MAX_MICRO_BATCH),
                                 ("grad-accums", space.grad_accums or (), MAX_GRAD_ACCUM)):
        for v in values:
            bound_number(field, v, upper)
    if space.global_batch is not None:
        bound_number("global-batch", space.global_batch, MAX_GLOBAL_BATCH)
    bound_number("gpus-per-node", space.gpus_per_node, MAX_GPUS)


MAX_PARAMS = 1e15
"""Model parameters: ~1,000x the largest published dense models (~10^12)."""
MAX_FLOPS_PER_PARAM_TOKEN = 100.0
"""FLOPs per parameter per token: 6 for full fine-tuning, 8 with recomputation."""
MAX_BYTES_PER_PARAM = 100.0
"""Bytes per parameter: 16 for mixed-precision Adam, ~20 with fp32 gradients."""


def check_planner_inputs(args: Any) -> None:
    """The Run Planner seed's flags (an argparse namespace): MFU in (0, 1], every size bounded."""
    mfu = args.mfu
    if mfu is not None and not (isinstance(mfu, (int, float)) and math.isfinite(mfu) and 0 < mfu <= 1):
        raise InputError("mfu", f"must be in (0, 1] (got {mfu})")
    bound_number("params", args.params, MAX_PARAMS)
    for name, upper in (("flops_per_param_token", MAX_FLOPS_PER_PARAM_TOKEN),
                        ("bytes_per_param", MAX_BYTES_PER_PARAM), ("peak_tflops", MAX_TFLOPS),
                        ("memory_gib", MAX_MEMORY_GIB)):
        bound_number(name.replace("_", "-"), getattr(args, name, None), upper)  # None passes
    for name in ("examples", "tokens_per_example", "tokens", "epochs", "gpus", "rate"):
        bound_job_field("rate_usd_per_gpu_hour" if name == "rate" else name, getattr(args, name, None))


def check_finite_figures(result: Mapping[str, Any], what: str = "estimate") -> None:
    """InputError naming (by dotted path, at most 5) the figures of a nested result that are NaN or infinite:
    the inputs are beyond what the model can compute, and a figure like that must never be printed as an answer."""
    bad: list[str] = []

    def walk(x: Any, where: str) -> None:
        if len(bad) >= 5:
            return
        if isinstance(x, Mapping):
            for k, v in x.items():
                walk(v, f"{where}.{k}" if where else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{where}[{i}]")
        elif isinstance(x, float) and not math.isfinite(x):
            bad.append(where or "value")
        elif hasattr(x, "dtype") and hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
            walk(x.item(), where)

    walk(result, "")
    if bad:
        raise InputError("job", f"the {what} has non-finite figures ({', '.join(bad)}): the inputs are beyond "
                                "what can be computed; check the sizes given")
