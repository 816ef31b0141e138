"""Low-precision training (fp8, NVFP4, MXFP4) and fp8 base weights: as Transformer Engine / torchao float8
and NVIDIA's NVFP4 recipe run it, only the blocks' linear GEMMs run at low precision (`ops_by_precision`),
with traffic of their own: input and gradient casts, transposed copies, and the weights cast once a step.
"""

from __future__ import annotations

import numpy as np

from tuneplan.errors import InputError

LOW_PRECISION_CODES = {"bf16": 0, "fp16": 0, "fp32": 0, "fp8": 1, "nvfp4": 2, "mxfp4": 2}
"""0: no low-precision GEMMs; 1: fp8 (E4M3/E5M2, per-tensor delayed/current or MXFP8 block scales);
2: fp4 (NVFP4: E2M1 with an fp8 scale per 16 elements and an fp32 per-tensor scale; MXFP4: E2M1
with an E8M0 scale per 32 elements)."""

LOW_PRECISION_GEMM_EFFICIENCY = 0.85
"""Achieved share of the low-precision peak relative to a bf16 GEMM of the same shape: cuBLASLt fp8 GEMMs
reach about 0.68 of the H100's 1,979 TFLOP/s fp8 peak against 0.80 of the bf16 peak (stas00/ml-engineering
MAMF, H100 SXM 794.5/989): 0.68/0.80 = 0.85; the same ratio for fp4 on Blackwell (no public MAMF figure)."""

CAST_BYTES_PER_IO_ELEMENT = {1: 5.0, 2: 4.25}
"""Extra memory traffic per element of each low-precision linear's input and output, per token, one
forward + backward (bytes). fp8: the input cast forward (read 2, write 1, amax fused into the cast),
the output gradient cast backward (read 2, write 1 -> 3 per output element over fwd+bwd with the
input's), and the transposed fp8 copies the weight-gradient GEMM reads (write 1 + read 1) -> about
2 + 3 = 5 per element of input or output. fp4: reads the same bf16 (2), writes 0.5 + one scale byte
per 16 elements (0.0625), plus its transposed copy (0.5625 written and read): 2 + 0.5625 + 1.125 +
0.5625 = 4.25 (Transformer Engine, transformer_engine/pytorch/module/linear.py; NVIDIA, 'Pretraining
LLMs with NVFP4', 2025)."""

WEIGHT_CAST_BYTES = {1: 4.0, 2: 3.25}
"""Traffic per low-precision weight per optimizer step (bytes): read the bf16 weight (2), write the
cast copy and its transpose (fp8: 1 + 1; fp4: 0.5625 x 2 with its scales). Cached across the
micro-batches of a step (TE's is_first_microbatch, NeMo / Megatron-Bridge default)."""

WEIGHT_COPY_BYTES = {0: 0.0, 1: 2.0, 2: 1.125}
"""Memory held per low-precision weight next to its bf16 copy (bytes): the cast weight and its
transpose for the backward GEMM (fp8 1 + 1; fp4 0.5625 + 0.5625 with the block scales)."""

FP8_RECIPE_CODES = {"te": 0, "torchao": 1, "fp8-params": 2}
"""specs.framework.FP8_RECIPES as the arrays' `fp8_recipe` code."""
FP8_RECIPE_WEIGHT_BYTES = {0: (0.0, 2.0), 1: (0.0, 0.0), 2: (1.0, 1.0)}
"""fp8 recipe code -> (bytes the stored weight saves against its 16-bit copy, bytes held beside it) per
linear weight. te: the bf16 weight stays, with its fp8 copy and transpose cached for the step's
micro-batches (1 + 1; Transformer Engine's is_first_microbatch / fp8 weight caching). torchao float8:
the bf16 weight stays and each GEMM casts it on the fly (torchao/float8/float8_linear.py), only one
layer's transient copy, none held. fp8-params: the weight itself is fp8 (2 -> 1: Megatron's
fp8_param_gather, Transformer Engine's fp8_model_init) with its transpose beside it (1)."""


def fp8_weight_bytes(lowp, recipe):
    """Bytes per low-precision linear weight on top of its 16-bit storage: fp8 by recipe
    (FP8_RECIPE_WEIGHT_BYTES), fp4 its cast copies (WEIGHT_COPY_BYTES), less the 16-bit copy under
    fp8-params (Megatron's fp4_param_gather: megatron-core 0.19.2 fp4_utils.py builds the weights under
    Transformer Engine's fp8_model_init with the NVFP4 recipe)."""
    fp8 = np.select([recipe == code for code in FP8_RECIPE_WEIGHT_BYTES],
                    [held - saved for saved, held in FP8_RECIPE_WEIGHT_BYTES.values()], WEIGHT_COPY_BYTES[1])
    fp4 = WEIGHT_COPY_BYTES[2] - np.where(recipe == FP8_RECIPE_CODES["fp8-params"], 2.0, 0.0)
    return np.select([lowp == 1, lowp == 2], [fp8, fp4], 0.0)


SAVED_LINEAR_INPUT_BYTES = {0: 2.0, 1: 1.0, 2: 1.0}
"""Bytes per element of a linear's input kept for its backward (bytes): bf16 2; Transformer Engine
saves the fp8 cast instead (1); the NVFP4 recipe keeps its wgrad operand at 8 bits too (1, taken
conservatively)."""

FP8_WEIGHT_BYTES = 1.0 + 4.0 / 4096
"""fp8 base weights under LoRA (`--quant fp8`, e.g. FP8 checkpoints of DeepSeek-V3, Qwen3-FP8, or
torchao float8 weight-only): 1 byte per weight plus scales (per-channel fp32 over 4,096 inputs, or
DeepSeek's 128 x 128 blocks at 4 bytes / 16,384 weights: below 1/1000 either way) (bytes)."""

FP8_DEQUANT_BYTES = 3.0
"""Traffic per fp8 base weight per pass to dequantise it to bf16 for the GEMM (read 1, write 2; the
GEMM's read of the bf16 copy is the GEMM's own) (bytes)."""


def low_precision_code(precision: str) -> int:
    return LOW_PRECISION_CODES.get(precision, 0)


def linear_tflops(gpu, precision: str) -> tuple[float, str | None]:
    """Dense peak TFLOP/s the low-precision linear layers run at, and the fallback said (or None): fp4
    (nvfp4, mxfp4) at the catalog's fp4 peak, else fp8, else bf16; fp8 at fp8, else bf16 (a GPU without
    the units runs the next precision it has: Transformer Engine needs compute capability >= 8.9 for fp8
    and 10.0 for NVFP4)."""
    peaks = dict(getattr(gpu, "peak_tflops", {}) or {})
    half = "bf16" if peaks.get("bf16") else "fp16"  # a T4 or a V100 has fp16 units only
    bf16 = peaks.get(half)
    order = {"fp8": ("fp8",), "nvfp4": ("fp4", "fp8"), "mxfp4": ("fp4", "fp8")}.get(precision)
    if order is None:
        return float(gpu.tflops(precision)), None
    for i, key in enumerate(order):
        v = peaks.get(key)
        if v:
            note = None if i == 0 else (f"{gpu.name} has no fp4 units in the catalog: {precision} linear layers "
                                        f"costed at its fp8 peak ({float(v):g} TFLOP/s)")
            return float(v), note
    if not bf16:
        raise InputError("precision", f"GPU '{gpu.name}' has no peak TFLOP/s for {precision}, fp8 or bf16")
    return float(bf16), (f"{gpu.name} has no {'/'.join(order)} units in the catalog: {precision} linear layers "
                         f"costed at its {half} peak ({float(bf16):g} TFLOP/s)")


def cast_seconds(io_elements_per_token, tokens, code, bandwidth):
    """Time of the low-precision casts and transposes of one micro-step (s)."""
    per = np.where(code == 1, CAST_BYTES_PER_IO_ELEMENT[1], np.where(code == 2, CAST_BYTES_PER_IO_ELEMENT[2], 0.0))
    return per * io_elements_per_token * tokens / bandwidth


def weight_cast_seconds(linear_params, code, bandwidth):
    """Time of casting the low-precision weights once per optimizer step (s)."""
    per = np.where(code == 1, WEIGHT_CAST_BYTES[1], np.where(code == 2, WEIGHT_CAST_BYTES[2], 0.0))
    return per * linear_params / bandwidth


def ops_by_precision(precision: str, quant: str) -> str:
    """The assumption line: which operations run at which precision."""
    if low_precision_code(precision):
        return (f"{precision}: the transformer blocks' linear layers (q/k/v/o, MLP, experts) run their GEMMs in "
                f"{precision} with cast / scaling traffic ({CAST_BYTES_PER_IO_ELEMENT[low_precision_code(precision)]:g} "
                "bytes per input/output element per token, weights cast once per step); attention, norms, "
                "activations, softmax, embedding, LM head, loss and adapters stay in bf16; the saved linear inputs "
                "are kept at 8 bits; bf16 weights with an fp32 master copy and fp32 optimizer moments.")
    if quant == "fp8":
        return ("fp8 base weights (--quant fp8): 1 byte per frozen block weight plus scales, dequantised to bf16 "
                f"for each GEMM ({FP8_DEQUANT_BYTES:g} bytes of traffic per weight per pass); all compute in bf16.")
    return ""
