"""What a model is, for estimating: shapes and parameter counts COMPUTED from its config.json.

Nothing here is typed in by hand: `tuneplan.specs.architectures.model_from_config` derives every
field from a Hugging Face config (GQA, MLA, gated MLPs, MoE experts and shared experts, tied
embeddings, sliding-window layers, Mamba mixers, vision towers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class LinearShape:
    """One kind of weight matrix inside the repeated blocks (a LoRA target candidate).

    A token passes `active_per_token` of the `count_per_layer` copies (top-k for MoE experts,
    1 for dense projections) in each of the `n_layers` layers that have it.
    """

    name: str  # canonical target name: q, k, v, o, qkv, gate, up, down, fc1, fc2, router, ...
    in_features: int
    out_features: int
    count_per_layer: int = 1
    active_per_token: float = 1.0
    n_layers: int = 0
    bias: bool = False

    @property
    def params(self) -> int:
        """Total weights (and biases) of this kind in the whole model."""
        per = self.in_features * self.out_features + (self.out_features if self.bias else 0)
        return per * self.count_per_layer * self.n_layers

    @property
    def active_params(self) -> float:
        """Weights a single token multiplies through, summed over layers."""
        per = self.in_features * self.out_features
        return per * self.active_per_token * self.n_layers


@dataclass(frozen=True)
class SSMShape:
    """The Mamba (or linear-attention) mixers of a model: what their scan computes and keeps per token.

    Mamba-1 (selective scan): `d_inner` channels x `d_state` states, `dt_rank` for the step size.
    Mamba-2 (SSD): `n_heads` heads of `head_dim` channels sharing `n_groups` B/C groups of `d_state`,
    computed in chunks of `chunk` tokens. Linear attention (Gated DeltaNet, lightning attention): a
    `d_state` (key width) x `head_dim` (value width) state per head, computed in chunks the same way.
    """

    kind: str  # "mamba1", "mamba2", or linear attention: "deltanet" (Gated DeltaNet), "lightning" (MiniMax)
    n_layers: int
    d_inner: int
    d_state: int
    conv_kernel: int
    n_heads: int = 0
    head_dim: int = 0
    n_groups: int = 1
    chunk: int = 256
    dt_rank: int = 0
    conv_channels: int = 0  # linear attention: channels through the conv1d (0: none / the Mamba rule)
    proj_width: int = 0  # linear attention: width of the input projections' outputs

    @property
    def conv_dim(self) -> int:
        """Channels through the depthwise causal conv1d (x, and B/C for Mamba-2; q, k, v for DeltaNet)."""
        if self.kind in ("deltanet", "lightning"):
            return self.conv_channels
        return self.d_inner + (2 * self.n_groups * self.d_state if self.kind == "mamba2" else 0)


@dataclass(frozen=True)
class VisionTower:
    """A vision encoder in front of the language model (ViT over patches, then a projector).

    `image_size` is the resolution the tower is built for (fixed-size towers: CLIP, SigLIP) or the one
    assumed for dynamic-resolution towers (Qwen2-VL / Qwen2.5-VL: any size, `dynamic` True).
    `merge` patches on a side are merged into one LM token (Qwen's 2x2 patch merger; Gemma 3's pooling
    of 64x64 patches to 16x16 is merge 4). `tokens_per_image` is what one image adds to the sequence.
    """

    kind: str  # model_type of the vision config (siglip_vision_model, clip_vision_model, qwen2_5_vl, ...)
    image_size: int
    patch_size: int
    merge: int
    depth: int
    hidden: int
    n_heads: int
    intermediate: int
    gated: bool
    out_hidden: int  # LM hidden size the projector writes
    tokens_per_image: int
    patches_per_image: int
    linears: tuple[LinearShape, ...]  # tower blocks (n_layers = depth)
    projector: tuple[LinearShape, ...]  # merger / multi-modal projector (n_layers = 1)
    params: int  # tower + projector, everything
    dynamic: bool = False
    window: int = 0  # patches per attention window in windowed layers (0: every layer full)
    n_full_layers: int = -1  # layers with full attention over the image (-1: all)
    extra_tokens: int = 0  # e.g. LLaVA-NeXT anyres: newline / base tokens counted in tokens_per_image
    tiles: int = 1  # crops of image_size run through the tower per image (LLaVA-NeXT anyres: 1 + grid)
    window_px: int = 0  # side of an attention window in pixels (Qwen2.5-VL: 112)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder (or encoder-decoder) language model's shapes and parameter counts."""

    name: str  # catalog name, e.g. "meta-llama/Llama-3.1-8B"
    model_type: str  # config.json model_type, e.g. "llama"
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (0 when every layer is MoE)
    vocab_size: int
    max_position_embeddings: int | None
    tied_embeddings: bool
    gated_mlp: bool
    linears: tuple[LinearShape, ...]
    params_total: int
    params_active: int  # per token (MoE: top-k experts + shared + dense parts)
    params_embedding: int  # input embedding rows x hidden (+ position embeddings)
    params_lm_head: int  # 0 when tied to the input embedding
    n_attention_layers: int = -1  # layers with softmax attention (-1: all layers); 0 for pure SSMs
    n_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    n_shared_experts: int = 0
    n_moe_layers: int = 0
    is_encoder_decoder: bool = False
    # attention layout beyond "every layer attends to every earlier token"
    attention_window: int = 0  # tokens a local layer attends to (sliding window or chunk); 0: none
    n_local_attention_layers: int = 0  # attention layers limited to attention_window
    local_attention: str = ""  # "sliding" (window behind each token) or "chunked" (fixed chunks)
    qk_head_dim: int = 0  # query/key width per head when it differs from v (MLA: nope + rope); 0: head_dim
    v_head_dim: int = 0  # value width per head (MLA); 0: head_dim
    kv_latent_dim: int = 0  # MLA: compressed KV per token per layer (kv_lora_rank + rope dims)
    q_latent_dim: int = 0  # MLA: compressed query rank (q_lora_rank)
    n_dense_mlp_layers: int = -1  # layers with a dense MLP (-1: n_layers - n_moe_layers)
    ssm: SSMShape | None = None  # Mamba mixers (pure Mamba or hybrid stacks)
    vision: VisionTower | None = None  # vision-language models: the image encoder
    params_vision: int = 0  # vision tower + projector (inside params_total)
    quant: str = "none"  # base weight storage implied by the checkpoint name (-Int4, -AWQ, -GPTQ, ...)
    published_params: str | None = None
    source: str = ""  # where the config came from (catalog file, user path, hub)
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def attention_layers(self) -> int:
        return self.n_layers if self.n_attention_layers < 0 else self.n_attention_layers

    @property
    def dense_mlp_layers(self) -> int:
        return self.n_layers - self.n_moe_layers if self.n_dense_mlp_layers < 0 else self.n_dense_mlp_layers

    @property
    def is_mla(self) -> bool:
        return self.kv_latent_dim > 0

    @property
    def params_block(self) -> int:
        """Parameters in the repeated blocks (everything but embeddings, LM head and vision tower)."""
        return self.params_total - self.params_embedding - self.params_lm_head - self.params_vision

    @property
    def matmul_params_active(self) -> float:
        """Weights of block matmuls a token passes through (for 2 FLOPs per weight)."""
        return float(sum(lin.active_params for lin in self.linears))

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "extra"}
        # the real counts, not the internal "all layers" marker (-1)
        return {**d, "n_attention_layers": self.attention_layers, "n_dense_mlp_layers": self.dense_mlp_layers,
                "params_total_b": self.params_total / 1e9, "params_active_b": self.params_active / 1e9}
