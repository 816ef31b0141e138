"""Turning one raw runs row into a typed, flagged, name-resolved row.

Steps (each documented in docs/runs.md): LLMFineTuningBench mapping, number parsing and checks, OOM /
duplicate / estimate marks, catalog names, per-source and framework defaults for empty settings, and
derived figures (tokens/s from per-GPU figures or samples/s, step time, global batch...). Every filled
cell is recorded in `defaults_used`; nothing here predicts anything from physics.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

from tuneplan.runs.defaults import Defaults, SourceRules, cell_text
from tuneplan.runs.methods import method_from_notes
from tuneplan.runs.schema import (
    EXTRA_NUMERIC_COLUMNS,
    FLAG_COLUMNS,
    LLMFTBENCH_RENAMES,
    MEASUREMENT_COLUMNS,
    NUMERIC_COLUMNS,
    POSITIVE_COLUMNS,
    THROUGHPUT_COLUMNS,
    TORCH_DTYPES,
)
from tuneplan.specs.limits import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_GRAD_ACCUM,
    MAX_LORA_RANK,
    MAX_MICRO_BATCH,
    MAX_SEQ_LEN,
)

OOM_NOTE = re.compile(
    r"^\s*OOM\b|source reports OOM|\bOutOfMemoryError\b|\bCost: OOM\b|\bOOM on\b|\bOOM: out of memory",
    re.IGNORECASE,
)
"""How the reference rows mark an out-of-memory outcome in `notes` (SOURCES.md: OOM rows have empty
speed and memory and say so in notes: 'OOM (...)', 'source reports OOM', 'OutOfMemoryError',
litgpt's 'Cost: OOM' / 'OOM on <GPU>'). Only rows without any measurement count as OOM, so caveats
such as vectorlm's 'should OOM' or xtuner's 'later ... shows OOM' on measured rows do not."""

OOM_TEXT = re.compile(r"out of memory|\bOOM\b|OutOfMemory", re.IGNORECASE)
"""OOM in an error/status text of a failed LLMFineTuningBench or profiler row."""

DUPLICATE_NOTE = re.compile(r"^\s*DUPLICATE of\b", re.IGNORECASE)
"""shared/reference/README.md: rows whose notes begin 'DUPLICATE of' repeat another row."""

ESTIMATE_NOTE = re.compile(r"^\s*estimated?\b", re.IGNORECASE)
"""Rows whose notes begin 'estimate' are not measurements (LLaMA-Factory's VRAM table)."""

NOT_STATED_GPU = re.compile(r"^(unnamed|unknown|n/?a|not stated)\b", re.IGNORECASE)
"""GPU cells that say the GPU was not named (e.g. peft's 'unnamed-40GB'): kept, gpu_resolved ''."""

ERROR_TEXT_COLUMNS = ("error", "error_message", "failure_reason", "reason", "exception", "exit_reason",
                      "status", "notes")

OOM_UTILISATION = 0.97
"""A failed LLMFineTuningBench run whose peak memory reached this fraction of the GPU is taken as OOM."""

TRUE_WORDS = {"1", "true", "yes", "y", "t", "on"}
FALSE_WORDS = {"0", "false", "no", "n", "f", "off"}


class RowError(Exception):
    """A problem that makes a row unusable (reported with file and line, row skipped)."""


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return format(v, ".6g")
    return str(v)


# --- numbers ------------------------------------------------------------------------------------

_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


@functools.lru_cache(maxsize=1 << 16)
def parse_number(text: str, column: str) -> float | None:
    """A cell as a float; '' -> None; raises RowError naming the column for anything else (cached:
    a runs file repeats its numbers)."""
    s = text.strip()
    if not s or s.lower() in ("nan", "none", "null"):
        return None
    if column in FLAG_COLUMNS:
        low = s.lower()
        if low in TRUE_WORDS:
            return 1.0
        if low in FALSE_WORDS:
            return 0.0
    if not _NUMBER.match(s.replace("_", "")):
        raise RowError(f"column '{column}': non-numeric value '{s}'")
    return float(s.replace("_", ""))


NUMBER_CELLS = frozenset(NUMERIC_COLUMNS + EXTRA_NUMERIC_COLUMNS + FLAG_COLUMNS)


def parse_numbers(raw: dict[str, str], extra_numeric: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    """Typed values (floats for numeric columns, stripped text otherwise) and the problems found."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    for col, text in raw.items():
        if col in NUMBER_CELLS or col in extra_numeric:
            try:
                out[col] = parse_number(text, col)
            except RowError as exc:
                errors.append(str(exc))
                out[col] = None
        else:
            out[col] = text.strip() if isinstance(text, str) else text
    return out, errors


COUNT_BOUNDS = {"gpus": MAX_GPUS, "nodes": MAX_GPUS, "micro_batch_size": MAX_MICRO_BATCH,
                "grad_accum": MAX_GRAD_ACCUM, "global_batch_size": MAX_GLOBAL_BATCH, "seq_len": MAX_SEQ_LEN,
                "lora_rank": MAX_LORA_RANK}
"""Columns that count things (a whole number, at most the physical bound of tuneplan.specs.limits)."""


def check_values(v: dict[str, Any]) -> list[str]:
    """Range checks: throughput and counts > 0, flags 0/1, counts whole and bounded, MFU a fraction."""
    errors = []
    for col in POSITIVE_COLUMNS:
        x = v.get(col)
        if x is None:
            continue
        if not math.isfinite(x):
            errors.append(f"column '{col}': {fmt(x)} is not finite")
        elif x <= 0:
            what = "throughput" if col in THROUGHPUT_COLUMNS else "value"
            errors.append(f"column '{col}': {what} must be > 0 (got {fmt(x)})")
    for col in FLAG_COLUMNS:
        x = v.get(col)
        if x is not None and x not in (0.0, 1.0):
            errors.append(f"column '{col}': must be 0 or 1 (got {fmt(x)})")
    for col, upper in COUNT_BOUNDS.items():  # whole numbers within their bounds (gpus=1.5 is a typo, not a run)
        x = v.get(col)
        if x is None or not math.isfinite(x) or x <= 0:
            continue
        if x != int(x):
            errors.append(f"column '{col}': must be a whole number (got {fmt(x)})")
        elif x > upper:
            errors.append(f"column '{col}': {fmt(x)} is beyond any physical run (at most {upper:,.0f})")
    mfu = v.get("mfu")
    if mfu is not None and mfu > 1:
        errors.append(f"column 'mfu': must be a fraction 0..1 (got {fmt(mfu)}; a percentage?)")
    return errors


# --- LLMFineTuningBench -------------------------------------------------------------------------

LLMFT_NUMERIC = ("batch_size", "train_steps_per_second", "gpu_memory_utilization_peak", "model_max_length")


def map_llmftbench(raw: dict[str, str]) -> tuple[dict[str, str], list[str], list[str]]:
    """(row, records, errors): LLMFineTuningBench columns renamed onto reference names, dtype, booleans and
    is_valid read; the conversions that need numbers happen in `finish_llmftbench`."""
    row: dict[str, str] = {}
    records: list[str] = []
    errors: list[str] = []
    for col, text in raw.items():
        target = LLMFTBENCH_RENAMES.get(col)
        if target and not raw.get(target, "").strip():
            row[target] = text
        if target is None or target == col:
            row.setdefault(col, text)
    if not row.get("seq_len", "").strip() and raw.get("model_max_length", "").strip():
        row["seq_len"] = raw["model_max_length"]
    dtype = raw.get("torch_dtype", "").strip().lower().replace("torch.", "")
    if dtype and not row.get("precision", "").strip():
        if dtype in TORCH_DTYPES:
            row["precision"] = TORCH_DTYPES[dtype]
        else:
            errors.append(f"column 'torch_dtype': unknown dtype '{raw['torch_dtype']}'")
    for src, dst in (("gradient_checkpointing", "grad_ckpt"), ("use_flash_attn", "flash_attn")):
        if raw.get(src, "").strip() and not row.get(dst, "").strip():
            row[dst] = raw[src]
    if not row.get("grad_ckpt", "").strip():  # the actuator's default, as source_defaults.yaml's llmftbench
        row["grad_ckpt"] = "1"
        records.append("grad_ckpt=1(ado sfttrainer actuator default: gradient_checkpointing True)")
    if targets := row.get("lora_targets", ""):
        parts = [t.strip().strip("'\"") for t in re.split(r"[,\s\[\]]+", targets) if t.strip().strip("'\"")]
        row["lora_targets"] = ",".join(p.removesuffix("_proj") for p in parts)
    if method := row.get("method", "").strip().lower():
        row["method"] = method
    if "/" in row.get("model", "") and not row.get("model_hf_id", "").strip():
        row["model_hf_id"] = row["model"]
    valid = raw.get("is_valid", "").strip().lower()
    if valid and not row.get("status", "").strip():
        if valid in TRUE_WORDS:
            row["status"] = "ok"
        elif valid in FALSE_WORDS:
            text = " ".join(raw.get(c, "") for c in ERROR_TEXT_COLUMNS if c != "status")
            row["status"] = "oom" if OOM_TEXT.search(text) else "failed"
        else:
            errors.append(f"column 'is_valid': not a boolean '{raw['is_valid']}'")
    if not row.get("framework", "").strip():
        row["framework"] = "fms-hf-tuning"
        records.append("framework=fms-hf-tuning(LLMFineTuningBench runs fms-hf-tuning)")
    return row, records, errors


def memory_unit(cells: list[str]) -> str:
    """Unit of a file's gpu_memory_utilization_peak column, from its largest number (other cells left out):
    <= 1 fraction of the GPU, <= 100 percent (also when it has none), > 1e6 bytes, else MiB."""
    values = []
    for text in cells:
        with contextlib.suppress(RowError):
            values.append(parse_number(text, "gpu_memory_utilization_peak"))
    top = max((x for x in values if x is not None), default=100.0)
    return "fraction" if top <= 1.0 else "percent" if top <= 100.0 else "bytes" if top > 1e6 else "mib"


def finish_llmftbench(v: dict[str, Any], unit: str, gpu_memory_gib: float | None,
                      records: list[str]) -> None:
    """batch_size (total over GPUs) -> global/micro batch; steps/s -> step time; memory -> GiB."""
    gpus = v.get("gpus")
    bs = v.get("batch_size")
    if bs is not None and v.get("global_batch_size") is None:
        v["global_batch_size"] = bs
        records.append(f"global_batch_size={fmt(bs)}(LLMFineTuningBench batch_size, total over GPUs)")
    if bs is not None and v.get("micro_batch_size") is None and gpus:
        ga = v.get("grad_accum") or 1.0
        micro = bs / gpus / ga
        if abs(micro - round(micro)) > 1e-9 or micro < 1:
            raise RowError(f"batch_size {fmt(bs)} is not a multiple of gpus x grad_accum ({fmt(gpus)} x {fmt(ga)})")
        v["micro_batch_size"] = float(round(micro))
        records.append(f"micro_batch_size={fmt(v['micro_batch_size'])}(derived batch_size/gpus/grad_accum)")
    sps = v.get("train_steps_per_second")
    if sps is not None and sps > 0 and v.get("step_time_s") is None:
        v["step_time_s"] = 1.0 / sps
        records.append(f"step_time_s={fmt(v['step_time_s'])}(derived 1/train_steps_per_second)")
    mem = v.get("gpu_memory_utilization_peak")
    if mem is not None and v.get("peak_mem_gib") is None:
        gib = None
        if unit in ("fraction", "percent"):
            if gpu_memory_gib:
                frac = mem if unit == "fraction" else mem / 100.0
                gib = frac * gpu_memory_gib
                records.append(f"peak_mem_gib={fmt(gib)}(derived gpu_memory_utilization_peak {fmt(mem)}"
                               f"{'%' if unit == 'percent' else ''} x {fmt(gpu_memory_gib)} GiB)")
                if v.get("status") == "failed" and frac >= OOM_UTILISATION:
                    v["status"] = "oom"
                    records.append(f"status=oom(inferred: failed run at {fmt(frac * 100)}% of GPU memory)")
        else:
            per_gib, how = (2**30, "bytes/2^30") if unit == "bytes" else (1024.0, "MiB/1024")
            gib = mem / per_gib
            records.append(f"peak_mem_gib={fmt(gib)}(derived gpu_memory_utilization_peak {how})")
        if gib is not None:
            v["peak_mem_gib"] = gib
            if not v.get("mem_kind"):
                v["mem_kind"] = "unknown"


# --- catalog names ------------------------------------------------------------------------------

def _catalog_model(model: str, hf_id: str, notes: str = "", seq_len: Any = None, config_json: str = ""):
    from tuneplan.specs.catalog import resolve_run_model

    return resolve_run_model(model, hf_id, notes, seq_len, config_json)


def resolve_gpu_name(name: str, rules: SourceRules, strict: bool = False) -> tuple[Any, str | None]:
    """(GPUSpec or None when the row does not name a GPU, record of an assumed name or None).

    The catalog's rule resolves names (a family name such as 'A100-80GB' reads as the family's default
    variant, recorded as `gpu=<variant>(catalog default for '<name>': <reason>)`; `strict` refuses it);
    a source's own `gpu_names` mapping, where source_defaults.yaml has one, comes first."""
    from tuneplan.specs.gpu import family_of, resolve_gpu

    name = name.strip()
    if not name or NOT_STATED_GPU.match(name):
        return None, None
    if name in rules.gpu_names:
        spec = resolve_gpu(rules.gpu_names[name].value)
        return spec, f"gpu={spec.name}(source default {rules.name}: '{name}' as written)"
    spec = resolve_gpu(name, strict=strict)
    if spec.resolved_as:
        fam = family_of(name)
        why = fam.reason.split(";")[0] if fam else spec.resolved_as
        return spec, f"gpu={spec.name}(catalog default for '{name}': {why})"
    return spec, None


# --- row outcome marks --------------------------------------------------------------------------

def outcome(v: dict[str, Any]) -> str:
    """'ok' / 'oom' / 'failed' / '' (no outcome stated: estimates, unsupported cells...)."""
    status = cell_text(v.get("status"))
    if status in ("oom", "out-of-memory", "out_of_memory"):
        return "oom"
    if status in ("ok", "success", "succeeded", "completed", "done"):
        return "ok"
    if status in ("failed", "error", "fail", "crashed"):
        text = " ".join(str(v.get(c) or "") for c in ERROR_TEXT_COLUMNS if c != "status")
        return "oom" if OOM_TEXT.search(text) else "failed"
    if status:
        return "oom" if OOM_TEXT.search(status) else "failed"
    if any(v.get(c) is not None for c in MEASUREMENT_COLUMNS):  # measured, no outcome said: it ran
        return "ok"
    return "oom" if OOM_NOTE.search(str(v.get("notes") or "")) else ""


# --- defaults and derivations -------------------------------------------------------------------

@dataclass
class RowState:
    """A row being normalised: values plus what was filled and why."""

    v: dict[str, Any]
    source: str
    defaults_used: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)

    def empty(self, col: str) -> bool:
        x = self.v.get(col)
        return x is None or (isinstance(x, str) and not x.strip()) or (isinstance(x, float) and math.isnan(x))

    def fill(self, col: str, value: Any, why: str) -> None:
        if value is None or not self.empty(col):
            return
        value = float(value) if col in NUMERIC_COLUMNS else str(value)
        self.v[col] = value
        self.defaults_used.append(f"{col}={fmt(value)}({why})")


def _ctx(st: RowState, model_type: str) -> dict[str, Any]:
    return {**st.v, "model_type": model_type, "source": st.source}


def apply_flags(st: RowState, rules: SourceRules, model_type: str) -> None:
    ctx = _ctx(st, model_type)
    for flag in rules.flags:
        if not flag.holds(ctx):
            continue
        for key, val in flag.settings.items():
            if key == "caveat":
                for tag in str(val).split(";"):
                    if tag and tag not in st.caveats:
                        st.caveats.append(tag)
            elif key not in st.flags:
                st.flags[key] = val


def apply_defaults(st: RowState, defaults: Defaults, rules: SourceRules, model_type: str) -> None:
    """Source defaults first, then framework defaults (in file order), empty cells only."""
    method_from_notes(st)  # method 'other': the PEFT method the notes name, else a generic adapter
    framework = str(st.v.get("framework") or "")
    entries = [(col, entry, f"source default {rules.name}") for col, entry in rules.defaults.items()]
    entries += [(col, entry, f"framework default {fw.name}") for fw in defaults.frameworks
                if framework and fw.matches(framework) for col, entry in fw.defaults.items()]
    entries.sort(key=lambda e: e[0] != "method")  # 'method' first: other defaults are conditional on it
    for col, entry, label in entries:
        if st.empty(col) and (value := entry.pick(_ctx(st, model_type))) is not None:
            st.fill(col, value, label)


_DEGREE = re.compile(r"^(tp|pp|cp|sp|ep)(\d+)$")


def parallel_degrees(sharding: str) -> dict[str, int]:
    """tp/pp/cp/sp degrees from a sharding string like 'ddp+tp4+pp8+cp2' (missing ones are 1)."""
    out = {"tp": 1, "pp": 1, "cp": 1, "sp": 1, "ep": 1}
    for tok in str(sharding or "").lower().split("+"):
        if m := _DEGREE.match(tok.strip()):
            out[m.group(1)] = int(m.group(2))
    return out


def data_parallel(v: dict[str, Any]) -> float | None:
    """Data-parallel degree: gpus / (tp x pp x cp x sp); None when not a whole number."""
    if not (gpus := v.get("gpus")):
        return None
    d = parallel_degrees(str(v.get("sharding") or ""))
    model_parallel = d["tp"] * d["pp"] * d["cp"] * d["sp"]
    dp = gpus / model_parallel
    if dp < 1 or abs(dp - round(dp)) > 1e-9:
        return None
    return float(round(dp))


def _whole(x: float) -> float | None:
    return float(round(x)) if x >= 1 and abs(x - round(x)) < 1e-6 else None


def derive(st: RowState) -> None:
    """Fill missing figures that follow from the others by arithmetic (recorded as 'derived')."""
    v = st.v
    dp = data_parallel(v)
    full_length = bool(st.flags.get("full_length_samples"))

    def tokens_per_sample() -> tuple[float | None, str]:
        if full_length and v.get("seq_len"):
            return v["seq_len"], "seq_len"
        if v.get("avg_tokens_per_sample"):
            return v["avg_tokens_per_sample"], "avg_tokens_per_sample"
        return None, ""

    # batch shape
    micro, ga, gbs = v.get("micro_batch_size"), v.get("grad_accum"), v.get("global_batch_size")
    if dp:
        if gbs is None and micro and ga:
            st.fill("global_batch_size", micro * ga * dp, "derived micro_batch_size*grad_accum*dp")
        elif micro is None and gbs and ga:
            st.fill("micro_batch_size", _whole(gbs / (ga * dp)), "derived global_batch_size/(grad_accum*dp)")
        elif ga is None and gbs and micro:
            st.fill("grad_accum", _whole(gbs / (micro * dp)), "derived global_batch_size/(micro_batch_size*dp)")

    # a micro-batch iteration time -> optimizer step time
    if st.flags.get("step_time_is_micro_batch") and v.get("step_time_s") and dp and v.get("micro_batch_size"):
        per_iter = v["micro_batch_size"] * dp
        accum = (v.get("global_batch_size") or per_iter) / per_iter
        if accum >= 1 and abs(accum - round(accum)) < 1e-6 and round(accum) != 1:
            old = v["step_time_s"]
            v["step_time_s"] = old * round(accum)
            st.defaults_used.append(f"step_time_s={fmt(v['step_time_s'])}(derived micro-batch iteration "
                                    f"{fmt(old)} s x {round(accum)} iterations per step)")

    for _ in range(3):
        if gpus := v.get("gpus"):
            if v.get("tokens_per_s") is None and v.get("tokens_per_s_per_gpu"):
                st.fill("tokens_per_s", v["tokens_per_s_per_gpu"] * gpus, "derived tokens_per_s_per_gpu*gpus")
            if v.get("tokens_per_s_per_gpu") is None and v.get("tokens_per_s"):
                st.fill("tokens_per_s_per_gpu", v["tokens_per_s"] / gpus, "derived tokens_per_s/gpus")
        tps, tps_name = tokens_per_sample()
        if tps:
            if v.get("tokens_per_s") is None and v.get("samples_per_s"):
                st.fill("tokens_per_s", v["samples_per_s"] * tps, f"derived samples_per_s*{tps_name}")
            if v.get("samples_per_s") is None and v.get("tokens_per_s"):
                st.fill("samples_per_s", v["tokens_per_s"] / tps, f"derived tokens_per_s/{tps_name}")
        if gbs := v.get("global_batch_size"):
            if v.get("step_time_s") is None and v.get("samples_per_s"):
                st.fill("step_time_s", gbs / v["samples_per_s"], "derived global_batch_size/samples_per_s")
            if v.get("samples_per_s") is None and v.get("step_time_s"):
                st.fill("samples_per_s", gbs / v["step_time_s"], "derived global_batch_size/step_time_s")
    if v.get("peak_mem_gib") is not None and not v.get("mem_kind"):
        st.fill("mem_kind", "unknown", "not stated")


def fill_from_catalog(st: RowState, model_spec: Any) -> None:
    """params_b (and active_params_b for MoE) from the catalog model when the row has neither."""
    if model_spec is None or not st.empty("params_b"):
        return
    if not (total := getattr(model_spec, "params_total", None)):
        return
    st.fill("params_b", round(total / 1e9, 4), "catalog")
    active = getattr(model_spec, "params_active", None)
    if active and st.empty("active_params_b") and active < total:
        st.fill("active_params_b", round(active / 1e9, 4), "catalog")
