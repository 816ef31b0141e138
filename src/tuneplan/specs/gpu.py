"""What a GPU is, for estimating: dense peak FLOP/s per precision, memory, bandwidth, links, power.

The catalog is `tuneplan/data/gpus.csv` (copied from the shared reference, one source per row).
A user's own GPU is a YAML/JSON file (`--gpu-file`, or saved by `tuneplan probe` under
`$TUNEPLAN_HOME/gpus/`, default `~/.tuneplan/gpus/`) with the keys of `GPUSpec.to_dict()`.
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tuneplan.errors import AmbiguousNameError, DataFileError, InputError, UnknownNameError, read_user_text
from tuneplan.specs.limits import MAX_CONFIG_FILE_BYTES, check_gpu_figures

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Units are in the names; `peak_tflops` is dense (never the sparsity figure)."""

    name: str
    memory_gib: float
    memory_bandwidth_gbs: float  # GB/s (1e9 bytes/s)
    peak_tflops: dict[str, float]  # dense TFLOP/s by precision: fp32, tf32, bf16, fp16, fp8
    tdp_w: float = 0.0
    # measured achievable dense 16-bit matmul TFLOP/s / the datasheet peak (0: not measured); 1 for a
    # `tuneplan probe` entry, whose peaks are themselves measured
    matmul_efficiency: float = 0.0
    intra_node_gbs: float = 0.0  # per-GPU, one direction, GB/s (NVLink / PCIe / xGMI)
    inter_node_gbps: float = 0.0  # per-GPU network between nodes, Gbit/s
    intra_node_link: str = ""
    vendor: str = ""
    architecture: str = ""
    source: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def tflops(self, precision: str) -> float:
        """Dense peak TFLOP/s at a training precision, falling back to the nearest it has.

        fp8 falls back to bf16/fp16 (no fp8 units: runs at 16-bit); bf16 to fp16 and vice versa;
        fp32 uses tf32 tensor cores when present (frameworks enable them for fp32 matmuls).
        """
        order = {
            "bf16": ("bf16", "fp16"),
            "fp16": ("fp16", "bf16"),
            "fp8": ("fp8", "bf16", "fp16"),
            "fp32": ("tf32", "fp32"),
            "tf32": ("tf32", "fp32"),
        }.get(precision, (precision,))
        for p in order + ("bf16", "fp16", "tf32", "fp32"):
            v = self.peak_tflops.get(p)
            if v:
                return float(v)
        raise InputError("gpu", f"GPU '{self.name}' has no peak TFLOP/s figure for {precision}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra", None)
        return d


def _num(s: str | None) -> float:
    if s is None:
        return 0.0
    s = s.strip()
    if not s:
        return 0.0
    m = re.match(r"^[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", s)
    return float(m.group(0)) if m else 0.0


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GPUSpec]:
    """The shipped GPU catalog, by name."""
    text = resources.files("tuneplan.data").joinpath("gpus.csv").read_text(encoding="utf-8")
    out: dict[str, GPUSpec] = {}
    for row in csv.DictReader(text.splitlines()):
        name = row["name"].strip()
        peaks = {p: _num(row.get(f"{p}_tflops")) for p in PRECISIONS}
        bidir = _num(row.get("intra_node_gbs_bidir"))
        out[name] = GPUSpec(
            name=name,
            memory_gib=_num(row.get("memory_gib")),
            memory_bandwidth_gbs=_num(row.get("memory_bandwidth_gbs")),
            peak_tflops={k: v for k, v in peaks.items() if v > 0},
            tdp_w=_num(row.get("tdp_w")),
            matmul_efficiency=_num(row.get("matmul_efficiency")),
            intra_node_gbs=bidir / 2.0,
            inter_node_gbps=_num(row.get("inter_node_gbps_per_gpu")),
            intra_node_link=row.get("intra_node_interconnect", ""),
            vendor=row.get("vendor", ""),
            architecture=row.get("architecture", ""),
            source=row.get("source", ""),
            notes=row.get("notes", ""),
        )
    return out


def user_gpu_dir() -> Path:
    """Where `tuneplan probe` saves the user's own GPU entries."""
    home = os.environ.get("TUNEPLAN_HOME") or str(Path.home() / ".tuneplan")
    return Path(home) / "gpus"


def gpu_from_dict(d: dict, source: str = "") -> GPUSpec:
    """Build a GPUSpec from a user's YAML/JSON mapping, validating the figures."""
    if not isinstance(d, dict):
        raise InputError("gpu-file", "must be a mapping of GPU fields")
    check_gpu_figures(d)
    name = str(d.get("name") or "custom-gpu")
    peaks = d.get("peak_tflops")
    if isinstance(peaks, (int, float)):
        peaks = {"bf16": float(peaks), "fp16": float(peaks)}
    if not isinstance(peaks, dict) or not peaks:
        raise InputError("peak_tflops", "needs a number or a mapping of precision to dense TFLOP/s",
                         PRECISIONS)
    peaks = {str(k): float(v) for k, v in peaks.items() if v is not None}
    for k, v in peaks.items():
        if k not in PRECISIONS:
            raise InputError("peak_tflops", f"unknown precision '{k}'", PRECISIONS)
        if v <= 0:
            raise InputError(f"peak_tflops.{k}", "must be > 0")
    mem = float(d.get("memory_gib", 0) or 0)
    bw = float(d.get("memory_bandwidth_gbs", 0) or 0)
    if mem <= 0:
        raise InputError("memory_gib", "must be > 0")
    if bw <= 0:
        raise InputError("memory_bandwidth_gbs", "must be > 0")
    eff = float(d.get("matmul_efficiency", 0) or 0)
    if not 0 <= eff <= 1:
        raise InputError("matmul_efficiency", "must be between 0 and 1 (achievable / datasheet matmul TFLOP/s; "
                                              "0 or absent: not measured)")
    known = {f for f in GPUSpec.__dataclass_fields__}
    extra = {k: v for k, v in d.items() if k not in known}
    return GPUSpec(
        name=name,
        memory_gib=mem,
        memory_bandwidth_gbs=bw,
        peak_tflops=peaks,
        tdp_w=float(d.get("tdp_w", 0) or 0),
        matmul_efficiency=eff,
        intra_node_gbs=float(d.get("intra_node_gbs", 0) or 0),
        inter_node_gbps=float(d.get("inter_node_gbps", 0) or 0),
        intra_node_link=str(d.get("intra_node_link", "")),
        vendor=str(d.get("vendor", "")),
        architecture=str(d.get("architecture", "")),
        source=str(d.get("source", source)),
        notes=str(d.get("notes", "")),
        extra=extra,
    )


def load_gpu_file(path: str | Path) -> GPUSpec:
    """Read a user's GPU from YAML or JSON."""
    p = Path(path)
    if not p.exists():
        raise InputError("gpu-file", f"no such file: {p}")
    text = read_user_text(p, "gpu-file", "GPU file (YAML or JSON)", MAX_CONFIG_FILE_BYTES)
    try:
        if p.suffix.lower() == ".json":
            d = json.loads(text)
        else:
            import yaml

            d = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is reported with the file
        raise DataFileError(str(p), getattr(getattr(exc, "problem_mark", None), "line", None),
                            f"cannot parse GPU file: {exc}".splitlines()[0]) from None
    return gpu_from_dict(d, source=str(p))


def user_gpus() -> dict[str, GPUSpec]:
    out: dict[str, GPUSpec] = {}
    d = user_gpu_dir()
    if d.is_dir():
        for p in sorted(d.glob("*.y*ml")) + sorted(d.glob("*.json")):
            try:
                g = load_gpu_file(p)
            except InputError:
                continue
            out[g.name] = g
    return out


_GPU_NORMALISE = [
    (re.compile(r"^nvidia[-_ ]", re.I), ""),
    (re.compile(r"^amd[-_ ]", re.I), ""),
    (re.compile(r"^(tesla|geforce|instinct)[-_ ]", re.I), ""),
]


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def resolve_gpu(name: str) -> GPUSpec:
    """A GPU by catalog name, alias or vendor spelling (NVIDIA-A100-SXM4-80GB -> A100-SXM4-80GB)."""
    if not name or not str(name).strip():
        raise InputError("gpu", "is empty")
    catalog = {**gpu_catalog(), **user_gpus()}
    if name in catalog:
        return catalog[name]
    n = name.strip()
    for rx, rep in _GPU_NORMALISE:
        n = rx.sub(rep, n)
    sq = _squash(n)
    exact = [k for k in catalog if _squash(k) == sq]
    if len(exact) == 1:
        return catalog[exact[0]]
    # prefix match: "H100" -> H100-SXM5-80GB and H100-PCIe-80GB (ambiguous), "A100-80GB"...
    tokens = [t for t in re.split(r"[^a-z0-9]+", n.lower()) if t]
    cands = [k for k in catalog if all(t in k.lower().replace("-", " ").replace("_", " ").split()
                                       or t in _squash(k) for t in tokens)]
    if len(cands) == 1:
        return catalog[cands[0]]
    if len(cands) > 1:
        raise AmbiguousNameError("gpu", name, cands)
    raise UnknownNameError("gpu", name, catalog, what="GPU", hint="see `tuneplan gpus`")
