"""The planner's search space: GPU type x count x method x micro-batch x gradient accumulation x
sharding x checkpointing, enumerated as index arrays and turned into the flat physics arrays in one
go (no JobSpec per candidate).

`model_terms` runs once per (method, checkpointing) and `gpu_arrays` once per GPU type; every other
column is built with numpy from the grid indices. Columns that are the same for every candidate are
zero-copy broadcast views.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuneplan.errors import InputError
from tuneplan.physics.codes import SHARDING_CODES
from tuneplan.physics.stack import stack_numbers
from tuneplan.physics.terms import gpu_arrays, model_terms
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import SHARDINGS, JobSpec
from tuneplan.specs.limits import MAX_GPUS, bound_number, check_space_bounds
from tuneplan.specs.model import ModelSpec

GPUS_PER_NODE = 8
"""GPUs per node when a count needs several (HGX/DGX-class servers): nodes = ceil(gpus / 8)."""
DEFAULT_MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_SHARDINGS = ("ddp", "fsdp")
DEFAULT_GLOBAL_BATCH = 32
"""Samples per optimizer step the planner keeps (gradient accumulation makes up the rest): a common
fine-tuning recipe value; `--global-batch` changes it."""
GLOBAL_BATCH_TOLERANCE = 2.0
"""A candidate whose global batch cannot hit the target exactly is kept when it is within this
factor of it (e.g. 16 GPUs x micro-batch 4 = 64 for a target of 32)."""

_FSDP_KIND = {"fsdp": "zero3", "fsdp-grad-op": "zero2", "fsdp-hybrid": "hybrid", "fsdp-offload": "zero3-offload"}


def sharding_kind(name: str, dp: int) -> str:
    """JobSpec.sharding_kind for a sharding name at a data-parallel degree."""
    if dp == 1:
        return "none" if name in ("ddp", "none") else name if "offload" in name else "none"
    return _FSDP_KIND.get(name, name)


def gpu_counts(max_gpus: int, gpus_per_node: int = GPUS_PER_NODE) -> list[int]:
    """Powers of two up to max_gpus, and max_gpus itself when it splits evenly over its nodes."""
    if max_gpus < 1:
        raise InputError("max-gpus", f"must be a positive integer, got {max_gpus}")
    bound_number("max-gpus", max_gpus, MAX_GPUS)
    out = [1 << i for i in range(int(math.log2(max_gpus)) + 1)]
    nodes = math.ceil(max_gpus / gpus_per_node)
    if max_gpus not in out and max_gpus % nodes == 0:
        out.append(max_gpus)
    return out


@dataclass(frozen=True)
class Space:
    """The axes searched (besides GPU types and methods)."""

    gpu_counts: tuple[int, ...]
    micro_batches: tuple[int, ...] = DEFAULT_MICRO_BATCHES
    shardings: tuple[str, ...] = DEFAULT_SHARDINGS
    grad_ckpt: tuple[bool, ...] = (False, True)
    global_batch: int | None = DEFAULT_GLOBAL_BATCH
    grad_accums: tuple[int, ...] | None = None  # explicit list instead of a target global batch
    gpus_per_node: int = GPUS_PER_NODE
    tolerance: float = GLOBAL_BATCH_TOLERANCE

    def __post_init__(self) -> None:
        for name, vals in (("gpu-counts", self.gpu_counts), ("micro-batches", self.micro_batches),
                           ("grad-accums", self.grad_accums or (1,))):
            if not vals or any(int(v) != v or v < 1 for v in vals):
                raise InputError(name, f"must be positive integers, got {list(vals)}")
        check_space_bounds(self)
        if not self.shardings:
            raise InputError("shardings", "give at least one", SHARDINGS)
        for s in self.shardings:
            if s not in SHARDINGS:
                raise InputError("shardings", f"unknown sharding '{s}'", SHARDINGS)
        if not self.grad_ckpt:
            raise InputError("grad-ckpt", "give at least one of on/off")
        if self.global_batch is not None and self.global_batch < 1:
            raise InputError("global-batch", f"must be a positive integer, got {self.global_batch}")
        if self.gpus_per_node < 1:
            raise InputError("gpus-per-node", "must be a positive integer")


@dataclass
class Grid:
    """The enumerated candidates: index arrays into the GPU and method lists, and the job numbers."""

    gpu_idx: np.ndarray
    method_idx: np.ndarray
    gpus: np.ndarray
    nodes: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    sharding_idx: np.ndarray  # into `sharding_labels`
    sharding_code: np.ndarray
    grad_ckpt: np.ndarray  # 0/1
    sharding_labels: list[str]

    def __len__(self) -> int:
        return len(self.gpu_idx)

    def take(self, mask: np.ndarray) -> Grid:
        kw = {k: (v[mask] if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}
        return Grid(**kw)


def enumerate_grid(n_gpu_types: int, n_methods: int, space: Space, model_par: int = 1,
                   gpu_multiple: int = 1) -> Grid:
    """Every combination of the axes, less the ones that are invalid or duplicates: counts that do not
    divide into nodes or model-parallel groups (or are not a multiple of `gpu_multiple`: expert
    parallel's pp x ep x etp), the same sharding twice for one GPU (DDP and FSDP are both 'none' on one
    GPU), and global batches too far from the target."""
    counts = np.array([c for c in space.gpu_counts
                       if c % math.ceil(c / space.gpus_per_node) == 0 and c % model_par == 0
                       and c % gpu_multiple == 0], dtype=np.int64)
    if len(counts) == 0:
        raise InputError("max-gpus", f"no GPU count in {list(space.gpu_counts)} divides into nodes of "
                         f"{space.gpus_per_node} and model-parallel groups of {model_par}")
    mbs = np.array(sorted(set(space.micro_batches)), dtype=np.int64)
    gas = np.array(sorted(set(space.grad_accums)) if space.grad_accums else [0], dtype=np.int64)
    ck = np.array(sorted({int(bool(c)) for c in space.grad_ckpt}), dtype=np.int64)
    shard = list(dict.fromkeys(space.shardings))
    # per sharding: its code at dp=1 and dp>1, and whether it is the first with that code
    code1 = np.array([SHARDING_CODES[sharding_kind(s, 1)] for s in shard])
    coden = np.array([SHARDING_CODES[sharding_kind(s, 2)] for s in shard])
    first1 = np.array([code1[i] not in code1[:i] for i in range(len(shard))])
    firstn = np.array([coden[i] not in coden[:i] for i in range(len(shard))])

    shape = (n_gpu_types, len(counts), n_methods, len(mbs), len(gas), len(shard), len(ck))
    idx = np.indices(shape, dtype=np.int32).reshape(len(shape), -1)
    gi, ci, mi, bi, ai, si, ki = idx
    gpus = counts[ci]
    dp = gpus // model_par
    mb = mbs[bi]
    single = dp == 1
    keep = np.where(single, first1[si], firstn[si])
    if space.grad_accums:
        ga = gas[ai]
    else:
        target = float(space.global_batch or DEFAULT_GLOBAL_BATCH)
        ga = np.maximum(1, np.rint(target / (mb * dp))).astype(np.int64)
        achieved = mb * dp * ga
        keep &= (achieved <= target * space.tolerance) & (achieved * space.tolerance >= target)
    gi, mi, si, ki, gpus, dp, mb, ga = (x[keep] for x in (gi, mi, si, ki, gpus, dp, mb, ga))
    single = dp == 1
    scode = np.where(single, code1[si], coden[si]).astype(float)
    # sharding labels: the user's names, and 'none' for one data-parallel rank
    labels = shard + ["none"]
    sidx = np.where(single & (code1[si] == 0), len(shard), si)
    nodes = -(-gpus // space.gpus_per_node)
    return Grid(gpu_idx=gi, method_idx=mi, gpus=gpus, nodes=nodes, dp=dp, micro_batch=mb, grad_accum=ga,
                sharding_idx=sidx, sharding_code=scode, grad_ckpt=ck[ki], sharding_labels=labels)


def build_arrays(model: ModelSpec, gpus: Sequence[GPUSpec], jobs: Sequence[JobSpec], grid: Grid, seq_len: int,
                 constants=None) -> dict[str, np.ndarray]:
    """The physics arrays for every grid row (what `tuneplan.physics.terms.build_arrays` gives one
    configuration at a time).

    `jobs[i]` is the base job of method i (its method options: rank, targets, precision, quant...).
    """
    n = len(grid)
    a: dict[str, np.ndarray] = {}

    def put(key: str, table: np.ndarray, index: np.ndarray) -> None:
        if np.all(table == table[0]):
            a[key] = np.broadcast_to(np.float64(table[0]), (n,))
        else:
            a[key] = table[index]

    # model terms per (method, checkpointing)
    terms = [model_terms(model, job.updated(grad_ckpt=ck), constants).__dict__ for job in jobs for ck in (False, True)]
    mk = grid.method_idx * 2 + grid.grad_ckpt
    for key in terms[0]:
        put(key, np.array([float(t[key]) for t in terms]), mk)
    # GPU figures per (GPU type, precision of the method)
    # with the stack's numbers (precision recipe, framework kernels; the grid's axis decides checkpointing)
    g_rows = [{**gpu_arrays(g, j.precision, constants), **stack_numbers(model, g, j, seq_len, with_ckpt=False)}
              for g in gpus for j in jobs]
    gk = grid.gpu_idx * len(jobs) + grid.method_idx
    for key in g_rows[0]:
        put(key, np.array([float(r[key]) for r in g_rows]), gk)
    # job numbers
    base = jobs[0]
    a["micro_batch"] = grid.micro_batch.astype(float)
    a["grad_accum"] = grid.grad_accum.astype(float)
    # image tokens join each sample's sequence (vision-language models); prompt/p-tuning's prepended positions
    a["seq_len"] = np.float64(seq_len + terms[0].get("image_tokens", 0.0)) + a["virtual_tokens"]
    a["gpus"] = grid.gpus.astype(float)
    a["nodes"] = grid.nodes.astype(float)
    same = {"tp": base.tp, "pp": base.pp, "cp": base.cp, "ep": base.ep, "flash_attn": base.flash_attn,
            "variable_shapes": base.variable_shapes(), "adapter_fp32": base.adapter_dtype == "fp32",
            "length_gap": base.length_gap()}
    a.update({k: np.broadcast_to(np.float64(v), (n,)) for k, v in same.items()})  # the same for every row
    a["dp"] = grid.dp.astype(float)
    a["sharding"] = grid.sharding_code
    a["grad_ckpt"] = grid.grad_ckpt.astype(float)
    # fp32 master copy per (method, sharding label; the last label is 'none')
    labels = list(grid.sharding_labels)
    master = np.array([[1.0 if job.updated(sharding=s).fp32_master() else 0.0 for s in labels]
                       for job in jobs])
    a["fp32_master"] = master[grid.method_idx, grid.sharding_idx]
    a["fsdp"] = np.array([1.0 if s.startswith("fsdp") else 0.0 for s in labels])[grid.sharding_idx]
    # names, as the per-row estimators' residual models expect them
    a["_model_names"] = np.broadcast_to(np.array(model.name, dtype=object), (n,))
    a["_gpu_names"] = np.array([g.name for g in gpus], dtype=object)[grid.gpu_idx]
    a["_methods"] = np.array([j.method for j in jobs], dtype=object)[grid.method_idx]
    return a
