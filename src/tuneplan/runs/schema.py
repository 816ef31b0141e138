"""Columns of a runs file: the reference schema, the LLMFineTuningBench schema and what `read_runs` adds.

The reference schema is `shared/reference/SCHEMA.md` (one row per measured configuration). The
profiler writes the reference columns plus a few of its own (`status`, `peak_mem_reserved_gib`,
`layers`, ...), which pass through untouched. LLMFineTuningBench (IBM's fms-hf-tuning benchmark) rows
are mapped onto the reference columns by `tuneplan.runs.normalise.map_llmftbench`.
"""

from __future__ import annotations

REFERENCE_COLUMNS: tuple[str, ...] = (
    "id", "source", "source_ref", "model", "model_hf_id", "params_b", "active_params_b", "method",
    "lora_rank", "lora_targets", "precision", "quant", "optimizer", "grad_ckpt", "flash_attn",
    "framework", "sharding", "gpu", "gpus", "nodes", "micro_batch_size", "grad_accum",
    "global_batch_size", "seq_len", "avg_tokens_per_sample", "dataset", "tokens_per_s",
    "tokens_per_s_per_gpu", "samples_per_s", "step_time_s", "runtime_s", "train_tokens_total",
    "epochs", "peak_mem_gib", "mem_kind", "mfu", "notes",
)
"""Every column of the reference schema, in the order of SCHEMA.md."""

NUMERIC_COLUMNS: tuple[str, ...] = (
    "params_b", "active_params_b", "lora_rank", "grad_ckpt", "flash_attn", "gpus", "nodes",
    "micro_batch_size", "grad_accum", "global_batch_size", "seq_len", "avg_tokens_per_sample",
    "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "step_time_s", "runtime_s",
    "train_tokens_total", "epochs", "peak_mem_gib", "mfu",
)
"""Reference columns that hold numbers (typed as float in `RunTable.df`, NaN when empty)."""

EXTRA_NUMERIC_COLUMNS: tuple[str, ...] = ("peak_mem_reserved_gib", "peak_mem_allocated_gib", "longest_batch_tokens")
"""Profiler columns checked as numbers when present (other extra columns pass through as text, and
are typed as numbers in the table only when every value is one)."""

FLAG_COLUMNS: tuple[str, ...] = ("grad_ckpt", "flash_attn", "fused_ce", "fp32_grads")
"""0/1 columns; `true`/`false`/`yes`/`no` are accepted and stored as 1/0 (any other value is the row's error)."""

THROUGHPUT_COLUMNS: tuple[str, ...] = (
    "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "step_time_s", "runtime_s",
)
"""Columns that carry a speed figure: each must be > 0 when given."""

POSITIVE_COLUMNS: tuple[str, ...] = THROUGHPUT_COLUMNS + (
    "params_b", "active_params_b", "lora_rank", "gpus", "nodes", "micro_batch_size", "grad_accum",
    "global_batch_size", "seq_len", "avg_tokens_per_sample", "train_tokens_total", "epochs",
    "peak_mem_gib", "mfu",
)
"""Columns whose values must be > 0 when given."""

SETTING_COLUMNS: tuple[str, ...] = ("padding", "adapter_dtype", "stage", "peft_options", "trainable_params",
                                    "optimizer_impl", "grad_accum_sync", "fsdp_adapter_wrap",
                                    "galore_rank", "fused_ce", "fp32_grads", "act_offload_layers", "ms-swift_version")
"""Settings tuneplan reads beyond the reference schema (each described in docs/runs.md), kept in every
table (empty when not given: the source's or the framework's default)."""

ADDED_COLUMNS: tuple[str, ...] = (
    "file", "line", "model_resolved", "gpu_resolved", "status", "is_oom", "fits", "is_duplicate",
    "is_estimate", "usable_throughput", "usable_memory", "defaults_used", "caveats",
)
"""Columns `read_runs` adds after the reference columns (documented in docs/runs.md)."""

BOOL_ADDED = ("is_oom", "is_duplicate", "is_estimate", "usable_throughput", "usable_memory")

MEASUREMENT_COLUMNS: tuple[str, ...] = THROUGHPUT_COLUMNS + ("peak_mem_gib",)
OUTCOME_COLUMNS: tuple[str, ...] = ("status", "notes", "is_valid")
"""Columns that can carry an OOM mark (a file needs a measurement or one of these)."""


# --- LLMFineTuningBench -------------------------------------------------------------------------

LLMFTBENCH_MARKERS = ("model_name", "gpu_model", "number_gpus", "dataset_tokens_per_second",
                      "is_valid", "gpu_memory_utilization_peak")
"""Header names that identify an LLMFineTuningBench file (needs `model_name` and one more)."""

LLMFTBENCH_RENAMES: dict[str, str] = {
    "model_name": "model", "gpu_model": "gpu", "number_gpus": "gpus", "number_nodes": "nodes",
    "tokens_per_sample": "seq_len", "dataset_tokens_per_second": "tokens_per_s",
    "dataset_tokens_per_second_per_gpu": "tokens_per_s_per_gpu", "train_runtime": "runtime_s",
    "train_samples_per_second": "samples_per_s", "gradient_accumulation_steps": "grad_accum",
    "r": "lora_rank", "lora_r": "lora_rank", "target_modules": "lora_targets", "lora_target_modules": "lora_targets",
    "dataset_id": "dataset", "identifier": "id",
}
"""LLMFineTuningBench column -> reference column, copied as is (units already match)."""

TORCH_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
                "float32": "fp32", "fp32": "fp32", "float": "fp32"}


def detect_schema(header: list[str]) -> str:
    """`llmftbench` when the header has `model_name` plus another LLMFineTuningBench column and no
    reference `model` column; `reference` otherwise (its required columns are checked later)."""
    cols = set(header)
    if "model_name" in cols and "model" not in cols and len(cols & set(LLMFTBENCH_MARKERS)) >= 2:
        return "llmftbench"
    return "reference"


def missing_required(columns: set[str]) -> list[str]:
    """What a file (after mapping onto reference names) lacks to be read at all."""
    missing = []
    if not columns & {"model", "model_hf_id"}:
        missing.append("model (or model_hf_id / model_name)")
    if "gpu" not in columns:
        missing.append("gpu (or gpu_model)")
    if not columns & (set(MEASUREMENT_COLUMNS) | set(OUTCOME_COLUMNS) | {"peak_mem_reserved_gib"}):
        missing.append("a measurement (one of " + ", ".join(MEASUREMENT_COLUMNS) + ") or an outcome "
                       "column (status / notes / is_valid)")
    return missing
