"""Communication by domain: each parallel dimension's collectives split into what runs inside the fast-link
domain (the NVLink / xGMI switch: the node, or GB200 / GB300 NVL72's 72 GPUs) and what crosses domains over
the network, as bytes each GPU sends and seconds before any overlap with compute, per optimizer step.

step.py records them under `comm_<kind>_<inside|across>_<bytes|s>`; `by_domain` reads one row of them back
for the estimate's JSON.
"""

from __future__ import annotations

import numpy as np

KINDS = {
    "tensor": "tensor parallel all-reduces (sequence parallel: all-gathers + reduce-scatters)",
    "context": "context parallel K/V ring send/recv (Ulysses: all-to-alls)",
    "expert": "expert parallel token dispatch/combine all-to-alls",
    "expert_tensor": "expert tensor parallel all-gathers / reduce-scatters of the routed tokens",
    "pipeline": "pipeline send/recv of stage activations and their gradients",
    "data": "data parallel gradient reductions and sharded weight gathers",
}
"""The collective kinds recorded, with what each holds."""
DOMAINS = ("inside", "across")


def record(parts: dict | None, kind: str, b_in, b_out, s_in, s_out, times=1.0) -> None:
    """Add a collective's bytes sent per GPU and seconds inside / across domains (x `times` calls) to
    `parts` (None: nothing recorded)."""
    if parts is None:
        return
    for dom, b, s in (("inside", b_in, s_in), ("across", b_out, s_out)):
        for unit, v in (("bytes", b), ("s", s)):
            key = f"comm_{kind}_{dom}_{unit}"
            parts[key] = parts.get(key, 0.0) + np.asarray(v, dtype=float) * times


def record_where(parts: dict | None, kind: str, across, nbytes, seconds, times=1.0) -> None:
    """A collective whose every transfer takes one link: across domains where `across`, else inside."""
    record(parts, kind, np.where(across, 0.0, nbytes), np.where(across, nbytes, 0.0),
           np.where(across, 0.0, seconds), np.where(across, seconds, 0.0), times)


def domain_seconds(out: dict) -> tuple[str, ...]:
    """The keys of `out` holding seconds by domain (a learned throughput correction rescales them)."""
    return tuple(k for k in out if k.startswith("comm_") and k.endswith("_s"))


def scaled(parts: dict, factor) -> dict:
    """The parts times `factor` (a micro-step's times the micro-steps of an optimizer step)."""
    return {k: v * factor for k, v in parts.items()}


def by_domain(out: dict, row: int = 0) -> dict[str, dict[str, float]]:
    """One row's communication by kind and domain (GB sent per GPU, seconds before overlap, per
    optimizer step), the kinds with any traffic only."""
    res = {}
    for kind in KINDS:
        vals = {}
        for dom in DOMAINS:
            for unit, name, div in (("bytes", "gb", 1e9), ("s", "s", 1.0)):
                v = np.ravel(out.get(f"comm_{kind}_{dom}_{unit}", 0.0))
                vals[f"{dom}_domain{'s' if dom == 'across' else ''}_{name}"] = float(v[row if v.size > 1 else 0]) / div
        if any(vals.values()):
            res[kind] = vals
    return res
