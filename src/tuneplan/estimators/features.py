"""Physical features for the residual models: they describe the work and the hardware, not the
names, so a correction learned on some models and GPUs transfers to others."""

from __future__ import annotations

import numpy as np

from tuneplan.physics.codes import ShardingCode, lora_family

THROUGHPUT_FEATURES = (
    "log_tokens_per_micro", "log_hidden_per_tp", "log_params_active", "trainable_fraction",
    "log_intensity", "comm_share", "optimizer_share", "dequant_share", "grad_ckpt", "is_lora_family",
    "log_gpus", "log_peak_tflops", "log_bandwidth_gbs", "log_seq_len", "attn_share", "log_grad_accum",
)
MEMORY_FEATURES = (
    "log_tokens_per_micro", "log_hidden_per_tp", "log_params_total", "trainable_fraction", "weights_share",
    "activations_share", "logits_share", "grad_ckpt", "is_lora_family", "quantised", "log_seq_len",
    "log_gpus", "sharded", "variable_shapes", "reports_reserved",
)


def _log(x) -> np.ndarray:
    return np.log(np.maximum(np.asarray(x, dtype=float), 1e-12))


def feature_matrix(a: dict, phys: dict, names: tuple[str, ...]) -> np.ndarray:
    """Rows x features from the arrays and the physics outputs of the same configurations."""
    step = phys["step_s"]
    tokens_micro = a["micro_batch"] * a["seq_len"] / a["cp"]
    alloc = np.maximum(phys["allocated_gib"], 1e-9)
    f = {
        "log_tokens_per_micro": _log(tokens_micro), "log_hidden_per_tp": _log(a["hidden"] / a["tp"]),
        "log_params_active": _log(a["params_active"]), "log_params_total": _log(a["params_total"]),
        "trainable_fraction": a["params_trainable"] / np.maximum(a["params_total"], 1.0),
        "log_intensity": _log(tokens_micro * a["weight_bytes_compute"]),
        "comm_share": phys["communication_s"] / step, "optimizer_share": phys["optimizer_s"] / step,
        "dequant_share": phys["dequant_s"] / step, "grad_ckpt": a["grad_ckpt"],
        "is_lora_family": lora_family(a["method_code"]).astype(float), "log_gpus": _log(a["gpus"]),
        "log_peak_tflops": _log(a["peak_flops"] / 1e12), "log_bandwidth_gbs": _log(a["mem_bw"] / 1e9),
        "log_seq_len": _log(a["seq_len"]), "attn_share": a["attn_flops_per_seq"] * a["seq_len"] / np.maximum(
            a["fwd_block_flops"] + a["attn_flops_per_seq"] * a["seq_len"], 1.0),
        "log_grad_accum": _log(a["grad_accum"]), "weights_share": phys["weights_gib"] / alloc,
        "activations_share": phys["activations_gib"] / alloc, "logits_share": phys["logits_gib"] / alloc,
        "quantised": (a["dequant_bytes"] > 0).astype(float), "sharded": (a["sharding"] >= ShardingCode.ZERO1).astype(float),
        "variable_shapes": np.asarray(a["variable_shapes"], dtype=float),
        # 1 for a peak as reserved / nvidia-smi report it (what an estimate shows), 0 for torch's allocated
        "reports_reserved": np.asarray(a["reports_reserved"] if "reports_reserved" in a
                                       else np.ones(len(step)), dtype=float)}
    return np.column_stack([np.asarray(f[n], dtype=float) for n in names])
