"""Per-operation costing: GEMMs at a shape-dependent efficiency, attention at FlashAttention's measured
efficiency (a function of the attended span and the head dimension, by kernel and GPU generation),
MoE expert GEMMs at the tokens each expert receives, and the loss / element-wise work as memory
traffic by the kernels the framework runs. Each function is small and vectorised over configurations.
"""

from __future__ import annotations

import numpy as np

from tuneplan.physics.constants import DEFAULT_CONSTANTS, PhysicsConstants

ATTENTION_KERNEL_CODES = {"flash2": 0, "sdpa": 0, "flash3": 1, "te": 1, "eager": 2, "flash1": 3}
"""0: FlashAttention-2 (PyTorch SDPA's flash backend is FA2); 1: Hopper/Blackwell-native kernels
(FlashAttention-3, cuDNN fused attention through Transformer Engine); 2: eager (scores materialised);
3: FlashAttention 1."""

FLASH1_RELATIVE = 0.5
"""FlashAttention 1's speed relative to FlashAttention-2 on the same GPU (fraction): 'FlashAttention-2
... around 2x faster than FlashAttention' (Dao 2023, abstract and Fig. 4-6)."""

GPU_GENERATION_CODES = {"ampere": 0, "ada": 0, "turing": 0, "volta": 0, "hopper": 1, "blackwell": 1}
"""0: GPUs whose tensor cores FlashAttention-2 was written for (mma.sync: Volta..Ada); 1: Hopper and
Blackwell (wgmma / tcgen05: FA2 leaves most of the peak unused); 2: other vendors."""

FLASH_MAX_EFFICIENCY = {(0, 0): 0.768, (0, 1): 0.39, (1, 0): 0.768, (1, 1): 0.68, (0, 2): 0.39, (1, 2): 0.39}
"""Attention's achieved share of the bf16 dense peak at long spans and wide heads (fraction), forward +
backward, causal, by (kernel code, GPU generation code): the limits of `attention_efficiency`'s two
saturating factors. Sources: Dao, 'FlashAttention-2' (2023) Fig. 6, A100 causal fwd+bwd head dim 128:
~196 TFLOP/s at 16k = 0.63 of 312 -> 0.768 as the limit; Shah et al., 'FlashAttention-3' (2024) Fig. 5/7
on H100 SXM5, causal head dim 128 at 16k: FA2 ~370 fwd / ~300 bwd TFLOP/s (fwd+bwd 0.32 of 989 ->
limit 0.39), FA3 ~650 fwd / ~520 bwd (0.56 -> limit 0.68); cuDNN's fused attention (Transformer
Engine) is at FA3's level on Hopper (NVIDIA cuDNN 9 release notes). Blackwell taken as Hopper. Other
vendors (ROCm CK flash attention on MI300X: ~0.3 of peak forward, AMD ROCm blog 2024) at 0.39."""

FLASH_SPAN_HALF = 269.0
"""Attended span (tokens) at which FlashAttention reaches half its limit (tokens): from FA2's A100
causal head-dim-128 curve, 0.42 of peak at 512 tokens and 0.63 at 16k (Dao 2023, Fig. 6): the
S / (S + S_half) curve through both points has S_half = 269."""

FLASH_HEAD_DIM_HALF = 25.6
"""Head dimension at which FlashAttention reaches half its limit (elements): FA2 on A100 at 16k runs
head dim 64 at ~169 and 128 at ~196 TFLOP/s (Dao 2023, Fig. 6): d / (d + d_half) through both gives 25.6."""

LOSS_BYTES_PER_LOGIT = {0: None, 1: 8.0, 2: 4.0, 3: 14.0}
"""Loss traffic per (token x vocab) element, forward + backward (bytes), by cross-entropy kind: 0 torch
cross-entropy over upcast logits (PhysicsConstants.loss_bytes_per_logit, 24); 1 chunked / in-kernel
(bf16 logits written and read forward, the in-place gradient written and read backward: 2 + 2 + 2 + 2);
2 fused linear + cross-entropy (logits of one chunk written and read once each way: 4); 3 torch
cross-entropy over the bf16 logits (log-softmax read 2, written 2, read by the loss 2; backward: its
gradient written 2 and read 2, the saved output read 2, the logits' gradient written 2)."""

LOGITS_BYTES_PER_ELEMENT = {0: None, 1: 4.0, 2: 0.0, 3: 6.0}
"""Memory held per (token x vocab) element at the loss (bytes): 0 PhysicsConstants.logits_bytes_per_element
(16: bf16 logits, fp32 copy, fp32 log-softmax, fp32 and bf16 gradients); 1 chunked (bf16 logits and their
bf16 gradient, fp32 work one chunk at a time: 2 + 2); 2 fused (no full logits: a chunk's, counted in
FUSED_CE_CHUNK_TOKENS); 3 torch cross-entropy over the bf16 logits, no upcast (the saved bf16
log-softmax, its gradient and the logits' gradient at the backward's start: 2 + 2 + 2)."""

FUSED_CE_CHUNK_TOKENS = 4096.0
"""Tokens per chunk of a fused linear + cross-entropy (tokens): Liger's FusedLinearCrossEntropy sizes
chunks to about hidden/vocab of the batch; taken as 4,096 tokens x vocab x 6 bytes (bf16 logits + fp32 work)."""

FUSED_LORA_KERNELS = 4.0
"""Kernels per LoRA-adapted module per micro-step with fused LoRA kernels (count): unsloth's LoRA_MLP /
LoRA_QKV fuse dropout-free A, B, scale and add into the base matmul's epilogue: about 2 forward + 2 backward."""

FUSED_ADAPTER_PASSES = 1.0
"""Element-wise passes over an adapted module's input and output with fused LoRA kernels (passes): the
low-rank path's output added in the GEMM epilogue, its gradient read once."""

FUSED_ELEMENTWISE_PASSES = 1.0
"""Times saved activations are streamed by fused element-wise kernels (passes): a fused chain (torch.compile,
Triton or Megatron's fusions) reads each tensor once and writes its result once, against ~3 unfused."""

MOE_PERMUTE_PASSES = 12.0
"""Passes over each routed copy of a token's hidden state per MoE layer, forward + backward (passes of
compute-dtype elements): gathered into expert order (read + write), weighted by its router probability
(read + write) and scatter-added back to its token (read + write), each again in the backward
(megatron-core 0.12 moe_utils.permute / unpermute unfused, moe_permute_fusion's default off; transformers'
MoE blocks index, weight and index_add_ alike)."""

MOE_SORT_PASSES = 8.0
"""Passes over each routed copy a GPU receives from the expert-parallel all-to-all, per MoE layer, forward +
backward (passes): megatron-core's sort_chunks_by_idxs concatenates the per-rank chunks into local-expert
order (read + write) and back before the combine, each again in the backward (token_dispatcher.py,
MoEAlltoAllTokenDispatcher, more than one local expert)."""


def moe_permute_bytes(routed, ep, etp):
    """Memory traffic of MoE token permutation per MoE layer, forward + backward (bytes): `routed` bytes of
    routed copies a GPU sends (MOE_PERMUTE_PASSES), etp x as many received and sorted where experts are
    spread over ep x etp GPUs (MOE_SORT_PASSES)."""
    return routed * (MOE_PERMUTE_PASSES + np.where(ep * etp > 1, etp * MOE_SORT_PASSES, 0.0))


def gemm_efficiency(m, n_rank, c):
    """Achieved share of dense peak of a GEMM of m rows (tokens per GPU per micro-step) and width n_rank
    per tensor-parallel rank (the narrow of N and K): saturating in both (PhysicsConstants mfu_max,
    tokens_half, hidden_half); the GPU's measured matmul efficiency multiplies it in step.py."""
    return c.mfu_max * m / (m + c.tokens_half) * n_rank / (n_rank + c.hidden_half)


def expert_gemm_rows(tokens, top_k, n_experts, ep):
    """Rows of each expert's GEMM (tokens): an expert-parallel group of `ep` ranks sends each local
    expert its share of the group's tokens, tokens x ep x top_k / n_experts (grouped GEMM over the local
    experts); at least 1."""
    return np.maximum(tokens * ep * np.maximum(top_k, 1.0) / np.maximum(n_experts, 1.0), 1.0)


def attention_efficiency(span, head_dim, kernel_code, gen_code):
    """FlashAttention's achieved share of the bf16 peak at an attended span (tokens each query attends:
    the sequence, or the window for sliding-window layers) and head dimension."""
    k = np.where(kernel_code == 3, 0, kernel_code)
    emax = np.select(
        [(k == kk) & (gen_code == g) for kk, g in FLASH_MAX_EFFICIENCY],
        list(FLASH_MAX_EFFICIENCY.values()), default=FLASH_MAX_EFFICIENCY[(0, 0)])
    emax = np.where(kernel_code == 3, FLASH1_RELATIVE * emax, emax)
    return emax * span / (span + FLASH_SPAN_HALF) * head_dim / (head_dim + FLASH_HEAD_DIM_HALF)


def causal_share(span, seq, causal_kernel):
    """Share of the full query x span square the kernel computes: a causal FlashAttention skips masked
    blocks (1/2 of a full sequence); a sliding window of w < S computes about w of S keys per query
    (no further halving); eager attention computes every element (1)."""
    window = span < seq
    return np.where(causal_kernel > 0, np.where(window, 1.0, 0.5), 1.0)


def _per_kind(table, ce_code, default_bytes):
    """table[kind] by cross-entropy kind code; `default_bytes` for kind 0 (torch over upcast logits)."""
    out = np.asarray(default_bytes, dtype=float) * np.ones_like(np.asarray(ce_code, dtype=float))
    for code, v in table.items():
        out = out if v is None else np.where(ce_code == code, v, out)
    return out


def lm_loss_bytes(ce_code, default_bytes):
    """Loss traffic per (token x vocab) element by cross-entropy kind (LOSS_BYTES_PER_LOGIT)."""
    return _per_kind(LOSS_BYTES_PER_LOGIT, ce_code, default_bytes)


def logits_memory_bytes(tokens, vocab, tp, ce_code, default_bytes):
    """Bytes held at the loss per GPU: tokens x vocab / tp x bytes per element by cross-entropy kind;
    a fused loss holds one chunk instead."""
    full = tokens * vocab / tp * _per_kind(LOGITS_BYTES_PER_ELEMENT, ce_code, default_bytes)
    chunk = np.minimum(tokens, FUSED_CE_CHUNK_TOKENS) * vocab / tp * 6.0
    return np.where(ce_code == 2, chunk, full)


EAGER_RMSNORM_BYTES = 100.0
"""Memory traffic of an eager (unfused) RMSNorm per element of its input, forward + backward (bytes):
transformers' LlamaRMSNorm.forward (modeling_llama.py; the same code in Mistral, Qwen2/3, Granite,
Gemma and litgpt / torchtune's RMSNorm) runs `x.to(float32)` (read 2, write 4), `pow(2)` (4 + 4),
`mean(-1)` (4), `x * rsqrt(var + eps)` (4 + 4), `.to(bf16)` (4 + 2) and `weight * x` (2 + 2): 36 bytes
forward; autograd's backward of that chain (the two multiplies' gradients, the mean / pow backward and
the accumulation of the two paths into x's gradient, the casts back) reads and writes ~64 more.
A fused RMSNorm kernel (apex, TE, unsloth, Liger) reads 2 and writes 2 each way instead."""

EAGER_ROPE_BYTES = 44.0
"""Memory traffic of eager rotary embeddings per element of q and of k, forward + backward (bytes):
transformers' apply_rotary_pos_emb computes `q * cos + rotate_half(q) * sin`, rotate_half slicing the
halves, negating one and concatenating (q * cos 2 + 2, neg 1 + 1, cat 2 + 2, * sin 2 + 2, add 4 + 2:
20 forward); the backward's two multiplies, the slices' zero-filled gradients and their sum ~24."""

EAGER_FORWARD_SHARE = 0.4
"""Share of the eager norm / RoPE traffic in the forward pass (fraction): 36 of 100 bytes for RMSNorm,
20 of 44 for RoPE; what activation checkpointing's recompute runs again."""


def eager_norm_rope_bytes(hidden, q_dim, kv_dim, attn_share):
    """Memory traffic per token per layer of the two RMSNorms and RoPE as eager ops (bytes, forward +
    backward). A Llama-7B layer: 2 x 100 x 4,096 + 44 x 8,192 = 1.18 MB per token."""
    return 2.0 * EAGER_RMSNORM_BYTES * hidden + attn_share * EAGER_ROPE_BYTES * (q_dim + kv_dim)


FP32_ADAPTER_IN_BYTES = 18.0
"""Extra memory traffic per element of an adapted module's input, forward + backward, when the LoRA
weights are fp32 over a 16-bit model (bytes; peft >= 0.12 `autocast_adapter_dtype=True`, JobSpec
adapter_dtype fp32): peft's lora.Linear.forward casts x to lora_A's dtype (read 2, write 4) and lora_A
reads the fp32 copy (4 instead of 2); backward, lora_A's weight gradient reads it again (4 instead of
2), its input gradient is written in fp32 (4 instead of 2) and cast back (read 4, write 2): 30 bytes
per input element against 12 with 16-bit adapters (counted in PhysicsConstants.adapter_passes)."""

FP32_ADAPTER_OUT_BYTES = 30.0
"""Extra memory traffic per element of an adapted module's output, forward + backward, with fp32 LoRA
weights over a 16-bit model (bytes): lora_B writes fp32 (4 instead of 2), `* scaling` reads and writes
fp32 (8 instead of 4), `result + lora` promotes to fp32 (writes 4) and peft casts the sum back to the
result dtype (read 4, write 2); backward, the cast's gradient (read 2, write 4), the scaling's (8) and
lora_B's weight and input gradients each read the fp32 output gradient (4 + 4): 50 bytes per output
element against 20 with 16-bit adapters."""


def fp32_adapter_bytes(adapter_in, adapter_io, adapter_fp32):
    """Extra traffic per token of fp32 LoRA weights over a 16-bit model, all adapted modules (bytes):
    FP32_ADAPTER_IN_BYTES x inputs + FP32_ADAPTER_OUT_BYTES x outputs (outputs = io - inputs); zero
    with adapters in the compute dtype. A Llama-8B q_proj (4,096 in, 4,096 out): 196 kB per token."""
    out = np.maximum(adapter_io - adapter_in, 0.0)
    return np.where(adapter_fp32 > 0, FP32_ADAPTER_IN_BYTES * adapter_in + FP32_ADAPTER_OUT_BYTES * out, 0.0)


DORA_SAVED_BASE_BYTES = 2.0
"""Bytes DoRA keeps per element of each adapted module's frozen output for the backward (bytes): peft's
DoraLinearLayer.forward (tuners/lora/dora.py) computes `(mag_norm_scale - 1) * base_result + ...`, a
multiply by a tensor that needs a gradient (the magnitude), so autograd saves base_result, the frozen
layer's 16-bit output, which plain LoRA's add never keeps."""


def dora_saved_bytes_per_layer(adapter_io, adapter_in, n_layers, adapter_bytes, is_dora):
    """DoRA's extra saved activations per token per layer (bytes): for every adapted module's output
    element, the frozen output (DORA_SAVED_BASE_BYTES) and the low-rank output `lora_result` that
    `mag_norm_scale * lora_result` saves, at the adapters' dtype (4 bytes for fp32 adapters). Llama-8B
    with all linears adapted: 43,008 output elements per layer x (2 + 4) = 258 kB per token per layer."""
    out = np.maximum(adapter_io - adapter_in, 0.0) / np.maximum(n_layers, 1.0)
    return np.where(is_dora, out * (DORA_SAVED_BASE_BYTES + adapter_bytes), 0.0)


def efficiency(a: dict[str, np.ndarray], c: PhysicsConstants = DEFAULT_CONSTANTS) -> np.ndarray:
    """Achieved share of dense peak for the block matmuls: saturating in the tokens each GPU
    processes per micro-step and in the matmul width per tensor-parallel rank."""
    tokens = a["micro_batch"] * a["seq_len"] / a["cp"]
    return gemm_efficiency(tokens, gemm_width(a), c)


def gemm_width(a: dict[str, np.ndarray], kind: str = "gemm", ranks=None) -> np.ndarray:
    """The block GEMMs' narrow dimension per tensor-parallel rank (elements): the FLOP-weighted split
    dimension / tp or the unsplit one, whichever is narrower (hidden / tp where the terms lack them);
    kind "expert": the MoE experts' GEMMs alone, split over `ranks` (the expert tensor-parallel degree)."""
    ranks = a["tp"] if ranks is None else ranks
    split = a.get(f"{kind}_split_width")
    full = a.get(f"{kind}_full_width")
    if split is None or full is None:
        return a["hidden"] / ranks
    return np.where((split > 0) & (full > 0), np.minimum(split / ranks, full), a["hidden"] / ranks)
