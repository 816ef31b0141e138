"""Parallelism terms: context parallel (ring attention, Ulysses all-to-all), tensor / sequence
parallel exposure, pipeline schedules (1F1B, interleaved) with their bubble and in-flight
activations, and hierarchical data-parallel collectives across nodes. Vectorised; seconds and bytes.
"""

from __future__ import annotations

import numpy as np

ULYSSES_ALL_TO_ALLS_FWD = 4.0
"""All-to-alls per attention layer forward under Ulysses (count): q, k, v scattered by heads and
gathered by sequence, and the output back (Jacobs et al., 'DeepSpeed Ulysses', 2023, Fig. 2)."""


def link_bandwidth(group, gpus_per_node, intra_bw, inter_bw):
    """Per-GPU bandwidth of a collective over `group` consecutive ranks: the intra-node link when the
    group fits in a node, else the slower of it and the per-GPU network share."""
    return np.where(group > gpus_per_node, np.minimum(intra_bw, inter_bw), intra_bw)


def ring_attention_exposed(kv_bytes_local, cp, attn_seconds, bw, c):
    """Exposed time of ring attention's K/V exchange for one layer, one direction (s): cp - 1 steps each
    passing the local K/V block (kv_bytes_local) to the next rank, overlapped with the attention of the
    block in hand (Liu et al., 'Ring Attention', 2023; Megatron-Core's CP overlaps the P2P with
    compute): max(comm - attention, 0) plus the per-step latency."""
    steps = np.maximum(cp - 1.0, 0.0)
    comm = steps * kv_bytes_local / (bw * c.comm_efficiency)
    return np.maximum(comm - attn_seconds, 0.0) + steps * c.comm_latency_s


def ulysses_seconds(tokens_local, q_dim, kv_dim, el_bytes, cp, bw, c):
    """Ulysses all-to-all time for one attention layer forward (s): q, k, v in and the output back,
    each moving (cp - 1)/cp of the local tensor; not overlapped (the attention waits for them)."""
    p = np.maximum(cp, 1.0)
    volume = tokens_local * (2.0 * q_dim + 2.0 * kv_dim) * el_bytes * (p - 1.0) / p
    return np.where(p > 1, volume / (bw * c.comm_efficiency) + ULYSSES_ALL_TO_ALLS_FWD * c.comm_latency_s, 0.0)


def pipeline_bubble_fraction(pp, vpp):
    """Idle share of a pipeline's schedule per micro-batch slot: (pp - 1) / vpp micro-batch times for
    1F1B (vpp = 1) and the interleaved schedule with vpp virtual stages per rank (Narayanan et al.,
    'Efficient Large-Scale Language Model Training on GPU Clusters', 2021, Sec. 2.2)."""
    return (pp - 1.0) / np.maximum(vpp, 1.0)


def pipeline_inflight_factor(pp, vpp, grad_accum):
    """Micro-batches' activations the first pipeline stage holds, in units of its own layers' share
    for one micro-batch: min(pp, m) under 1F1B; interleaving adds (pp - 1)/(pp x vpp) of it
    (Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer Models', 2022,
    Sec. 4.2.3: L (1 + (p - 1)/(p m)) layers' activations)."""
    base = np.where(pp > 1, np.minimum(pp, grad_accum), 1.0)
    extra = np.where((pp > 1) & (vpp > 1), base * (pp - 1.0) / (pp * np.maximum(vpp, 1.0)), 0.0)
    return base + extra


def tp_exposed(t_tp, t_gemm, overlap, c):
    """Tensor-parallel communication left exposed (s): with communication overlap (userbuffers,
    async TP) up to overlap_fraction of it hides behind the GEMMs; without, all of it shows."""
    hidden = np.where(overlap > 0, np.minimum(t_tp * c.overlap_fraction, t_gemm), 0.0)
    return t_tp - hidden


def hierarchical_allreduce(nbytes, dp, gpus_per_node, intra_bw, inter_bw, c):
    """All-reduce over dp ranks that span nodes, hierarchically (s): reduce-scatter inside each node,
    all-reduce of each GPU's 1/g shard across the nodes over its own network share, all-gather inside
    the node (NCCL's multi-ring / tree across NICs; Sergeev & Del Balso, Horovod 2018). Within one
    node it is the plain ring."""
    g = np.maximum(np.minimum(dp, gpus_per_node), 1.0)
    n = np.maximum(dp / g, 1.0)
    eff = c.comm_efficiency
    intra = 2.0 * (g - 1.0) / g * nbytes / (intra_bw * eff) + 2.0 * (g - 1.0) * c.comm_latency_s
    inter = np.where(n > 1, 2.0 * (n - 1.0) / n * (nbytes / g) / (inter_bw * eff) + 2.0 * (n - 1.0) * c.comm_latency_s,
                     0.0)
    return intra + inter

