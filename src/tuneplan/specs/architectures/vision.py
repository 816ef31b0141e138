"""Vision-language models: a vision tower (ViT over image patches) + projector in front of a text decoder.

Towers read here: SigLIP (Gemma 3), CLIP (LLaVA-1.5, LLaVA-NeXT), the Qwen vision transformers
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL / Qwen3.5: dynamic resolution, 2x2 patch merger) and InternVL's
InternViT (one 448 px tile; pixel shuffle to 256 tokens). The text decoder is read by its own reader;
the tower's parameters are added to the total (and kept apart in `params_vision`), its matmuls live in
`ModelSpec.vision` (they run once per image patch, not per text token).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tuneplan.errors import InputError
from tuneplan.specs.architectures.base import (
    READERS,
    get_bool,
    get_int,
    has,
    inferred_values,
    int_key,
    lin,
    mlp_linears,
)
from tuneplan.specs.model import LinearShape, ModelSpec, VisionTower

DYNAMIC_IMAGE_SIDE_PX = 448
"""Image side (px, square) assumed for dynamic-resolution towers (Qwen2-VL / Qwen2.5-VL) when
`--image-size` is not given: 448 x 448 = 32 x 32 patches of 14 px = 256 tokens after the 2x2 merge, a
common `max_pixels` cap in fine-tuning recipes (the processor's own cap, 12.8 MP, is a ceiling, not a
typical size)."""

VLM_TYPES = ("llava", "llava_next", "gemma3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5",
             "qwen3_5_moe", "internvl_chat", "mistral3")

INTERNVL_TYPES = ("internvl_chat",)
"""InternVL's own layout (InternVLChatModel: `llm_config` + an InternViT `vision_config`)."""

QWEN3_TOWERS = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
"""Model types with the Qwen3-VL vision transformer (also Qwen3.5's)."""

TEXT_DECODER_READS = {"qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe", "qwen3_5_text": "qwen3_next",
                      "qwen3_5_moe_text": "qwen3_next"}
"""Text decoders of VLMs read by another model type's reader: Qwen3-VL's are Qwen3 / Qwen3-MoE decoders
(interleaved multimodal RoPE and DeepStack's visual features added to early layers' hidden states change
no shape); Qwen3.5's are Qwen3-Next stacks (3 Gated DeltaNet layers to 1 gated attention layer), dense
or MoE (transformers' qwen3_5 / qwen3_5_moe modelling)."""


def _vit_linears(hidden: int, inter: int, depth: int, gated: bool, fused_qkv: bool) -> list[LinearShape | None]:
    """A pre-norm ViT block's matmuls (all with biases)."""
    if fused_qkv:
        lins = [lin("qkv", hidden, 3 * hidden, depth, True), lin("o", hidden, hidden, depth, True)]
    else:
        lins = [lin(n, hidden, hidden, depth, True) for n in ("q", "k", "v", "o")]
    return lins + mlp_linears(hidden, inter, depth, gated, True)


def _tower(lins: list, other: int, proj: list, proj_other: int, **fields) -> VisionTower:
    """A VisionTower of its block and projector matmuls (empty ones dropped) and their small tensors."""
    lins, proj = tuple(x for x in lins if x), tuple(x for x in proj if x)
    return VisionTower(linears=lins, projector=proj, **fields,
                       params=sum(x.params for x in lins + proj) + other + proj_other)


def _vit_dims(vc: Mapping, size_default: int) -> tuple[int, int, int, int, int, int]:
    """(hidden, depth, heads, MLP width, image side px, patch px) of a fixed-resolution ViT config."""
    dims = [get_int(vc, (k,), f"vision_config.{k}")
            for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")]
    size = get_int(vc, ("image_size",), "vision_config.image_size", size_default)
    patch = get_int(vc, ("patch_size",), "vision_config.patch_size", 14)
    if size % patch:
        raise InputError("vision_config.image_size", f"{size} px is not a multiple of patch_size {patch}")
    hidden, depth, heads, inter = dims
    return hidden, depth, heads, inter, size, patch


def _vit_tower(vc: Mapping, kind: str, text_hidden: int, top: Mapping) -> VisionTower:
    """SigLIP / CLIP towers at their fixed resolution, and the LLaVA / Gemma-3 projectors."""
    hidden, depth, heads, inter, size, patch = _vit_dims(vc, 224)
    side = size // patch
    patches = side * side
    clip = "clip" in str(vc.get("model_type") or ("clip" if kind.startswith("llava") else ""))
    lins = _vit_linears(hidden, inter, depth, gated=False, fused_qkv=False)
    # patch embedding conv (3 x p x p -> hidden), positions (CLIP: + class token), LayerNorms with bias
    other = 3 * patch * patch * hidden + (0 if clip else hidden) + (patches + (1 if clip else 0)) * hidden
    other += depth * 4 * hidden + (4 if clip else 2) * hidden + (hidden if clip else 0)  # norms; CLIP cls
    if get_bool(vc, "vision_use_head", False):
        raise InputError("vision_config.vision_use_head", "a SigLIP attention-pooling head is not modelled")
    if kind == "gemma3":
        tokens = int_key(top, "mm_tokens_per_image", 256)
        merge = max(1, int(round((patches / tokens) ** 0.5)))
        proj = [lin("mm_input_projection", hidden, text_hidden, 1)]
        proj_other = hidden  # mm_soft_emb_norm
        tiles = 1
    else:
        merge, tokens, tiles = 1, patches, 1
        proj = [lin("linear_1", hidden, text_hidden, 1, True), lin("linear_2", text_hidden, text_hidden, 1, True)]
        proj_other = 0
        if kind == "llava_next":
            tiles, tokens = _anyres(top, size, side)
            proj_other = text_hidden  # image_newline
    return _tower(lins, other, proj, proj_other, kind=str(vc.get("model_type") or kind), image_size=size,
                  patch_size=patch, merge=merge, depth=depth, hidden=hidden, n_heads=heads, intermediate=inter,
                  gated=False, out_hidden=text_hidden, tokens_per_image=tokens,
                  patches_per_image=(patches + (1 if clip else 0)) * tiles,
                  extra_tokens=0 if kind != "llava_next" else tokens - tiles * patches, tiles=tiles)


def _anyres(top: Mapping, size: int, side: int) -> tuple[int, int]:
    """LLaVA-NeXT 'anyres' at its largest square grid pinpoint: (tiles through the tower, LM tokens).

    The image is split into (grid / size)^2 tiles plus one downscaled base tile; the LM gets the base
    tile's patches, the grid's patches and one newline token per grid row.
    """
    points = top.get("image_grid_pinpoints") or [[size * 2, size * 2]]
    squares = [p[0] for p in points if isinstance(p, list) and len(p) == 2 and p[0] == p[1]]
    grid = max(squares) if squares else size
    n = max(1, grid // size)
    rows = n * side
    return 1 + n * n, side * side + rows * rows + rows


def _qwen_tower(vc: Mapping, mt: str, text_hidden: int, image_px: int) -> VisionTower:
    """The Qwen vision transformers at an assumed image resolution: a Conv3d patch embedding, pre-norm
    blocks with a fused qkv, and the 2x2 patch merger.

    Qwen2-VL: LayerNorms, a GELU MLP of mlp_ratio x the width; Qwen2.5-VL: RMSNorms, a gated MLP,
    windowed attention outside `fullatt_block_indexes`; Qwen3-VL / Qwen3.5 (transformers'
    Qwen3VLVisionModel): LayerNorms, a GELU MLP, a conv bias, learned position embeddings
    (num_position_embeddings, interpolated to the grid), and one more merger (with its LayerNorm after
    the 2x2 shuffle) per DeepStack layer, whose outputs are added to the text decoder's first layers.
    """
    v25, q3 = mt == "qwen2_5_vl", mt in QWEN3_TOWERS
    # Qwen2-VL names the tower width embed_dim and the merger's output hidden_size; the others hidden_size
    # and out_hidden_size
    v2 = not (v25 or q3)
    hidden = get_int(vc, ("embed_dim", "hidden_size") if v2 else ("hidden_size",), "vision_config.hidden_size")
    depth = get_int(vc, ("depth", "num_hidden_layers"), "vision_config.depth")
    heads = get_int(vc, ("num_heads", "num_attention_heads"), "vision_config.num_heads")
    patch = get_int(vc, ("patch_size", "spatial_patch_size"), "vision_config.patch_size", 16 if q3 else 14)
    merge = get_int(vc, ("spatial_merge_size",), "vision_config.spatial_merge_size", 2)
    tp = get_int(vc, ("temporal_patch_size",), "vision_config.temporal_patch_size", 2)
    out = get_int(vc, ("hidden_size",) if v2 else ("out_hidden_size",), "vision_config.out_hidden_size",
                  text_hidden)
    if v2:
        inter = int(hidden * float(vc.get("mlp_ratio", 4)))
    else:
        inter = get_int(vc, ("intermediate_size",), "vision_config.intermediate_size")
    n_pos = get_int(vc, ("num_position_embeddings",), "vision_config.num_position_embeddings", 0, minimum=0)
    deepstack = vc.get("deepstack_visual_indexes") or []
    n_deep = len(deepstack) if isinstance(deepstack, list) else 0
    unit = patch * merge
    side = max(1, round(image_px / unit)) * merge  # the processor resizes to a multiple of patch x merge
    patches = side * side
    lins = _vit_linears(hidden, inter, depth, gated=v25, fused_qkv=True)
    norm = 1 if v25 else 2  # weights per norm: RMSNorm 1, LayerNorm 2 (with a bias)
    # conv3d (Qwen3: with a bias); positions; two norms per block
    other = 3 * tp * patch * patch * hidden + (hidden if q3 else 0) + n_pos * hidden + depth * 2 * hidden * norm
    m_in = hidden * merge * merge
    proj: list[LinearShape | None] = []
    for i in range(1 + n_deep):
        name = f"merger{i}" if q3 else "merger"
        proj += [lin(f"{name}_fc1", m_in, m_in, 1, True), lin(f"{name}_fc2", m_in, out, 1, True)]
    proj_other = hidden * norm + n_deep * 2 * m_in  # the merger's norm (ln_q); DeepStack mergers' post-shuffle norms
    window, n_full, window_px = 0, -1, 0
    if v25 and has(vc, "window_size"):
        window_px = get_int(vc, ("window_size",), "vision_config.window_size")
        w = window_px // patch  # patches per window side
        window = min(w * w, patches)
        full = vc.get("fullatt_block_indexes") or []
        n_full = len(full) if isinstance(full, list) else 0
    return _tower(lins, other, proj, proj_other, kind=mt, image_size=side * patch, patch_size=patch, merge=merge,
                  depth=depth, hidden=hidden, n_heads=heads, intermediate=inter, gated=v25, out_hidden=out,
                  tokens_per_image=patches // (merge * merge), patches_per_image=patches, dynamic=True,
                  window=window, n_full_layers=n_full, window_px=window_px)


def _intern_vit_tower(vc: Mapping, text_hidden: int, top: Mapping) -> VisionTower:
    """InternViT (InternVL's InternVisionModel) on one 448 px tile: a class token and learned positions,
    pre-norm blocks with a fused qkv, a GELU MLP and two layer-scale vectors; the projector (`mlp1`)
    LayerNorms and maps the pixel-shuffled patches (downsample_ratio 0.5: 2x2 patches per token) to the
    text width through two linears."""
    hidden, depth, heads, inter, size, patch = _vit_dims(vc, 448)
    ratio = top.get("downsample_ratio", 0.5)
    if not isinstance(ratio, int | float) or not 0 < ratio <= 1 or round(1 / ratio) != 1 / ratio:
        raise InputError("downsample_ratio", f"must be 1/n for a whole n, got {ratio!r}")
    merge = int(round(1 / ratio))
    side = size // patch
    patches = side * side
    qkv_bias = get_bool(vc, "qkv_bias", True)
    lins = [lin("qkv", hidden, 3 * hidden, depth, qkv_bias), lin("o", hidden, hidden, depth, True),
            lin("fc1", hidden, inter, depth, True), lin("fc2", inter, hidden, depth, True)]
    layer_norm = str(vc.get("norm_type") or "layer_norm") == "layer_norm"
    norms = depth * 2 * hidden * (2 if layer_norm else 1)
    qk_norm = depth * 2 * hidden if get_bool(vc, ("use_qk_norm", "qk_normalization"), False) else 0
    # conv with bias, class token, positions (patches + class), norms, layer scales ls1 / ls2
    other = 3 * patch * patch * hidden + hidden + hidden + (patches + 1) * hidden + norms + qk_norm + depth * 2 * hidden
    m_in = hidden * merge * merge
    proj = [lin("mlp1_fc1", m_in, text_hidden, 1, True), lin("mlp1_fc2", text_hidden, text_hidden, 1, True)]
    proj_other = 2 * m_in  # mlp1's LayerNorm
    return _tower(lins, other, proj, proj_other, kind="internvit", image_size=size, patch_size=patch, merge=merge,
                  depth=depth, hidden=hidden, n_heads=heads, intermediate=inter, gated=False, out_hidden=text_hidden,
                  tokens_per_image=patches // (merge * merge), patches_per_image=patches + 1)


TEXT_CLASS_DEFAULTS: dict[str, dict[str, int]] = {
    "mistral": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "intermediate_size": 14336},
    "llama": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008},
    "gemma3_text": {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256},
}
"""transformers' config-class defaults (MistralConfig, LlamaConfig, Gemma3TextConfig) for keys a
nested `text_config` leaves out: the Hub files omit values equal to the class default."""


def _text_config(cfg: Mapping, mt: str) -> tuple[dict, str]:
    text = cfg.get("text_config", cfg.get("llm_config"))  # llm_config: InternVL's own layout
    if isinstance(text, Mapping):
        t = {**{k: cfg[k] for k in ("tie_word_embeddings", "vocab_size") if k in cfg}, **text}
        t.update({k: v for k, v in inferred_values(cfg).items() if t.get(k) is None})
        tmt = str(t.get("model_type") or {"llava": "llama", "llava_next": "mistral", "gemma3": "gemma3_text",
                                          "mistral3": "mistral"}.get(mt, "llama"))
        defaulted = [k for k in TEXT_CLASS_DEFAULTS.get(tmt, {}) if t.get(k) is None]
        for k in defaulted:
            t[k] = TEXT_CLASS_DEFAULTS[tmt][k]
        if defaulted:
            t["_class_defaults"] = defaulted
        return t, tmt
    flat = {k: v for k, v in cfg.items() if k != "vision_config"}
    return flat, {"qwen2_5_vl": "qwen2", "qwen2_vl": "qwen2"}.get(mt, mt)


def read_vlm(cfg: Mapping, mt: str, name: str, source: str, image_px: int = 0) -> ModelSpec:
    """A vision-language config (text decoder + `vision_config`) -> one ModelSpec with `vision` set."""
    vc = cfg.get("vision_config")
    if not isinstance(vc, Mapping):
        raise InputError("vision_config", "must be an object describing the vision tower")
    text, tmt = _text_config(cfg, mt)
    read_as = TEXT_DECODER_READS.get(tmt, tmt)
    reader = READERS.get(read_as)
    if reader is None:
        raise InputError("text_config.model_type", f"unsupported text decoder '{tmt}'")
    spec = reader(text, read_as, name, source)
    if mt in ("qwen2_5_vl", "qwen2_vl", *QWEN3_TOWERS):
        tower = _qwen_tower(vc, mt, spec.hidden_size, image_px or DYNAMIC_IMAGE_SIDE_PX)
    elif mt in INTERNVL_TYPES:
        tower = _intern_vit_tower(vc, spec.hidden_size, cfg)
    elif mt in ("llava", "llava_next", "gemma3"):
        tower = _vit_tower(vc, mt, spec.hidden_size, cfg)
    else:
        raise InputError("model_type", f"vision tower of '{mt}' is not modelled", list(VLM_TYPES[:-1]))
    pub = cfg.get("_published_params")
    extra = {**spec.extra, "text_model_type": tmt, "params_other": spec.extra.get("params_other", 0)}
    if read_as != tmt:
        extra["text_read_as"] = read_as
    if text.get("_class_defaults"):
        extra["text_class_defaults"] = {k: text[k] for k in text["_class_defaults"]}
    return replace(spec, model_type=mt, params_total=spec.params_total + tower.params,
                   params_active=spec.params_active + tower.params, params_vision=tower.params, vision=tower,
                   published_params=str(pub) if pub is not None else spec.published_params, extra=extra)


def with_image_size(spec: ModelSpec, image_px: int) -> ModelSpec:
    """The same model with a dynamic-resolution tower re-read at `image_px` (fixed towers: unchanged)."""
    v = spec.vision
    if v is None or not v.dynamic or not image_px:
        return spec
    vc = {"depth": v.depth, "num_heads": v.n_heads, "patch_size": v.patch_size, "spatial_merge_size": v.merge,
          "intermediate_size": v.intermediate, "mlp_ratio": v.intermediate / v.hidden}
    if v.kind == "qwen2_vl":
        vc.update(embed_dim=v.hidden, hidden_size=v.out_hidden)
    else:
        vc.update(hidden_size=v.hidden, out_hidden_size=v.out_hidden)
    if v.window_px:
        vc["window_size"] = v.window_px
        vc["fullatt_block_indexes"] = list(range(max(0, v.n_full_layers)))
    # the projector and the parameter count do not depend on the image size
    tower = _qwen_tower(vc, v.kind, spec.hidden_size, image_px)
    return replace(spec, vision=replace(tower, projector=v.projector, params=v.params))
