"""The integer codes a job's method, sharding and optimizer take in the flat physics arrays (one
float column each, so that thousands of configurations are evaluated at once). Defined here once;
every formula compares against these names, never against a bare number."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

MethodCode = IntEnum("MethodCode", "FULL LORA QLORA GPTQ_LORA ALORA DORA FREEZE", start=0)


class ShardingCode(IntEnum):
    """Normalised sharding (`JobSpec.sharding_kind`): what each data-parallel rank keeps whole."""

    NONE = 0  # DDP, or one rank: everything replicated
    ZERO1 = 1  # optimizer states sharded
    ZERO2 = 2  # + gradients
    ZERO3 = 3  # + weights (FSDP full shard)
    HYBRID = 4  # ZeRO-3 within a node, replicated across nodes
    OFFLOAD = 5  # ZeRO-3 with states and weights on the host


OptimizerCode = IntEnum("OptimizerCode", "ADAMW ADAMW_8BIT PAGED_ADAMW_8BIT SGD SGD_MOMENTUM ADAFACTOR GALORE_ADAMW "
                        "ADAMW_4BIT", start=0)


def _by_name(codes: type[IntEnum]) -> dict[str, IntEnum]:
    """The CLI's name of each code (GPTQ_LORA: gptq-lora) -> the code."""
    return {c.name.lower().replace("_", "-"): c for c in codes}


METHOD_CODES = {**_by_name(MethodCode),
                # physics/peft_methods.py (rslora, pissa, olora, eva, loftq take their LoRA equivalent's code)
                "adalora": 7, "lora-fa": 8, "ia3": 9, "loha": 10, "lokr": 11, "oft": 12, "boft": 13, "vera": 14,
                "fourierft": 15, "hra": 16, "bone": 17, "prefix-tuning": 18, "prompt-tuning": 19, "p-tuning": 20,
                "ln-tuning": 21, "adapter": 22}
OTHER_PEFT_CODES = 7
"""Codes from here on are the PEFT methods outside the LoRA family (physics/peft_methods.py)."""
SHARDING_CODES = {"none": ShardingCode.NONE, "ddp": ShardingCode.NONE, "zero1": ShardingCode.ZERO1,
                  "zero2": ShardingCode.ZERO2, "zero3": ShardingCode.ZERO3, "hybrid": ShardingCode.HYBRID,
                  "zero3-offload": ShardingCode.OFFLOAD, "fsdp-offload": ShardingCode.OFFLOAD}
OPTIMIZER_CODES = _by_name(OptimizerCode)


def lora_family(method_code: np.ndarray) -> np.ndarray:
    """Rows whose method trains adapters over frozen weights (LoRA, QLoRA, GPTQ-LoRA, aLoRA, DoRA)."""
    return (method_code >= MethodCode.LORA) & (method_code <= MethodCode.DORA)


def full_weights(method_code: np.ndarray) -> np.ndarray:
    """Rows whose method trains the model's own weights (full fine-tuning, freeze-tuning)."""
    return (method_code == MethodCode.FULL) | (method_code == MethodCode.FREEZE)
