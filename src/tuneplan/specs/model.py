"""What a model is, for estimating: shapes and parameter counts COMPUTED from its config.json.

Nothing here is typed in by hand: `tuneplan.specs.model_config.model_from_config` derives every
field from a Hugging Face config (GQA, gated MLPs, MoE experts and shared experts, tied embeddings).
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
    def params_block(self) -> int:
        """Parameters in the repeated blocks (everything but embeddings and LM head)."""
        return self.params_total - self.params_embedding - self.params_lm_head

    @property
    def params_per_layer(self) -> float:
        return self.params_block / max(1, self.n_layers)

    @property
    def matmul_params_active(self) -> float:
        """Weights of block matmuls a token passes through (for 2 FLOPs per weight)."""
        return float(sum(lin.active_params for lin in self.linears))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra", None)
        d["params_total_b"] = self.params_total / 1e9
        d["params_active_b"] = self.params_active / 1e9
        return d
