"""From measured run rows (reference schema) to (model, GPU, job, seq_len) configurations.

Every setting a row leaves empty takes a documented default, and the defaults used are recorded per
row; a row that cannot be turned into a configuration gets its reason instead (never dropped
silently)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneplan.errors import InputError, TuneplanError
from tuneplan.specs.framework import (
    FSDP_ADAPTER_WRAPS,
    GRAD_ACCUM_SYNCS,
    MOE_EXPERT_LAYOUTS,
    OPTIMIZER_IMPLS,
    framework_for_text,
    framework_names,
    get_framework,
)
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import (
    ADAPTER_DTYPES,
    GPUS_PER_SERVER,
    LORA_FAMILY,
    PADDINGS,
    JobSpec,
    read_stage,
    servers,
)
from tuneplan.specs.model import ModelSpec
from tuneplan.specs.peft import DEFAULT_GENERIC_ADAPTER_RANK, LORA_EQUIVALENT, PEFT_METHOD_NAMES

METHOD_MAP = {"pretrain": "full", **{m: m for m in ("full", "lora", "qlora", "gptq-lora", "dora", "freeze", "alora",
                                                    "other", *PEFT_METHOD_NAMES)}}
LORA_LIKE = LORA_FAMILY + tuple(LORA_EQUIVALENT) + ("adalora", "lora-fa")
"""Methods whose rank and targets take LoRA's row defaults (peft's r = 8 on q, v)."""
PRECISION_MAP = {"bf16": "bf16", "amp-bf16": "bf16", "fp16": "fp16", "amp-fp16": "fp16", "fp32": "fp32",
                 "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4", "fp4": "nvfp4"}
QUANT_MAP = {"none": "none", "nf4": "nf4", "nf4-dq": "nf4", "gptq-int4": "gptq-int4", "gptq-int8": "gptq-int8",
             "int8": "int8", "awq-int4": "awq-int4", "int4": "gptq-int4", "fp8": "fp8",
             "aqlm-2bit-1x16": "aqlm-2bit", "aqlm-2bit": "aqlm-2bit"}
LORA_OVER_QUANT = {"nf4": "qlora", **dict.fromkeys(("gptq-int4", "gptq-int8", "awq-int4", "int8", "aqlm-2bit"), "gptq-lora")}
"""A `lora` row over a quantised base, by the base's quantisation: QLoRA (NF4) or GPTQ-LoRA."""
OPTIMIZER_MAP = {"adamw": "adamw", "paged-adamw-32bit": "adamw", "galore-adamw": "galore-adamw",
                 "q-galore-adamw": "adamw-8bit", "lora-fa": "adamw", "adamw-8bit": "adamw-8bit",
                 "paged-adamw-8bit": "paged-adamw-8bit", "adamw-4bit": "adamw-4bit", "sgd": "sgd", "adafactor": "adafactor",
                 "lion": "sgd-momentum"}
DEFAULTS = {
    "precision": ("bf16", "bf16 mixed precision, the common fine-tuning default on these GPUs"),
    "optimizer": ("adamw", "AdamW, the default of HF Trainer and the frameworks in the reference"),
    "micro_batch_size": (1, "1 sample per GPU when neither micro nor global batch is given"),
    "grad_accum": (1, "no gradient accumulation when not stated"),
    "grad_ckpt": (0, "checkpointing off unless stated (HF Trainer default) or the framework's default"),
    "flash_attn": (1, "FlashAttention/SDPA on unless stated (PyTorch >= 2 default SDPA)"),
    "lora_rank": (8, "peft's default r = 8"),
    "lora_targets": ("q,v", "peft's default targets for Llama-style models: q_proj, v_proj"),
    "gpus": (1, "one GPU"),
    "nodes": (1, "one node"),
}


@dataclass
class RowConfig:
    """A measured row as specs: the model, GPU and job it ran, its sequence length, the defaults
    filled in for what the row did not say, and what its peak memory measures."""

    model: ModelSpec
    gpu: GPUSpec
    job: JobSpec
    seq_len: int
    defaults_used: list[str] = field(default_factory=list)
    mem_kind: str = ""  # what the row's peak memory measures (allocated, reserved, nvidia-smi; "" unknown)


def _get(row: dict, key: str) -> Any:
    """The row's cell, None when missing, NaN or blank."""
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
        return None
    return v


def parse_sharding(text: str | None) -> dict[str, Any]:
    """'ddp+tp4+pp8+cp2' (ep, etp alike), 'fsdp-full+cpu-offload' (or '+offload'), 'zero3+sp8', 'tp8+optim-offload'
    (Megatron's optimizer_cpu_offload: master weights and moments on the host) -> JobSpec fields."""
    out: dict[str, Any] = {"sharding": "ddp"}
    if not text:
        return out
    parts = [p.strip().lower() for p in str(text).split("+") if p.strip()]
    offload = "cpu-offload" in parts or "offload" in parts
    for p in parts:
        if m := re.fullmatch(r"(tp|pp|cp|ep|etp|sp)(\d+)", p):
            kind, n = m.group(1), int(m.group(2))
            out["cp" if kind == "sp" else kind] = n
            if kind == "sp":  # 'sp' in the reference rows: DeepSpeed-Ulysses sequence parallel (xtuner)
                out["cp_mode"] = "ulysses"
        elif p in ("fsdp-full", "fsdp"):
            out["sharding"] = "fsdp-offload" if offload else "fsdp"
        elif p in ("fsdp-grad-op", "fsdp-hybrid", "zero1", "zero2", "zero3", "zero3-offload", "ddp", "none"):
            out["sharding"] = p
        elif p == "optim-offload":
            out["offload"] = "optimizer"
        elif p not in ("cpu-offload", "offload"):  # read with fsdp above
            raise InputError("sharding", f"cannot read '{p}' in '{text}'")
    return out


def truncated(model: ModelSpec, layers: int, name_or_path: str) -> ModelSpec:
    """The same architecture with `layers` blocks (a profiler row measured with --layers N)."""
    from tuneplan.specs.architectures import model_from_config
    from tuneplan.specs.catalog import load_model_config

    if layers < 1:
        raise InputError("layers", f"must be >= 1, got {layers}")
    cfg = dict(load_model_config(name_or_path or model.name))
    keys = [k for k in ("num_hidden_layers", "n_layer", "n_layers", "num_layers") if k in cfg] or ["num_hidden_layers"]
    for k in keys:
        cfg[k] = layers
    return model_from_config(cfg, f"{model.name} ({layers} layers)", source=model.source)


def _memo(cache: dict | None, key: tuple, fn, *args):
    """fn(*args), remembered in `cache` under `key` (errors too: a name fails once per table)."""
    if cache is None:
        return fn(*args)
    if key not in cache:
        try:
            cache[key] = fn(*args)
        except TuneplanError as exc:
            cache[key] = exc
    got = cache[key]
    if isinstance(got, TuneplanError):
        raise got.with_traceback(None)  # the same error again, not a growing chain of tracebacks
    return got


class _Defaults(list):
    """The defaults a row took, in the order they were taken (`RowConfig.defaults_used`)."""

    def take(self, key: str):
        v, why = DEFAULTS[key]
        self.append(f"{key}={v} ({why})")
        return v

    def take_framework(self, key: str, fw: Any):
        """The framework's own default for `key` (data/frameworks.yaml `grad_ckpt`, `micro_batch`)
        when its entry states one, else the row default of `DEFAULTS`."""
        v = fw.job_defaults().get(key)
        if v is None:
            return self.take(key)
        self.append(f"{key}={int(v)} (framework {fw.name}'s default: {fw.sources.get(key, '')})")
        return v


def _row_model_gpu(row: dict, cache: dict | None, used: _Defaults) -> tuple[ModelSpec, GPUSpec]:
    """The row's model (truncated to a profiled --layers N) and GPU, each distinct name resolved once."""
    from tuneplan.specs.catalog import resolve_run_model
    from tuneplan.specs.gpu import resolve_gpu

    seq_cell = _get(row, "seq_len")
    m_args = (str(_get(row, "model") or ""), str(_get(row, "model_hf_id") or ""), str(_get(row, "notes") or ""),
              float(seq_cell) if seq_cell is not None else None)
    stored = str(_get(row, "model_config_json") or "")
    try:  # by its names (one ModelSpec per distinct name); the notes only when the catalog has none
        if stored:  # the config of the model that ran (TuneplanCallback, tuneplan profile), whatever its name
            model = _memo(cache, ("model-config", m_args[0], stored), resolve_run_model, m_args[0], m_args[1],
                          "", None, stored)
        else:
            model = _memo(cache, ("model", *m_args[:2]), resolve_run_model, *m_args[:2])
    except InputError:
        if not m_args[2]:
            raise
        model = _memo(cache, ("model", *m_args), resolve_run_model, *m_args)
    layers = _get(row, "layers")
    if layers is not None and int(float(layers)) != model.n_layers:
        where = str(_get(row, "model_hf_id") or _get(row, "model") or "")
        model = _memo(cache, ("truncated", id(model), int(float(layers)), where), truncated, model,
                      int(float(layers)), where)
        used.append(f"layers={int(float(layers))} (the profiled model was truncated)")
    gpu_name = str(_get(row, "gpu_resolved") or _get(row, "gpu") or "")
    return model, _memo(cache, ("gpu", gpu_name), resolve_gpu, gpu_name)


def _row_method(row: dict, used: _Defaults) -> str:
    """The method the row names (`other`: the one its notes name, or a generic adapter)."""
    method_raw = str(_get(row, "method") or "").lower()
    if method_raw not in METHOD_MAP:
        raise InputError("method", f"'{method_raw or '(empty)'}' is not a method tuneplan models",
                         sorted(METHOD_MAP))
    method = METHOD_MAP[method_raw]
    if method == "other":  # not normalised by read_runs: the method the notes name (runs/methods.py)
        from tuneplan.runs.methods import named_method

        method = named_method(str(_get(row, "notes") or "")) or "adapter"
        used.append(f"method={method} (method other; {'named in the notes' if method != 'adapter' else 'generic adapter'})")
    return method


def _mapped(row: dict, column: str, table: dict[str, str]) -> str | None:
    """The row's cell read through `table` (None when empty; InputError naming the column when not in it)."""
    if (raw := _get(row, column)) is not None and str(raw).lower() not in table:
        raise InputError(column, f"'{raw}' not modelled", sorted(table))
    return None if raw is None else table[str(raw).lower()]


def _choice(row: dict, column: str, allowed: tuple[str, ...], default: str, what: str = "value") -> str:
    """The row's cell in lower case, one of `allowed` (InputError naming the column otherwise); `default`
    when empty."""
    if (given := _get(row, column)) is None:
        return default
    if (v := str(given).strip().lower()) not in allowed:
        raise InputError(column, f"unknown {what} '{v}'", allowed)
    return v


def _row_precision_quant(row: dict, method: str, used: _Defaults) -> tuple[str, str | None, str]:
    """(precision, base quantisation or None, method): LoRA over a quantised base is QLoRA / GPTQ-LoRA."""
    precision = _mapped(row, "precision", PRECISION_MAP) or used.take("precision")
    if str(_get(row, "precision")).lower() == "fp4":
        used.append("precision=nvfp4 (fp4 taken as NVIDIA's NVFP4 recipe)")
    quant = _mapped(row, "quant", QUANT_MAP)
    return precision, None if method == "full" else quant, LORA_OVER_QUANT.get(quant, method) if method == "lora" else method


def _row_gpus(row: dict, shard: dict[str, Any], used: _Defaults) -> tuple[int, int, int]:
    """(gpus, nodes, data-parallel degree)."""
    gpus = int(float(_get(row, "gpus") or used.take("gpus")))
    nodes_cell = _get(row, "nodes")
    if nodes_cell is None and gpus > GPUS_PER_SERVER:
        nodes = servers(gpus)
        used.append(f"nodes={nodes} ({GPUS_PER_SERVER} GPUs per node, the HGX/DGX server and the clouds' "
                    "8-GPU instances; an NVL72 part's NVLink domain spans them)")
    else:
        nodes = int(float(nodes_cell or used.take("nodes")))
    model_par = shard.get("tp", 1) * shard.get("pp", 1) * shard.get("cp", 1)
    return gpus, nodes, max(1, gpus // model_par)


PIPELINE_MICRO_BATCH = 1
"""Micro-batch of a pipelined row that states only its global batch: Megatron pipelines take the step's
samples as global / (micro x dp) micro-batches (megatron-core num_microbatches_calculator), and the
Megatron-Bridge / NeMo performance recipes with pp > 1 run micro-batch 1 (their published tables,
../shared/reference/runs/megatron-bridge.csv, nemo.csv)."""


def batch_shape(dp: int, mb: Any, ga: Any, gb: Any, used: _Defaults, pp: int = 1) -> tuple[Any, Any]:
    """(micro-batch, grad accumulation) from the row's cells (None when empty); a global batch fills the
    missing one. A pipeline (pp > 1) never takes the whole local batch as one micro-batch (a bubble of most
    of the step): with only a global batch, its micro-batch is PIPELINE_MICRO_BATCH, the accumulation the rest."""
    if mb is None and gb is not None and ga is None and pp > 1:
        mb = PIPELINE_MICRO_BATCH
        used.append(f"micro_batch_size={mb} (pipeline parallel: Megatron recipes' micro-batch with pp > 1)")
    if mb is None and gb is not None:
        ga_v = int(float(ga)) if ga is not None else 1
        mb = max(1, int(round(float(gb) / (dp * ga_v))))
        used.append(f"micro_batch_size={mb} (global batch / (dp x grad_accum))")
    elif mb is None:
        mb = used.take("micro_batch_size")
    if ga is None and gb is not None:
        ga = max(1, int(round(float(gb) / (dp * float(mb)))))
        used.append(f"grad_accum={ga} (global batch / (dp x micro-batch))")
    elif ga is None:
        ga = used.take("grad_accum")
    return mb, ga


def _row_moe_experts(row: dict, fw) -> str:
    """How the row's stack held MoE experts: its `moe_experts` cell, else by its `transformers_version`
    (stacked from 5 on, physics/moe_lora.py), else the framework's default."""
    version = re.match(r"\s*(\d+)\.", str(_get(row, "transformers_version") or ""))
    default = ("stacked" if int(version.group(1)) >= 5 else "modules") if version else fw.moe_experts
    return _choice(row, "moe_experts", MOE_EXPERT_LAYOUTS, default, "experts layout")


def _row_peft_version(row: dict) -> str | None:
    """The row's peft release (which MoE types' stacked experts its LoRA reached: physics/moe_lora.py);
    None when the row names none (the newest tested release stands in)."""
    from tuneplan.specs.peft import peft_version_key

    v = _get(row, "peft_version")
    if v is None:
        return None
    try:
        peft_version_key(str(v))
    except InputError:
        raise InputError("peft_version", f"'{v}' is not a version (e.g. 0.22.0)") from None
    return str(v).strip()


VIRTUAL_STAGES_NOTE = re.compile(r"\bVP=(\d+)\b")
"""How a row's notes state an interleaved pipeline's virtual stages per rank (Megatron-Bridge's and
NeMo's performance tables: `VP=4`; `VP=n/a` for none)."""


RECOMPUTE_NOTE = re.compile(r"\brecompute_granularity (selective|full)\b")
"""How a checkpointed row's notes state Megatron's recompute granularity (Megatron-SWIFT's scripts:
`recompute_granularity selective` recomputes only attention's core, full the whole layer)."""


def _positive_int(v: Any, column: str) -> int:
    """A cell that must be a positive whole number (InputError naming the column otherwise)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(column, f"'{v}' is not a number") from None
    if not (x >= 1 and x.is_integer()):
        raise InputError(column, f"'{v}' is not a positive integer")
    return int(x)


STACK_CHOICES = {"optimizer_impl": OPTIMIZER_IMPLS, "grad_accum_sync": GRAD_ACCUM_SYNCS,
                 "fsdp_adapter_wrap": FSDP_ADAPTER_WRAPS}
"""A row's stack settings (`optimizer_impl`: how its AdamW step ran; `grad_accum_sync`: how FSDP reduced its
gradients under accumulation; `fsdp_adapter_wrap`: where FSDP put the adapters): its cell (a source's stated
default fills it: data/source_defaults.yaml), else the framework's default."""


def _row_stack(row: dict) -> tuple[str, Any, str]:
    """(padding, framework, adapter dtype): the stack's defaults from data/frameworks.yaml."""
    pad = _choice(row, "padding", PADDINGS, "max", "padding")
    fw = get_framework(framework_for_text(_get(row, "framework")))
    # a row recorded with its package's version (the TrainerCallback's transformers_version / trl_version)
    # takes that version's values (NAME@VERSION rules of data/frameworks.yaml)
    recorded = _get(row, f"{fw.version_of}_version") if fw.version_of and not fw.version else None
    if recorded is not None:
        import contextlib

        with contextlib.suppress(InputError):  # not a version number: the profile's current values
            fw = get_framework(f"{fw.name}@{str(recorded).strip()}")
    return pad, fw, _choice(row, "adapter_dtype", ADAPTER_DTYPES, "fp32" if fw.adapter_fp32 else "compute",
                            "adapter dtype")


def _row_adapter_fields(row: dict, method: str, model: ModelSpec, used: _Defaults) -> dict[str, Any]:
    """Rank and targets of a LoRA-like method (peft's defaults when empty); of another PEFT method only
    where the row states them, with its options and a generic adapter's trainable count (not stated:
    peft's default LoRA count on the model, recorded)."""
    lora_like = method in LORA_LIKE
    if not lora_like and method not in PEFT_METHOD_NAMES:
        return {}
    out: dict[str, Any] = {}
    rank, targets = _get(row, "lora_rank"), _get(row, "lora_targets")
    if rank is not None or lora_like:
        out["lora_rank"] = int(float(rank)) if rank is not None else used.take("lora_rank")
    if targets is not None or lora_like:
        t = str(targets) if targets is not None else used.take("lora_targets")
        out["lora_targets"] = tuple(x for x in re.split(r"[,+]", t) if x)
    if lora_like:
        return out
    if _get(row, "peft_options") is not None:
        out["peft_options"] = str(_get(row, "peft_options"))
    n = _get(row, "trainable_params")
    if n is not None:
        out["trainable_params"] = float(n)
    elif method == "adapter":
        from tuneplan.physics.terms import model_terms

        lora = JobSpec(method="lora", lora_rank=DEFAULT_GENERIC_ADAPTER_RANK, lora_targets=("q", "v"))
        out["trainable_params"] = model_terms(model, lora).params_trainable
        used.append(f"trainable_params={out['trainable_params']:.0f} (not stated: peft's default LoRA count, "
                    f"r={DEFAULT_GENERIC_ADAPTER_RANK} on q, v)")
    return out


def _job(kw: dict[str, Any]) -> JobSpec:
    try:
        return JobSpec(**kw)
    except ValueError as exc:
        msg = str(exc).splitlines()
        raise InputError("row", msg[-1] if msg else "invalid configuration") from None


def row_to_config(row: dict, cache: dict | None = None) -> RowConfig:
    """One reference-schema row -> a configuration. Raises TuneplanError with the reason. `cache`
    (any dict, shared across the rows of one table) resolves each distinct model and GPU name once."""
    used = _Defaults()
    raw_stage = str(_get(row, "stage") or "sft").strip().lower()
    stage, note = read_stage(raw_stage)  # a stage not modelled: InputError naming it
    if stage != "sft":  # a DPO / GRPO... step is not an SFT step: estimate it with --stage (docs/stages.md)
        named = f"'{raw_stage}' rows ({note})" if note else f"'{stage}' rows"
        raise InputError("stage", f"{named} are not learned from or predicted per row (the learners model "
                         "SFT steps); use tuneplan estimate --stage " + stage)
    model, gpu = _row_model_gpu(row, cache, used)
    method = _row_method(row, used)
    precision, quant, method = _row_precision_quant(row, method, used)
    opt_raw = _get(row, "optimizer")
    optimizer = used.take("optimizer") if opt_raw is None else OPTIMIZER_MAP.get(str(opt_raw).lower(), "adamw")
    shard = parse_sharding(_get(row, "sharding"))
    gpus, nodes, dp = _row_gpus(row, shard, used)
    n_head = len(used)  # the batch shape's defaults come between these and the rest
    seq = _get(row, "seq_len") or _get(row, "avg_tokens_per_sample")
    if seq is None:
        raise InputError("seq_len", "is empty (and no avg_tokens_per_sample)")
    gc = _get(row, "grad_ckpt")
    fa = _get(row, "flash_attn")
    pad, fw, adapter_dtype = _row_stack(row)
    cell = str(_get(row, "framework") or "").strip()
    if cell and fw.name == "generic" and cell.lower() != "generic":
        used.append(f"framework=generic (the cell '{cell}' names no framework profile, so the generic stack's "
                    f"defaults apply: known are {', '.join(framework_names())}, their aliases and NAME@VERSION)")
    prec_raw = _get(row, "precision")
    kw: dict[str, Any] = {
        "method": method, "precision": precision, "optimizer": optimizer, "gpus": gpus, "nodes": nodes,
        # amp-*: mixed precision over fp32 weights (an fp32 master copy); plain bf16/fp16: by framework
        "master_weights": "fp32" if str(prec_raw or "").lower().startswith("amp-") else "auto",
        "micro_batch": None, "grad_accum": None, "seq_len": int(round(float(seq))),
        "grad_ckpt": bool(int(float(gc))) if gc is not None else bool(used.take_framework("grad_ckpt", fw)),
        "ckpt_mode": m.group(1) if gc is not None and float(gc) and (m := RECOMPUTE_NOTE.search(
            str(_get(row, "notes") or ""))) else "auto",
        "flash_attn": bool(int(float(fa))) if fa is not None else bool(used.take("flash_attn")),
        "examples": 1.0, "tokens_per_example": min(float(_get(row, "avg_tokens_per_sample") or seq), float(seq)), "padding": pad,
        "adapter_dtype": adapter_dtype, "framework": fw.name + (f"@{fw.version}" if fw.version else ""),
        "moe_experts": _row_moe_experts(row, fw), "peft_version": _row_peft_version(row),
        **{k: _choice(row, k, allowed, getattr(fw, k)) for k, allowed in STACK_CHOICES.items()}, **shard,
    }
    if quant is not None and method != "full":
        kw["quant"] = quant
    for key in ("fused_ce", "fp32_grads"):  # a fused loss (Liger), fp32 gradient buffers; empty: the framework's
        if _get(row, key) is not None:
            kw[key] = bool(int(float(_get(row, key))))
    if _get(row, "act_offload_layers") is not None:  # Megatron's cpu_offloading_num_layers (a source's recipe)
        kw["act_offload_layers"] = _positive_int(_get(row, "act_offload_layers"), "act_offload_layers")
    rank = _get(row, "galore_rank")
    if rank is not None and optimizer == "galore-adamw":
        kw["galore_rank"] = _positive_int(rank, "galore_rank")
    kw.update(_row_adapter_fields(row, method, model, used))
    vp = VIRTUAL_STAGES_NOTE.search(str(_get(row, "notes") or "")) if shard.get("pp", 1) > 1 else None
    if vp and (vpp := int(vp.group(1))) > 1:  # a pipelined row's virtual stages per rank (else plain 1F1B)
        kw["vpp"] = vpp
        used.append(f"vpp={vpp} (the notes' VP={vpp}: interleaved pipeline, virtual stages per rank)")
    shape = _Defaults()
    mb, ga = batch_shape(dp, *(_get(row, c) for c in ("micro_batch_size", "grad_accum", "global_batch_size")),
                         shape, shard.get("pp", 1))
    used[n_head:n_head] = shape  # the batch shape's defaults follow the GPU count's
    kw.update(micro_batch=int(float(mb)), grad_accum=int(float(ga)))
    return RowConfig(model, gpu, _memo(cache, ("job", *kw.items()), _job, kw), int(round(float(seq))), list(used),
                     str(_get(row, "mem_kind") or "").strip().lower())


def check_terms(model: ModelSpec, job: JobSpec, cache: dict) -> None:
    """Raise the shape problems of the job's method on the model (rank, targets), once per distinct
    model and method settings."""
    from tuneplan.physics.terms import model_terms, terms_key

    _memo(cache, ("terms", model.name, model.n_layers, model.params_total, *terms_key(job)), model_terms, model, job)


def configs_from_rows(rows: list[dict]) -> tuple[list[RowConfig | None], list[str | None]]:
    """Configurations for many rows; None plus a reason where a row cannot be predicted."""
    out: list[RowConfig | None] = []
    errors: list[str | None] = []
    cache: dict = {}
    for r in rows:
        try:
            cfg = row_to_config(r, cache)
            check_terms(cfg.model, cfg.job, cache)
            out.append(cfg)
            errors.append(None)
        except TuneplanError as exc:
            out.append(None)
            errors.append(str(exc))
    return out, errors


def arrays_for(configs: list[RowConfig], constants=None) -> dict[str, np.ndarray]:
    from tuneplan.physics.terms import build_arrays

    a = build_arrays([(c.model, c.gpu, c.job, c.seq_len) for c in configs], constants)
    # the memory correction depends on what a row's peak measures (allocator caching or not)
    a["reports_reserved"] = np.array([0.0 if c.mem_kind == "allocated" else 1.0 for c in configs])
    return a
