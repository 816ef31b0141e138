"""Named constants of tuneplan's physics, each with its unit and source. The values are the uncalibrated
priors (literature figures or conservative engineering choices); `tuneplan calibrate` refits the *fitted* ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class PhysicsConstants:
    # --- compute efficiency (fitted) ------------------------------------------------------------
    mfu_max: float = 0.80
    """Ceiling of the block GEMMs' efficiency curve on the reference GPU (fraction of dense peak): the
    measured maximum achievable matmul FLOP/s of H100 SXM (794.5 of 989 TFLOP/s) and H200 (786 of 989),
    the `REFERENCE_MATMUL_EFFICIENCY`. Not a whole-step MFU: the other work is costed in its own terms."""
    tokens_half: float = 512.0
    """Tokens per GPU micro-step at which the efficiency reaches half of its maximum (tokens).
    Small micro-steps under-use the GPU (Kavier's MFU curve in the micro-batch)."""
    hidden_half: float = 1024.0
    """Hidden width (per tensor-parallel rank) at which matmul efficiency reaches half (elements):
    narrow models run small, launch-bound GEMMs."""
    overhead_s_per_layer: float = 2.0e-4
    """Fixed per-layer cost of one forward+backward micro-step (s): kernel launches and small ops."""
    # --- attention -------------------------------------------------------------------------------
    causal_fraction_flash: float = 0.5
    """Share of the S x S attention work done with a causal mask under FlashAttention (skips masked
    blocks); eager attention computes the full square (1.0)."""
    # --- memory traffic (fitted) -----------------------------------------------------------------
    bandwidth_efficiency: float = 0.80
    """Achieved share of datasheet memory bandwidth for streaming kernels (optimizer, dequant)."""
    dequant_bytes_nf4: float = 4.5
    """Bytes moved per weight to dequantise NF4 to bf16 per pass (0.5 read + 2 write + 2 read)."""
    dequant_bytes_gptq: float = 2.5
    """Bytes-equivalent per weight per pass of fused 4-bit / int8 kernels (AWQ, LLM.int8, AQLM; slower than a bf16
    GEMM). GPTQ trains through eager unpacking instead: step.gptq_eager_bytes."""
    dora_bytes_per_weight: float = 6.0
    """Extra bytes per adapted weight per pass for DoRA's weight-norm (materialise W + BA, its norm):
    a cost per optimizer micro-step that does not grow with the tokens."""
    adapter_passes: float = 8.0
    """Times each adapted module's input and output are streamed through memory per token by the adapter's
    element-wise kernels and narrow GEMMs, forward and backward, adapters in the compute dtype (2-byte
    passes). From peft's lora.Linear.forward (tuners/lora/layer.py) and its autograd: per input element
    lora_A reads x, its weight gradient reads x, writes and accumulates the input gradient (2+2+2+6 = 12
    bytes); per output element lora_B writes, scales, adds, and backward (2+4+6+4+2+2 = 20 bytes): ~32
    bytes per (input, output) pair = 8 passes x 2 bytes x 2. fp32 adapters: ops.fp32_adapter_bytes."""
    kernel_launch_s: float = 8e-6
    """Time of one small kernel launch or op dispatch that does no real work (s): CUDA launch latency
    is ~5-10 us; an eager op on a CPU ~10-30 us. Adapters run a chain of such ops per module."""
    lora_kernels_per_module: float = 16.0
    """Kernels a LoRA-adapted module adds per forward+backward micro-step (count, from peft's
    LoRA forward): dropout, A, B, scale, add forward (5); their backward with the A and B weight
    gradients and the input-gradient accumulation (11)."""
    dora_kernels_per_module: float = 56.0
    """Kernels a DoRA-adapted module runs per forward+backward micro-step (count, from peft's DoRA forward):
    LoRA's 16, plus B A through an identity, the norm of W + s B A and the magnitude rescaling of the
    frozen and low-rank outputs forward (~20), and their backward (~20)."""
    loss_bytes_per_logit: float = 24.0
    """Memory traffic of the loss per (token x vocab) element, forward and backward (bytes): bf16
    logits read, fp32 upcast written and read, softmax, its gradient written and read. Memory-bound:
    often a large share of the step for small models with large vocabularies."""
    elementwise_passes: float = 3.0
    """Times the saved activations are streamed through memory by the element-wise kernels (norms,
    activation functions, residual adds, dropout) per forward+backward: read and written (passes)."""
    # --- optimizer: bytes read+written per trainable parameter per step ---------------------------
    optimizer_bytes_adamw: float = 28.0
    """AdamW, mixed precision: read fp32 param, grad, m, v (16); write param, m, v (12)."""
    optimizer_bytes_8bit: float = 14.0
    """8-bit AdamW (bitsandbytes): 1-byte moments, fp32 param and grad."""
    optimizer_bytes_sgd: float = 12.0
    optimizer_bytes_sgd_momentum: float = 20.0
    optimizer_bytes_adafactor: float = 16.0
    # --- communication (fitted) ------------------------------------------------------------------
    comm_efficiency: float = 0.70
    """Achieved share of the link rate by NCCL collectives (bus bandwidth / link rate)."""
    comm_latency_s: float = 5e-6
    """Per-hop latency of a ring step (s); Kavier's published value."""
    overlap_fraction: float = 0.70
    """Share of the backward pass that data-parallel gradient communication can hide behind."""
    cpu_offload_gbs: float = 25.0
    """Host-device transfer and CPU optimizer streaming rate under CPU offload (GB/s, PCIe 4 x16)."""
    default_inter_node_gbps: float = 100.0
    """Per-GPU inter-node network when the catalog has no figure (Gbit/s): 100 GbE class."""
    ddp_grad_bytes: float = 4.0
    """Bytes per gradient element all-reduced by DDP under autocast (fp32 parameters)."""
    sharded_grad_bytes: float = 2.0
    """Bytes per element reduce-scattered / all-gathered by FSDP/ZeRO with bf16 mixed precision."""
    # --- memory (fitted) -------------------------------------------------------------------------
    activation_scale: float = 1.0
    """Multiplier on the analytic activation bytes (framework temporaries, saved copies)."""
    logits_bytes_per_element: float = 14.0
    """Bytes per (token x vocab) held at the loss's peak with torch's cross-entropy over upcast logits,
    counted from transformers' loss: the fp32 copy (4), before 4.46 a shifted copy and log-softmax's
    output (12 at the forward's loss); in the backward the log-softmax output, its gradient and the
    logits' fp32 gradient with the slice's zero-filled one: 12-16. Taken as 14 (4.46+: ~12)."""
    cuda_context_gib: float = 0.6
    """CUDA context + cuBLAS/NCCL workspaces, outside torch's allocator (GiB); seen by nvidia-smi."""
    allocator_overhead: float = 0.08
    """Reserved / allocated - 1: caching-allocator fragmentation (fraction)."""
    variable_shape_reserve: float = 1.0
    """Batches of varying length (`--padding longest`): extra reserved memory, as a multiple of the
    per-token transients (activations + loss buffers), for the blocks the caching allocator keeps from
    shorter batches (prior: one more set; memory.variable_shape_bytes). Allocated memory is unchanged."""
    workspace_gib: float = 0.25
    """Allocated temporaries not in the analytic terms (GiB): GEMM workspaces, loss buffers."""
    nf4_input_bytes: float = 4.0
    """Bytes per element of each NF4-quantized linear's input kept for its backward beyond the 16-bit
    activations: bitsandbytes' Linear4bit casts its input to the compute dtype (float32 unless set) and
    its matmul saves that copy."""
    lora_dropout_copies: float = 0.0
    """Extra copies of an adapted module's input kept for LoRA dropout (0 when lora_dropout = 0)."""
    # --- energy ----------------------------------------------------------------------------------
    idle_power_fraction: float = 0.30
    """GPU power at zero utilisation as a share of TDP (typical idle 20-35% of TDP under a job)."""

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PhysicsConstants:
        names = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in d.items() if k in names})

    def with_(self, **kw: float) -> PhysicsConstants:
        return replace(self, **kw)


DEFAULT_CONSTANTS = PhysicsConstants()

BYTES_PER_GIB = 1024.0**3
DEFAULT_GRID_GCO2_KWH = 480.0
"""World-average electricity carbon intensity (g CO2 / kWh): Ember, Global Electricity Review 2024
(2023 figure, ~480 g/kWh)."""
