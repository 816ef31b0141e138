"""What a GPU is, for estimating: dense peak FLOP/s per precision, memory, bandwidth, links, power.

The catalog is `tuneplan/data/gpus.csv` (built from the shared reference `gpus.csv`): one row per part,
each figure's source in `figure_sources`, the figures no source gives in `missing` (and the precisions
the hardware lacks in `not_in_hardware`), and the name-resolution rule of the catalog (`default_for`,
`default_reason`, `aliases`, `fill_from`); docs/gpus.md describes the columns.
A user's own GPU is a YAML/JSON file (`--gpu-file`, or saved by `tuneplan probe` under
`$TUNEPLAN_HOME/gpus/`, default `~/.tuneplan/gpus/`) with the keys of `GPUSpec.to_dict()`.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from tuneplan.errors import (
    AmbiguousNameError,
    DataFileError,
    InputError,
    UnknownNameError,
    load_bounded_json,
    load_bounded_yaml,
    read_user_text,
)
from tuneplan.specs.limits import MAX_CONFIG_FILE_BYTES, check_gpu_figures

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")  # The catalog's dense peak columns (`<p>_tflops`).

PEAK_COLUMN = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "amp-bf16": "bf16", "fp16": "fp16",
               "amp-fp16": "fp16", "fp8": "fp8", "mxfp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}
"""Which peak column a training precision runs its matmuls at (NVFP4 and MXFP4 on the fp4 tensor cores,
MXFP8 on the fp8 ones)."""

PEAK_FALLBACK = {
    "fp4": ("fp4", "fp8", "bf16", "fp16"),
    "fp8": ("fp8", "bf16", "fp16"),
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "fp32": ("tf32", "fp32"),
    "tf32": ("tf32", "fp32"),
}
"""The peak used when a column is empty: a part without fp4/fp8 units runs those matmuls at the next wider
precision it has; fp32 matmuls use tf32 tensor cores where present (PyTorch/frameworks enable them)."""

PEAK_LAST_RESORT = ("bf16", "fp16", "tf32", "fp32")

FIGURE_COLUMNS = ("memory_gib", "usable_mem_mib_reported", "memory_bandwidth_gbs", "fp32_tflops", "tf32_tflops",
                  "bf16_tflops", "fp16_tflops", "fp8_tflops", "fp4_tflops", "int8_tops", "boost_clock_mhz",
                  "sm_count", "matmul_efficiency", "tdp_w", "intra_node_gbs_bidir", "inter_node_gbps_per_gpu",
                  "host_link_gbs_bidir")
"""The numeric columns of gpus.csv: each non-empty one names its source in `figure_sources`; each empty one
is listed in `missing` (no source gives it) or `not_in_hardware`, except those of OPTIONAL_COLUMNS."""

OPTIONAL_COLUMNS = ("matmul_efficiency", "host_link_gbs_bidir")
"""Figures whose empty cell has a meaning of its own: a measurement not made, and a CPU-GPU link that is
the PCIe-class one the constants give (physics/constants.py cpu_offload_gbs; said where offload is used)."""

FILLABLE_COLUMNS = ("memory_bandwidth_gbs", "fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops",
                    "fp8_tflops", "fp4_tflops", "tdp_w", "intra_node_gbs_bidir")
"""Figures a row with `fill_from` takes from that sibling part when no source gives them (said in the
estimate's assumptions)."""

DEFAULT_TDP_W = 300.0
"""Power, W, used for energy when no source gives a part's TDP (and it has no `fill_from`); a round figure
for a PCIe data-centre board (A100 PCIe 80GB 300 W, A40 300 W: NVIDIA datasheets). Always said."""


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Units are in the names; `peak_tflops` is dense (never the sparsity figure)."""

    name: str
    memory_gib: float
    memory_bandwidth_gbs: float  # GB/s (1e9 bytes/s)
    peak_tflops: dict[str, float]  # dense TFLOP/s by precision: fp32, tf32, bf16, fp16, fp8, fp4
    tdp_w: float = 0.0
    # measured achievable dense 16-bit matmul TFLOP/s / the datasheet peak (0: not measured); 1 for a
    # `tuneplan probe` entry, whose peaks are themselves measured
    matmul_efficiency: float = 0.0
    intra_node_gbs: float = 0.0  # per-GPU, one direction, GB/s (NVLink / PCIe / xGMI)
    inter_node_gbps: float = 0.0  # per-GPU network between nodes, Gbit/s
    intra_node_link: str = ""
    # per-GPU CPU <-> GPU link, one direction, GB/s (Grace parts: NVLink-C2C); 0: not given, the constants'
    # PCIe-class cpu_offload_gbs. Offloaded activations, optimizer states and weights cross it
    host_link_gbs: float = 0.0
    # GPUs one NVLink switch domain joins (HGX: 8; GB200/GB300 NVL72: 72 across 4-GPU trays); 0: not
    # given, the node is the domain. Collectives inside it run at intra_node_gbs
    nvlink_domain_gpus: int = 0
    vendor: str = ""
    architecture: str = ""
    source: str = ""
    notes: str = ""
    # figures no source gives (catalog column names, with a reason in parentheses where known)
    missing: tuple[str, ...] = field(default=(), compare=False)
    # precisions the part has no units for (e.g. fp8 on Ampere): not missing, absent
    not_in_hardware: tuple[str, ...] = field(default=(), compare=False)
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # catalog column -> source
    filled: dict[str, str] = field(default_factory=dict, compare=False)  # column -> part it was taken from
    resolved_as: str = field(default="", compare=False)  # the assumption made in reading the name given
    extra: dict = field(default_factory=dict, compare=False)

    def peak_used(self, precision: str) -> tuple[str, float]:
        """(peak column, dense TFLOP/s) that matmuls at a training precision run at, with the fallbacks of
        PEAK_FALLBACK when the part has no figure for it. 'nvfp4'/'mxfp4' read the fp4 column."""
        col = PEAK_COLUMN.get(precision, precision)
        for p in PEAK_FALLBACK.get(col, (col,)) + PEAK_LAST_RESORT:
            v = self.peak_tflops.get(p)
            if v:
                return p, float(v)
        raise InputError("gpu", f"GPU '{self.name}' has no peak TFLOP/s figure for {precision}"
                         + (f" (missing: {', '.join(self.missing)})" if self.missing else "")
                         + "; give one with --peak-tflops or a --gpu-file")

    def tflops(self, precision: str) -> float:
        """Dense peak TFLOP/s at a training precision, or the nearest the part has (`peak_used`)."""
        return self.peak_used(precision)[1]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra", None)
        d["missing"] = list(self.missing)
        d["not_in_hardware"] = list(self.not_in_hardware)
        if not self.resolved_as:
            d.pop("resolved_as")
        return d


def _num(s: str | None) -> float:
    """The number a catalog cell leads with ("989 (dense)" -> 989.0); 0 for an empty cell."""
    m = re.match(r"\s*[-+]?\d+(\.\d+)?([eE][-+]?\d+)?", s or "")
    return float(m.group(0)) if m else 0.0


def _items(s: str | None) -> list[str]:
    """A ';'-separated catalog cell as its stripped items."""
    return [x.strip() for x in (s or "").split(";") if x.strip()]


def parse_figure_sources(text: str) -> dict[str, str]:
    """`figure_sources` cell -> {column: source}: 'col,col: source | col: source'."""
    out: dict[str, str] = {}
    for part in (text or "").split(" | "):
        if ":" not in part:
            continue
        cols, src = part.split(":", 1)
        for c in cols.split(","):
            if c.strip():
                out[c.strip()] = src.strip()
    return out


def missing_columns(spec: GPUSpec) -> set[str]:
    """The catalog columns named in `missing` (without their reasons)."""
    return {m.split("(")[0].strip() for m in spec.missing}


@dataclass(frozen=True)
class Family:
    """A name that covers several catalog variants, and the variant it is read as (catalog data)."""

    name: str
    default: str
    reason: str


@dataclass(frozen=True)
class _Catalog:
    gpus: dict[str, GPUSpec]
    families: dict[str, Family]  # squashed family name -> family
    aliases: dict[str, str]  # squashed alias -> catalog name


def _row_spec(row: dict[str, str]) -> GPUSpec:
    peaks = {p: _num(row.get(f"{p}_tflops")) for p in PRECISIONS}
    return GPUSpec(
        name=row["name"].strip(), peak_tflops={k: v for k, v in peaks.items() if v > 0},
        **{k: _num(row.get(k)) for k in ("memory_gib", "memory_bandwidth_gbs", "tdp_w", "matmul_efficiency")},
        **{k: row.get(k, "") for k in ("vendor", "architecture", "source", "notes")},
        intra_node_gbs=_num(row.get("intra_node_gbs_bidir")) / 2.0,
        inter_node_gbps=_num(row.get("inter_node_gbps_per_gpu")),
        host_link_gbs=_num(row.get("host_link_gbs_bidir")) / 2.0,
        intra_node_link=row.get("intra_node_interconnect", ""),
        nvlink_domain_gpus=int(_num(row.get("nvlink_domain_gpus"))),
        missing=tuple(_items(row.get("missing"))), not_in_hardware=tuple(_items(row.get("not_in_hardware"))),
        sources=parse_figure_sources(row.get("figure_sources", "")),
    )


def _fill(spec: GPUSpec, row: dict[str, str], sibling: GPUSpec, sibling_row: dict[str, str]) -> GPUSpec:
    """Take the FILLABLE figures no source gives for this part from its `fill_from` sibling."""
    absent = set(spec.not_in_hardware)
    cols = [c for c in FILLABLE_COLUMNS if not _num(row.get(c)) and _num(sibling_row.get(c))
            and c.removesuffix("_tflops") not in absent]
    if not cols:
        return spec
    d = {c: sibling_row[c] for c in cols}
    filled = _row_spec({**row, **d})
    return replace(filled, missing=spec.missing, not_in_hardware=spec.not_in_hardware, sources=spec.sources,
                   filled={c: sibling.name for c in cols})


@lru_cache(maxsize=1)
def _load_catalog() -> _Catalog:
    path = "tuneplan/data/gpus.csv"
    import csv

    from tuneplan.data import read_text

    rows = {r["name"].strip(): r for r in csv.DictReader(read_text("gpus.csv").splitlines())}
    gpus = {name: _row_spec(r) for name, r in rows.items()}
    families: dict[str, Family] = {}
    aliases: dict[str, str] = {}
    part_keys = {_squash(k) for k in rows}  # a family name must not be a part's name
    for line, (name, r) in enumerate(rows.items(), start=2):
        fill = (r.get("fill_from") or "").split(":", 1)[0].strip()
        if fill:
            if fill not in rows:
                raise DataFileError(path, line, f"{name}: fill_from names unknown GPU '{fill}'")
            gpus[name] = _fill(gpus[name], r, gpus[fill], rows[fill])
        reason = (r.get("default_reason") or "").strip()
        for fam in _items(r.get("default_for")):
            if not reason:
                raise DataFileError(path, line, f"{name}: default_for without a default_reason")
            key = _squash(fam)
            if key in families or key in part_keys:
                raise DataFileError(path, line, f"{name}: family name '{fam}' is claimed twice or is a part name")
            families[key] = Family(fam, name, reason)
        for a in _items(r.get("aliases")):
            aliases[_squash(_strip_vendor(a))] = name
    return _Catalog(gpus, families, aliases)


def gpu_catalog() -> dict[str, GPUSpec]:
    """The shipped GPU catalog, by name."""
    return _load_catalog().gpus


def gpu_families() -> dict[str, Family]:
    """The catalog's family names (e.g. 'A100-80GB') and the variant each is read as, by family name."""
    return {f.name: f for f in _load_catalog().families.values()}


def names_catalog_part(name: str) -> bool:
    """Whether `name` reads as a catalog GPU by itself (its name in any spelling, an alias or a family name):
    a user entry under it would replace the catalog's figures wherever that GPU is named."""
    cat = _load_catalog()
    sq = _squash(_strip_vendor(str(name)))
    return sq in cat.aliases or sq in cat.families or any(_squash(k) == sq for k in cat.gpus)


def user_gpu_dir() -> Path:
    """Where `tuneplan probe` saves the user's own GPU entries."""
    return Path(os.environ.get("TUNEPLAN_HOME") or Path.home() / ".tuneplan") / "gpus"


def _str_tuple(v) -> tuple[str, ...]:
    if isinstance(v, str):
        return tuple(_items(v))
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else ()


def _str_map(v) -> dict[str, str]:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


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
    figures = {k: float(d.get(k, 0) or 0) for k in ("memory_gib", "memory_bandwidth_gbs", "tdp_w",
                                                     "matmul_efficiency", "intra_node_gbs", "inter_node_gbps",
                                                     "host_link_gbs")}
    for key in ("memory_gib", "memory_bandwidth_gbs"):
        if figures[key] <= 0:
            raise InputError(key, "must be > 0")
    if not 0 <= figures["matmul_efficiency"] <= 1:
        raise InputError("matmul_efficiency", "must be between 0 and 1 (achievable / datasheet matmul TFLOP/s; "
                                              "0 or absent: not measured)")
    texts = {k: str(d.get(k, "")) for k in ("intra_node_link", "vendor", "architecture", "notes")}
    return GPUSpec(
        name=name, peak_tflops=peaks, **figures, **texts, source=str(d.get("source", source)),
        nvlink_domain_gpus=int(float(d.get("nvlink_domain_gpus", 0) or 0)),
        missing=_str_tuple(d.get("missing")), not_in_hardware=_str_tuple(d.get("not_in_hardware")),
        sources=_str_map(d.get("sources")), filled=_str_map(d.get("filled")),
        resolved_as=str(d.get("resolved_as") or ""),
        extra={k: v for k, v in d.items() if k not in GPUSpec.__dataclass_fields__},
    )


def load_gpu_file(path: str | Path) -> GPUSpec:
    """Read a user's GPU from YAML or JSON."""
    p = Path(path)
    if not p.exists():
        raise InputError("gpu-file", f"no such file: {p}")
    text = read_user_text(p, "gpu-file", "GPU file (YAML or JSON)", MAX_CONFIG_FILE_BYTES)
    try:
        d = load_bounded_json(text) if p.suffix.lower() == ".json" else load_bounded_yaml(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is reported with the file
        raise DataFileError(str(p), getattr(getattr(exc, "problem_mark", None), "line", None),
                            f"cannot parse GPU file: {exc}".splitlines()[0]) from None
    return gpu_from_dict(d, source=str(p))


def user_gpus() -> dict[str, GPUSpec]:
    """The GPU entries `tuneplan probe` saved (unreadable ones skipped), by name."""
    out: dict[str, GPUSpec] = {}
    d = user_gpu_dir()
    for p in sorted(d.glob("*.y*ml")) + sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            g = load_gpu_file(p)
        except InputError:
            continue
        out[g.name] = g
    return out


_VENDOR_PREFIX = re.compile(r"^((nvidia|amd|intel|tesla|geforce|instinct|habana)[-_ ])+", re.I)
"""Vendor and product-line words a GPU name may start with ("NVIDIA Tesla V100", "AMD Instinct MI300X")."""

_GPU_MEM_SUFFIX = re.compile(r"^(.+?)[-_ ]?(\d+(?:\.\d+)?)\s*GB$", re.IGNORECASE)

UNKNOWN_GPU_HINT = ("see `tuneplan gpus`; or describe your own GPU: --gpu-file my-gpu.yaml (keys of "
                    "`tuneplan gpus --json`), or --peak-tflops --memory-gib --bandwidth-gbs")


LOCAL_GPU_HINT = ("a profiled machine's entry, which `tuneplan probe` saves: run `tuneplan probe` first (on the "
                  "machine the rows were measured on, or copy its entry to this one)")
"""The hint of an unknown `local-...` GPU: rows `tuneplan profile` wrote, read before any probe saved the entry."""


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _strip_vendor(name: str) -> str:
    return _VENDOR_PREFIX.sub("", name.strip())


def _tokens(s: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", s.lower()) if t]


def _candidates(n: str, catalog: dict[str, GPUSpec]) -> list[str]:
    """Catalog names holding every token of `n`: as whole tokens when any does ('L40' -> L40-48GB, not
    L40S), else as substrings ('RTX 4090' -> RTX4090-24GB)."""
    tokens = _tokens(n)
    if not tokens:
        return []
    whole = [k for k in catalog if set(tokens) <= set(_tokens(k))]
    if whole:
        return whole
    return [k for k in catalog if all(t in _squash(k) for t in tokens)]


def family_of(name: str) -> Family | None:
    """The catalog family a name denotes ('A100-80GB', 'NVIDIA H100'), or None."""
    return _load_catalog().families.get(_squash(_strip_vendor(str(name))))


def _family_default(name: str, fam: Family, variants: list[str], strict: bool,
                    catalog: dict[str, GPUSpec]) -> GPUSpec:
    others = [v for v in variants if v != fam.default]
    if strict:
        raise InputError("gpu", f"'{name}' names a GPU family ({', '.join([fam.default, *others])}); "
                         f"--strict-names wants the exact variant (it would be read as {fam.default})")
    also = f"; other variants: {', '.join(others)}" if others else ""
    return replace(catalog[fam.default], resolved_as=(
        f"GPU '{name}' read as {fam.default}: {fam.reason}{also} (name the variant, or --strict-names "
        "to refuse family names)"))


def resolve_gpu(name: str, strict: bool = False) -> GPUSpec:
    """A GPU by catalog name, alias or vendor spelling (NVIDIA-A100-SXM4-80GB -> A100-SXM4-80GB).

    A family name the catalog gives a default variant for (A100, A100-80GB, H100...) resolves to it, and
    the returned spec's `resolved_as` says so; `strict=True` refuses such names instead. A name matching
    several parts without a default is ambiguous; one matching nothing is unknown (closest names listed).
    """
    if not name or not str(name).strip():
        raise InputError("gpu", "is empty")
    cat = _load_catalog()
    catalog = {**cat.gpus, **user_gpus()}
    if name in catalog:
        return catalog[name]
    n = _strip_vendor(str(name))
    sq = _squash(n)
    exact = [k for k in catalog if _squash(k) == sq]
    if len(exact) == 1:
        return catalog[exact[0]]
    if sq in cat.aliases:
        return catalog[cat.aliases[sq]]
    cands = _candidates(n, catalog)
    if sq in cat.families:
        return _family_default(str(name), cat.families[sq], cands, strict, catalog)
    if len(cands) == 1:
        return catalog[cands[0]]
    m = _GPU_MEM_SUFFIX.match(n)
    if m:  # 'GB300-288GB', 'H100-96GB': the base name, narrowed by the memory size
        base, mem = m.group(1), float(m.group(2))
        pool = cands or _candidates(base, catalog)
        close = [c for c in pool if catalog[c].memory_gib and abs(catalog[c].memory_gib - mem) <= 0.1 * mem]
        if len(close) == 1:
            return catalog[close[0]]
        if len(close) > 1:
            cands = close
    if len(cands) > 1:
        raise AmbiguousNameError("gpu", str(name), cands)
    hint = LOCAL_GPU_HINT if str(name).strip().lower().startswith("local-") else UNKNOWN_GPU_HINT
    raise UnknownNameError("gpu", str(name), catalog, what="GPU", hint=hint)


def gpu_assumptions(gpu: GPUSpec, precision: str = "bf16", nodes: int = 1) -> list[str]:
    """What was assumed about a GPU for an estimate: the variant a family name was read as, figures taken
    from a sibling part, a peak taken from another precision, a missing TDP, a missing network figure."""
    out: list[str] = []
    if gpu.resolved_as:
        out.append(gpu.resolved_as + ".")
    for sib in dict.fromkeys(gpu.filled.values()):
        cols = ", ".join(c for c, s in gpu.filled.items() if s == sib)
        out.append(f"{gpu.name}: no source gives {cols}; taken from {sib} (its catalog fill_from).")
    col = PEAK_COLUMN.get(precision, precision)
    try:
        used, value = gpu.peak_used(precision)
    except InputError:
        used, value = col, 0.0
    if value:
        power = f", {gpu.tdp_w:g} W TDP" if gpu.tdp_w > 0 else ""
        where = (" (catalog figures; each one's source in `tuneplan gpus --json`)"
                 if gpu_catalog().get(gpu.name) == gpu else f" (from {gpu.source})" if gpu.source else "")
        out.append(f"GPU {gpu.name}: {value:g} TFLOP/s dense {used} peak, {gpu.memory_gib:g} GiB, "
                   f"{gpu.memory_bandwidth_gbs:g} GB/s{power}{where}.")
    if used != col and value:
        why = ("has no " + col + " units" if col in gpu.not_in_hardware else
               "has no " + col + " figure from any source")
        out.append(f"{gpu.name} {why}: {precision} matmuls costed at its {used} peak ({value:g} TFLOP/s dense).")
    src = gpu.sources.get(f"{used}_tflops", "")
    if src.upper().startswith("DERIVED"):
        out.append(f"{gpu.name}'s {used} peak ({value:g} TFLOP/s) is derived, not a datasheet figure: {src}.")
    if gpu.tdp_w <= 0:
        out.append(f"{gpu.name}: no source gives its TDP; energy assumes {DEFAULT_TDP_W:.0f} W.")
    if nodes > 1 and gpu.inter_node_gbps <= 0:
        out.append(f"{gpu.name}: no source gives its network between nodes; the physics' default per-GPU "
                   "network figure is used.")
    return out


def has_known_power(gpu: GPUSpec) -> bool:
    """Whether the part's TDP comes from a source (or from its stated sibling), not the DEFAULT_TDP_W fill-in."""
    return gpu.tdp_w > 0
