"""LoRA target names: the module names users and frameworks give (q_proj, c_attn, w1...) mapped to
tuneplan's short names, and the groups that stand for several (attention, mlp, moe-experts)."""

from __future__ import annotations

from collections.abc import Sequence

TARGET_ALIASES = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "out_proj": "o", "query": "q",
    "key": "k", "value": "v", "qkv_proj": "qkv", "query_key_value": "qkv", "c_attn": "qkv",
    "wqkv": "qkv", "gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate",
    "w3": "up", "w2": "down", "c_fc": "fc1", "c_proj": "fc2", "dense_h_to_4h": "fc1",
    "dense_4h_to_h": "fc2", "fc_in": "fc1", "fc_out": "fc2", "gate_up_proj": "gate_up",
    "router": "router", "attn": "attention", "mlp": "mlp",
}
TARGET_GROUPS = {
    "attention": ("q", "k", "v", "o", "qkv", "q_a", "q_b", "kv_a", "kv_b", "dense"),
    "mlp": ("gate", "up", "down", "fc1", "fc2", "shared_gate", "shared_up", "shared_down", "gate_up"),
    "moe-experts": ("gate", "up", "down"),
}
FUSED_TARGETS = {"q": "qkv", "k": "qkv", "v": "qkv", "gate": "gate_up", "up": "gate_up"}
"""A target named by its part on a model with one fused matrix (Falcon, GPT-2, phi-3...)."""


def normalise_targets(targets: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for t in targets:
        t = t.strip().lower()
        if not t:
            continue
        t = TARGET_ALIASES.get(t, t)
        if t in TARGET_GROUPS:
            out.extend(TARGET_GROUPS[t])
        else:
            out.append(t)
    return tuple(dict.fromkeys(out))
