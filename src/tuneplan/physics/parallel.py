"""Parallelism terms, vectorised (seconds and bytes): context parallel, tensor parallel exposure, pipeline
schedules (bubble, in-flight activations), expert all-to-alls and hierarchical data-parallel collectives.
"""

from __future__ import annotations

import numpy as np

ULYSSES_ALL_TO_ALLS_FWD = 4.0
"""All-to-alls per attention layer forward under Ulysses (count): q, k, v scattered by heads and
gathered by sequence, and the output back (Jacobs et al., 'DeepSpeed Ulysses', 2023, Fig. 2)."""


def domain_gpus(gpus, nodes, nvlink_domain):
    """Consecutive GPUs joined by the fast link (NVLink / xGMI switch): the node, or the part's NVLink
    domain where it spans nodes (GB200 / GB300 NVL72: 72 GPUs over 4-GPU trays), at most all GPUs."""
    return np.minimum(np.maximum(gpus / np.maximum(nodes, 1.0), nvlink_domain), gpus)


def link_bandwidth(group, gpus_per_node, intra_bw, inter_bw):
    """Per-GPU bandwidth of a collective over `group` consecutive ranks: the intra-node link when the
    group fits in a node, else the slower of it and the per-GPU network share."""
    return np.where(group > gpus_per_node, np.minimum(intra_bw, inter_bw), intra_bw)


def ring_attention_exposed(kv_bytes_local, cp, attn_seconds, bw, c):
    """Exposed time of ring attention's K/V exchange for one layer, one direction (s): cp - 1 steps passing
    the local K/V block on, overlapped with the attention of the block in hand (Liu et al., 'Ring
    Attention', 2023; Megatron-Core's CP): max(comm - attention, 0) plus the per-step latency."""
    steps = np.maximum(cp - 1.0, 0.0)
    comm = steps * kv_bytes_local / (bw * c.comm_efficiency)
    return np.maximum(comm - attn_seconds, 0.0) + steps * c.comm_latency_s


def ulysses_seconds(tokens_local, q_dim, kv_dim, el_bytes, cp, bw, c):
    """Ulysses all-to-alls for one attention layer forward (bytes each GPU sends, seconds): q, k, v and the
    output, each moving (cp - 1)/cp of the local tensor; not overlapped (the attention waits for them)."""
    p = np.maximum(cp, 1.0)
    volume = tokens_local * (2.0 * q_dim + 2.0 * kv_dim) * el_bytes * (p - 1.0) / p
    return volume, np.where(p > 1, volume / (bw * c.comm_efficiency) + ULYSSES_ALL_TO_ALLS_FWD * c.comm_latency_s,
                            0.0)


def expert_all_to_all_parts(nbytes, ep, etp, gpus_per_node, intra_bw, inter_bw, c):
    """One expert-parallel all-to-all of `nbytes` per GPU: (bytes sent inside the domain, across, seconds
    of each with a latency per peer). Megatron-Core orders expert ranks etp innermost, then ep
    (parallel_state RankGenerator, tp-cp-ep-dp-pp), so a domain holds gpus_per_node / etp of an EP group:
    their share of the bytes goes over the fast link, the rest over the GPU's network share."""
    p = np.maximum(ep, 1.0)
    in_node = np.clip(np.floor(gpus_per_node / np.maximum(etp, 1.0)), 1.0, p)
    eff, lat = c.comm_efficiency, c.comm_latency_s
    b_in, b_out = nbytes * (in_node - 1.0) / p, nbytes * (p - in_node) / p
    on = p > 1
    return (np.where(on, b_in, 0.0), np.where(on, b_out, 0.0),
            np.where(on, b_in / (intra_bw * eff) + (in_node - 1.0) * lat, 0.0),
            np.where(on, b_out / (inter_bw * eff) + (p - in_node) * lat, 0.0))


def expert_all_to_all(nbytes, ep, etp, gpus_per_node, intra_bw, inter_bw, c):
    """Seconds of one expert-parallel all-to-all (`expert_all_to_all_parts`): the two domains' sends run
    at once (NCCL posts every peer's send together), so the slower transfer plus a latency per peer."""
    b_in, b_out, _, _ = expert_all_to_all_parts(nbytes, ep, etp, gpus_per_node, intra_bw, inter_bw, c)
    eff = c.comm_efficiency
    return np.where(ep > 1, np.maximum(b_in / (intra_bw * eff), b_out / (inter_bw * eff))
                    + (np.maximum(ep, 1.0) - 1.0) * c.comm_latency_s, 0.0)


def pipeline_bubble_fraction(pp, vpp):
    """Idle share of a pipeline's schedule per micro-batch slot: (pp - 1) / vpp micro-batch times for
    1F1B (vpp = 1) and the interleaved schedule with vpp virtual stages per rank (Narayanan et al.,
    'Efficient Large-Scale Language Model Training on GPU Clusters', 2021, Sec. 2.2)."""
    return (pp - 1.0) / np.maximum(vpp, 1.0)


def pipeline_inflight_factor(pp, vpp, grad_accum):
    """Micro-batches' activations the first pipeline stage holds, in units of its own layers' share
    for one micro-batch, as megatron-core's schedules run them (pipeline_parallel/schedules.py,
    get_pp_rank_microbatches, 0.13): 1F1B warms up pp - 1 micro-batches and holds one more, min(pp, m);
    the interleaved schedule warms up 2 (pp - 1) + (vpp - 1) pp model chunks (microbatch_group_size_per_
    vp_stage = pp, its default) of 1/vpp of the stage's layers and holds one more, capped at all m x vpp
    chunks: min(pp + (pp - 1)/vpp, m) (Korthikanti et al. 2022, Sec. 4.2.3: L (1 + (p - 1)/(p v)))."""
    v = np.maximum(vpp, 1.0)
    one_f_one_b = np.minimum(pp, grad_accum)
    interleaved = np.minimum(pp + (pp - 1.0) / v, grad_accum)
    return np.where(pp > 1, np.where(v > 1, interleaved, one_f_one_b), 1.0)


def pipeline_p2p_bandwidth(tp, cp, dp, gpus_per_node, intra_bw, inter_bw):
    """Bandwidth of a pipeline stage's send/recv to the next: Megatron-Core places pipeline ranks
    outermost (order tp-cp-ep-dp-pp), tp x cp x dp ranks apart, so the next stage is on another node
    once that stride reaches the node's GPUs; then the GPU's network share carries it."""
    return np.where(tp * cp * dp >= gpus_per_node, np.minimum(intra_bw, inter_bw), intra_bw)


def tp_exposed(t_tp, t_gemm, overlap, c):
    """Tensor-parallel communication left exposed (s): with overlap (userbuffers, async TP) up to
    overlap_fraction of it hides behind the GEMMs."""
    hidden = np.where(overlap > 0, np.minimum(t_tp * c.overlap_fraction, t_gemm), 0.0)
    return t_tp - hidden


def hierarchical_allreduce_parts(nbytes, dp, gpus_per_node, intra_bw, inter_bw, c):
    """All-reduce over dp ranks spanning nodes, hierarchically (NCCL across NICs; Sergeev & Del Balso,
    Horovod 2018): reduce-scatter in the node, all-reduce of each GPU's 1/g shard across nodes, all-gather
    in the node. (bytes each GPU sends inside the domain, across, seconds inside, across)."""
    g = np.maximum(np.minimum(dp, gpus_per_node), 1.0)
    n = np.maximum(dp / g, 1.0)
    eff = c.comm_efficiency
    b_in = 2.0 * (g - 1.0) / g * nbytes
    b_out = np.where(n > 1, 2.0 * (n - 1.0) / n * (nbytes / g), 0.0)
    return (b_in, b_out, b_in / (intra_bw * eff) + 2.0 * (g - 1.0) * c.comm_latency_s,
            np.where(n > 1, b_out / (inter_bw * eff) + 2.0 * (n - 1.0) * c.comm_latency_s, 0.0))
