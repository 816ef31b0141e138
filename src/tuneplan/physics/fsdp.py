"""What FSDP holds of the gradients beyond a shard per GPU (unsharded under no_sync; a flat parameter's
whole gradient where adapters share it with frozen weights), as masks and counts for memory.py and step.py.
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.codes import ShardingCode, full_weights
from tuneplan.physics.stack import get

Arrays = dict[str, np.ndarray]


def accumulated_unsharded(a: Arrays, g_div: np.ndarray) -> np.ndarray:
    """Where each GPU holds the unsharded gradients through the backward: FSDP with sharded gradients
    (`g_div` > 1) accumulating under no_sync (HF Trainer / accelerate, Lightning Fabric; torch's
    FSDP.no_sync: "FSDP will accumulate the full model gradients (instead of gradient shards) until the
    eventual sync"). DeepSpeed ZeRO reduces every micro-batch into its partitions: never."""
    return (get(a, "accum_no_sync") > 0) & (get(a, "fsdp") > 0) & (np.asarray(a["grad_accum"]) > 1) & (g_div > 1)


def gradient_reductions(a: Arrays) -> np.ndarray:
    """Reduce-scatters of the gradients per optimizer step (count): one per micro-batch, or one at the
    last micro-batch where FSDP accumulates under no_sync."""
    ga = np.asarray(a["grad_accum"], dtype=float)
    return np.where((get(a, "accum_no_sync") > 0) & (get(a, "fsdp") > 0), 1.0, ga)


def flat_parameter_gradients(a: Arrays) -> np.ndarray:
    """Where a PEFT method's gradients cover the frozen block weights too: adapters inside each block's FSDP1
    flat parameter (`fsdp_adapter_wrap` with-block) get the whole flat parameter's gradient (torch FSDP:
    mixing frozen and non-frozen parameters in one unit gives "higher than expected gradient memory usage")."""
    peft = ~full_weights(np.asarray(a["method_code"]))
    sharded = np.asarray(a["sharding"]) >= ShardingCode.ZERO2
    return (peft & sharded & (get(a, "fsdp") > 0) & (get(a, "adapters_in_blocks") > 0)
            & (np.asarray(a["params_frozen_linear"]) > 0) & (np.asarray(a["params_trainable"]) > 0))
