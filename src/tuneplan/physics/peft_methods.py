"""The cost of each PEFT method beyond the LoRA family: trainable parameters (exact, as peft 0.21 builds
them), FLOPs (per token, and per micro-step for weights built every forward), memory and small kernels.
`method_terms` gives the method's `terms.ModelTerms` fields, `peft_step_times` / `peft_memory_bytes` their
time and memory; per module (in_features i, out_features o) the counts follow peft's
`peft/tuners/<method>/layer.py`. rsLoRA, PiSSA, OLoRA, EVA and LoftQ train like LoRA (QLoRA) and use `terms`.
"""

from __future__ import annotations

import math

import numpy as np

from tuneplan.errors import InputError
from tuneplan.physics.ops import efficiency
from tuneplan.physics.targets import FUSED_TARGETS, normalise_targets
from tuneplan.specs.job import JobSpec
from tuneplan.specs.model import LinearShape, ModelSpec
from tuneplan.specs.peft import CATALOGUE, LORA_EQUIVALENT, method_options

FP32_BYTES = 4.0
"""bytes per element of peft's adapter weights and of the inputs cast to them: peft >= 0.12 casts
adapter weights to fp32 (`autocast_adapter_dtype=True`) and each layer casts its input to their dtype."""

KERNELS_PER_MODULE = {
    "adalora": 22.0, "lora-fa": 14.0, "ia3": 4.0, "loha": 14.0, "lokr": 12.0, "oft": 14.0, "vera": 14.0,
    "fourierft": 10.0, "hra": 10.0, "bone": 10.0, "boft": 16.0, "ln-tuning": 4.0,
}
"""Small kernels each adapted module launches per micro-step (forward and backward), counted from peft
0.21's `<Method>Linear.forward` and its autograd: e.g. LoHa two products and a Hadamard product
(recomputed in backward), an input cast and a second linear; IA3 a multiply and cast forward, two
multiplies and a reduction backward; AdaLoRA LoRA's chain, the E scaling and the importance update.
HRA and BOFT add kernels per reflection / factor; LoRA's is `constants.lora_kernels_per_module`."""

HRA_KERNELS_PER_REFLECTION = 3.0
"""HRA `get_delta_weight`: per reflection a matrix-vector product, an outer product and a subtraction."""

BOFT_KERNELS_PER_FACTOR = 6.0
"""BOFT forward per butterfly factor: Cayley transform, block-diagonal assembly, two bmm with the
permutation, the chain product and a dtype cast."""

FFT_FLOPS_PER_POINT_LOG2 = 5.0
"""FLOPs of a complex FFT of N points: 5 N log2 N (the standard radix-2 count, Cooley-Tukey; FFTW's
'mflops' convention), used for FourierFT's inverse 2-D FFT of the o x i spectrum."""

ADALORA_STATE_BYTES = 12.0
"""bytes per trainable parameter of AdaLoRA's RankAllocator: fp32 importance `ipt`, its exponential
average `exp_avg_ipt` and the uncertainty `exp_avg_unc` (peft/tuners/adalora/model.py RankAllocator)."""

PREFIX_BYTES_PER_ELEMENT_EXTRA = 2.0
"""Prefix tuning: the prompt encoder's output (the prefix keys and values of every layer, one per
sample) is kept in addition to the copy attention saves; taken at 2 bytes (16-bit) per element."""

BOFT_SAVED_MATRICES_PER_FACTOR = 3.0
"""BOFT: in_features x in_features matrices autograd keeps per butterfly factor (the block-diagonal
matrix, its product with the permutation and the permuted result), plus one for the rotation."""


def lora_equivalent(method: str) -> str:
    """The LoRA-family method whose physics a LoRA variant shares (rslora -> lora, loftq -> qlora)."""
    return LORA_EQUIVALENT.get(method, method)


def _rank(job: JobSpec, default: int | None) -> int:
    """--lora-rank when given, else the method's peft default."""
    if "lora_rank" in job.given or default is None:
        return int(job.lora_rank)
    return int(default)


def default_targets(model: ModelSpec, kind: str) -> tuple[str, ...]:
    """peft's default target modules (TRANSFORMERS_MODELS_TO_<METHOD>_TARGET_MODULES_MAPPING) as a rule:
    the query and value projections (the fused qkv on models that have one), or for IA3 the keys,
    values and the MLP's down projection."""
    names = {lin.name for lin in model.linears}
    if kind == "ia3":
        attn = [n for n in ("k", "v") if n in names] or [n for n in ("qkv", "kv_b") if n in names]
        ff = [n for n in ("down", "fc2", "shared_down") if n in names]
        return tuple(attn + ff)
    for group in (("q", "v"), ("qkv",), ("q_b", "kv_b"), ("in_proj",)):
        found = [n for n in group if n in names]
        if found:
            return tuple(found)
    raise InputError("lora-targets", f"peft has no default target modules for {model.name}; name them",
                     sorted(names) + ["all-linear"])


def select_modules(model: ModelSpec, job: JobSpec, kind: str) -> tuple[list[LinearShape], bool]:
    """The linear modules a module-targeting method adapts, and whether they are peft's defaults
    (kind 'lora': AdaLoRA and LoRA-FA take --lora-targets and its default, all-linear, as LoRA does)."""
    explicit = "lora_targets" in job.given or kind == "lora"
    targets = normalise_targets(job.lora_targets) if explicit else default_targets(model, kind)
    names = {lin.name for lin in model.linears}
    if "all-linear" in targets or "all" in targets:
        return [lin for lin in model.linears if lin.name != "router"], not explicit
    want = {FUSED_TARGETS[t] if t not in names and FUSED_TARGETS.get(t) in names else t for t in targets}
    chosen = [lin for lin in model.linears if lin.name in want]
    if not chosen:
        raise InputError("lora-targets", f"no module named {', '.join(sorted(want))} in {model.name}",
                         sorted(names) + ["all-linear"])
    return chosen, not explicit


def target_kind(method: str) -> str:
    return {"ia3": "ia3", "adalora": "lora", "lora-fa": "lora"}.get(method, "attention-qv")


def lokr_factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """peft's `lokr.layer.factorization`: two factors of `dimension`, the first <= the second, as close
    to sqrt(dimension) (or to `factor`) as the divisors allow."""
    if factor > 0 and dimension % factor == 0:
        return factor, dimension // factor
    if factor == -1:
        factor = dimension
    m, n = 1, dimension
    length = m + n
    while m < n:
        new_m = m + 1
        while dimension % new_m != 0:
            new_m += 1
        new_n = dimension // new_m
        if new_m + new_n > length or new_m > factor:
            break
        m, n = new_m, new_n
    return (n, m) if m > n else (m, n)


def lokr_params(i: int, o: int, r: int, decompose_both: bool, factor: int) -> tuple[int, int, int, int, bool, bool]:
    """LoKr's parameters for one linear: (count, out_l, out_k, in_m, in_n, use_w1, use_w2): w1 is
    (out_l x in_m), full unless decompose_both and r < max/2; w2 (out_k x in_n), low-rank when r < max/2."""
    in_m, in_n = lokr_factorization(i, factor)
    out_l, out_k = lokr_factorization(o, factor)
    use_w1 = not (decompose_both and r < max(out_l, in_m) / 2)
    use_w2 = not (r < max(out_k, in_n) / 2)
    n = (out_l * in_m if use_w1 else r * (out_l + in_m)) + (out_k * in_n if use_w2 else r * (out_k + in_n))
    return n, out_l, out_k, in_m, in_n, use_w1, use_w2


def oft_blocks(i: int, block_size: int, r: int) -> tuple[int, int]:
    """(blocks r, block size b) as peft's OFT `update_layer` settles them, adjusting to a divisor of i."""
    def adjust(params: int) -> int:
        if params >= i:
            return i
        higher = params
        while higher <= i and i % higher != 0:
            higher += 1
        lower = params
        while lower > 1 and i % lower != 0:
            lower -= 1
        return lower if (params - lower) <= (higher - params) else higher

    if r == 0 and block_size != 0:
        b = block_size if (i % block_size == 0 and block_size <= i) else adjust(block_size)
        return i // b, b
    if r != 0 and block_size == 0:
        rr = r if (i % r == 0 and r <= i) else adjust(r)
        return rr, i // rr
    raise InputError("peft-option", "oft: give exactly one of r and oft_block_size (the other 0)")


def boft_shape(i: int, block_size: int, block_num: int, factor: int) -> tuple[int, int, int]:
    """(butterfly factors N, blocks, block size) as peft's BOFT `update_layer` checks them."""
    n = factor - 1
    if n < 0:
        raise InputError("peft-option", "boft: boft_n_butterfly_factor must be a positive integer")
    if (block_size == 0) == (block_num == 0):
        raise InputError("peft-option", "boft: give exactly one of boft_block_size and boft_block_num")
    if block_size == 0:
        if i % block_num:
            raise InputError("peft-option", f"boft: in_features ({i}) not divisible by boft_block_num ({block_num})")
        block_size = i // block_num
    if i % (block_size * 2**n) or i < block_size * 2**n:
        raise InputError("peft-option", f"boft: in_features ({i}) must be a multiple of boft_block_size x "
                                        f"2^(boft_n_butterfly_factor - 1) ({block_size * 2**n})")
    blocks = i // block_size
    if n and blocks % 2:
        raise InputError("peft-option", f"boft: boft_block_num ({blocks}) must be even")
    return n + 1, blocks, block_size


TERM_KEYS = ("trainable", "adapter_flops", "adapter_io_elements", "adapter_in_elements", "lora_rank",
             "adapted_inputs_per_layer", "fwd_block_delta", "peft_fp32_flops", "peft_step_flops",
             "peft_step_flops_fp32", "peft_saved_bytes", "peft_sample_bytes", "peft_fixed_act_bytes",
             "peft_buffer_bytes", "peft_state_bytes", "peft_kernels", "virtual_tokens", "prefix_tokens", "adapted")
"""The keys `method_terms` returns (each 0 unless the method sets it)."""


def _per_module(t: dict, method: str, lin: LinearShape, opts: dict, r: int, pbytes: float) -> None:
    """Add one kind of linear module's cost (all its copies) for a module-targeting method."""
    i, o = lin.in_features, lin.out_features
    n = float(lin.count_per_layer * lin.n_layers)  # modules of this kind
    act = float(lin.active_per_token * lin.n_layers)  # modules a token passes
    t["adapted"] += lin.params
    t["peft_kernels"] += n * KERNELS_PER_MODULE.get(method, 0.0)
    io, cast_in = float(i + o), float(i)  # elementwise traffic; fp32 input copies kept for backward
    if method == "adalora":
        r0 = int(opts["init_r"])
        t["trainable"] += n * (r0 * (i + o) + r0)
        t["adapter_flops"] += act * 2.0 * r0 * (i + o)
        t["peft_step_flops_fp32"] += n * 2.0 * r0 * r0 * (i + o)  # orthogonal regularisation P^T P, Q Q^T
    elif method == "lora-fa":
        t["trainable"] += n * r * o
        t["adapter_flops"] += act * 2.0 * r * (i + o)
        cast_in = 0.0  # A frozen: its input is not kept for a weight gradient
    elif method == "ia3":
        ff = lin.name in ("down", "fc2", "shared_down")
        v = float(i if ff else o)
        t["trainable"] += n * v
        t["peft_saved_bytes"] += act * v * pbytes  # the multiply keeps its activation operand
        io, cast_in = v, 0.0
    elif method in ("loha", "lokr", "fourierft"):
        if method == "loha":
            t["trainable"] += n * 2 * r * (i + o)
            t["peft_step_flops_fp32"] += n * (4.0 * r * i * o + 2.0 * i * o)  # two products, Hadamard
        elif method == "lokr":
            cnt, ol, ok, im, inn, w1, w2 = lokr_params(i, o, r, bool(opts["decompose_both"]),
                                                       int(opts["decompose_factor"]))
            t["trainable"] += n * cnt
            build = (0.0 if w1 else 2.0 * r * ol * im) + (0.0 if w2 else 2.0 * r * ok * inn)
            t["peft_step_flops_fp32"] += n * (build + float(i * o))  # low-rank factors, Kronecker product
        else:
            nf = int(opts["n_frequency"])
            if nf > i * o:
                raise InputError("peft-option", f"fourierft: n_frequency {nf} above in x out ({i * o}) of {lin.name}")
            t["trainable"] += n * nf
            t["peft_step_flops_fp32"] += n * FFT_FLOPS_PER_POINT_LOG2 * i * o * math.log2(max(2, i * o))
        t["peft_fp32_flops"] += act * 2.0 * i * o  # F.linear(x, delta_weight) in fp32
        t["peft_fixed_act_bytes"] += n * FP32_BYTES * i * o  # the delta weight, kept for backward
    elif method == "oft":
        blocks, b = oft_blocks(i, int(opts["oft_block_size"]), int(opts["r"]))
        t["trainable"] += n * blocks * b * (b - 1) // 2
        t["adapter_flops"] += act * 2.0 * i * b  # block-diagonal rotation of the input
        terms = max(1, int(opts["num_cayley_neumann_terms"]) - 1)
        t["peft_step_flops_fp32"] += n * blocks * terms * 2.0 * b**3
        io = 2.0 * i
    elif method == "boft":
        nb, blocks, b = boft_shape(i, int(opts["boft_block_size"]), int(opts["boft_block_num"]),
                                   int(opts["boft_n_butterfly_factor"]))
        t["trainable"] += n * (nb * blocks * b * b + o)
        t["peft_step_flops"] += n * 6.0 * nb * float(i) ** 3  # dense butterfly products, x's dtype
        t["adapter_flops"] += act * 2.0 * i * i  # x @ rotation
        t["peft_buffer_bytes"] += n * FP32_BYTES * nb * i * i  # boft_P permutations, fp32 buffers
        t["peft_fixed_act_bytes"] += n * pbytes * (BOFT_SAVED_MATRICES_PER_FACTOR * nb + 1.0) * i * i
        t["peft_saved_bytes"] += act * pbytes * (i + o)  # x for the rotation's gradient, output for the scale
        t["peft_kernels"] += n * BOFT_KERNELS_PER_FACTOR * nb
        cast_in = 0.0
    elif method == "vera":
        t["trainable"] += n * (r + o)
        t["adapter_flops"] += act * 2.0 * r * (i + o)
        t["peft_saved_bytes"] += act * FP32_BYTES * (r + o)  # A x for lambda_d, B(...) for lambda_b
        io, cast_in = float(i + o + 2 * r), 0.0
    elif method == "hra":
        if r > i:
            raise InputError("lora-rank", f"hra: rank {r} above in_features ({i}) of {lin.name}")
        t["trainable"] += n * i * r
        t["peft_step_flops_fp32"] += n * (4.0 * r * i * i + 2.0 * float(i) ** 3 + 2.0 * o * i * i)
        t["fwd_block_delta"] -= act * 2.0 * i * o  # the base matmul is replaced ...
        t["peft_fp32_flops"] += act * 2.0 * i * o  # ... by F.linear(x, W H) in fp32
        # kept: the r reflections' running products, the identity, the delta and W H (i x i), W cast and W H
        t["peft_fixed_act_bytes"] += n * FP32_BYTES * ((r + 3) * i * i + 2 * o * i)
        t["peft_kernels"] += n * HRA_KERNELS_PER_REFLECTION * r
    elif method == "bone":
        if i % r and opts["init_weights"] == "bat":
            raise InputError("lora-rank", f"bone (bat): in_features ({i}) of {lin.name} not divisible by r ({r})")
        t["trainable"] += n * r * o
        if str(opts["init_weights"]).lower() == "bat":
            t["peft_step_flops_fp32"] += n * 2.0 * i * o * r  # W's r x r blocks times the shared blocks
            t["fwd_block_delta"] -= act * 2.0 * i * o
            t["peft_fp32_flops"] += act * 2.0 * i * o
            t["peft_fixed_act_bytes"] += n * FP32_BYTES * 2 * i * o
        else:
            t["adapter_flops"] += act * (i + 2.0 * r * o)  # chunk sums, then (r) @ (r x o)
            t["peft_saved_bytes"] += act * FP32_BYTES * r
            cast_in = 0.0
    t["adapter_io_elements"] += act * io
    t["adapter_in_elements"] += act * cast_in


MODULE_METHODS = ("adalora", "lora-fa", "ia3", "loha", "lokr", "oft", "boft", "vera", "fourierft", "hra", "bone")


def prompt_terms(t: dict, model: ModelSpec, job: JobSpec, opts: dict, pbytes: float) -> None:
    """Prefix tuning, prompt tuning, p-tuning: trainable counts as peft's PrefixEncoder, PromptEmbedding
    and PromptEncoder build them, and their extra positions."""
    p = int(opts["num_virtual_tokens"])
    h = model.hidden_size
    if job.method == "prefix-tuning":
        layers = model.attention_layers
        td = model.n_kv_heads * model.head_dim  # peft: token_dim = head_dim x num_key_value_heads (GQA)
        if opts["prefix_projection"]:
            e = int(opts["encoder_hidden_size"]) or td
            t["trainable"] = float(p * td + td * e + e + e * layers * 2 * td + layers * 2 * td)
        else:
            t["trainable"] = float(p * layers * 2 * td)
        t["prefix_tokens"] = float(p)
        t["adapter_flops"] = 4.0 * model.n_heads * model.head_dim * layers * p  # QK^T and AV over the prefix
        t["peft_sample_bytes"] = p * layers * 2.0 * td * (pbytes + PREFIX_BYTES_PER_ELEMENT_EXTRA)
        return
    t["virtual_tokens"] = float(p)
    t["trainable"] = float(p * h)
    if job.method == "p-tuning":
        if str(opts["encoder_reparameterization_type"]).upper() != "MLP":
            raise InputError("peft-option", "p-tuning: only encoder_reparameterization_type=MLP is modelled",
                             ["MLP"])
        e = int(opts["encoder_hidden_size"]) or h
        t["trainable"] += float(h * e + e + e * e + e + e * h + h)


def method_terms(model: ModelSpec, job: JobSpec) -> dict[str, float]:
    """ModelTerms fields of a PEFT method outside the LoRA physics (`terms.model_terms` hook)."""
    method = job.method
    info = CATALOGUE[method]
    opts, _ = method_options(method, job.peft_options)
    pbytes = {"fp32": 4.0, "fp8": 1.0}.get(job.precision, 2.0)
    t = dict.fromkeys(TERM_KEYS, 0.0)
    if method in MODULE_METHODS:
        r = _rank(job, info.rank)
        modules, _ = select_modules(model, job, target_kind(method))
        widths = set()
        for lin in modules:
            _per_module(t, method, lin, opts, r, pbytes)
            widths.add((lin.in_features, lin.count_per_layer))
        if method in ("adalora", "lora-fa"):  # LoRA's saved rank-r outputs and dropout copies
            t["lora_rank"] = float(int(opts["init_r"]) if method == "adalora" else r)
            t["adapted_inputs_per_layer"] = float(len(widths))
        if method == "vera":
            t["peft_buffer_bytes"] = FP32_BYTES * r * (max(m.in_features for m in modules)
                                                       + max(m.out_features for m in modules))
        if method == "adalora":
            t["peft_state_bytes"] = ADALORA_STATE_BYTES * t["trainable"]
    elif method in ("prefix-tuning", "prompt-tuning", "p-tuning"):
        prompt_terms(t, model, job, opts, pbytes)
    elif method == "ln-tuning":
        # the norms (peft's defaults for Llama: input_layernorm, post_attention_layernorm, the final norm):
        # every parameter outside the embedding, the head and the block linears
        t["trainable"] = float(model.params_total - model.params_embedding - model.params_lm_head
                               - sum(lin.params for lin in model.linears))
        norms = 2.0 * model.n_layers + 1.0
        t["adapter_io_elements"] = norms * model.hidden_size  # the norms' weight gradients
        t["peft_saved_bytes"] = norms * model.hidden_size * pbytes  # normalised input kept for them
        t["peft_kernels"] = norms * KERNELS_PER_MODULE["ln-tuning"]
    elif method == "adapter":
        if job.trainable_params is None:
            raise InputError("trainable-params", "--method adapter needs the adapter's trainable parameter count")
        t["trainable"] = float(job.trainable_params)
        t["adapter_flops"] = 2.0 * float(job.trainable_params)
    return t


def peft_step_times(a: dict, c, tokens: np.ndarray, split: np.ndarray, pp: np.ndarray) -> tuple:
    """(forward, backward = 2 x forward, recompute, launch) seconds per micro-step of the PEFT methods' own
    work: fp32 matmuls with built weights, the weight products built every forward (at the curve's
    ceiling: large square products), and their small kernels."""
    if "peft_fp32_flops" not in a:
        z = np.zeros_like(np.asarray(tokens, dtype=float))
        return z, z, z, z
    ceiling = c.mfu_max * a["matmul_rel"]
    eff = efficiency(a, c) * a["matmul_rel"]
    p16 = a["peak_flops"]
    p32 = a.get("peak_flops_fp32", p16)
    fwd = (tokens * a["peft_fp32_flops"] / (p32 * eff) + a["peft_step_flops_fp32"] / (p32 * ceiling)
           + a["peft_step_flops"] / (p16 * ceiling)) / split
    recompute = 1.0 + 0.5 * a["grad_ckpt"]
    launch = recompute * a["peft_kernels"] * c.kernel_launch_s / pp
    return fwd, 2.0 * fwd, a["grad_ckpt"] * fwd, launch


def peft_memory_bytes(a: dict, tokens: np.ndarray, split: np.ndarray) -> tuple:
    """(weights, optimizer, activations) bytes per GPU the PEFT methods add: frozen buffers, AdaLoRA's
    importance statistics, and what autograd keeps (per-token operands, one layer's under checkpointing;
    the prefix per sample; the weights built every forward)."""
    if "peft_saved_bytes" not in a:
        z = np.zeros_like(np.asarray(tokens, dtype=float))
        return z, z, z
    per_token = a["peft_saved_bytes"] * np.where(a["grad_ckpt"] > 0, 1.0 / np.maximum(a["n_layers"], 1.0), 1.0)
    acts = tokens * per_token + a["micro_batch"] * a["peft_sample_bytes"] + a["peft_fixed_act_bytes"]
    return a["peft_buffer_bytes"] / split, a["peft_state_bytes"] / split, acts / split


def _targets_text(model: ModelSpec, job: JobSpec, kind: str) -> str:
    modules, default = select_modules(model, job, kind)
    names = ", ".join(dict.fromkeys(m.name for m in modules))
    if kind == "lora" and "lora_targets" not in job.given:
        return f"targets {names} (LoRA's default, all-linear; --lora-targets to change)"
    return f"targets {names}" + (" (peft's default for this architecture; --lora-targets to change)" if default else "")


def peft_assumptions(model: ModelSpec, job: JobSpec) -> list[str]:
    """What the estimate assumed for a PEFT method of specs/peft.py: the method, its rank, targets
    and options (each default with its source), the exact trainable count, and how it is costed."""
    method = job.method
    info = CATALOGUE.get(method)
    if info is None:
        return []
    opts, defaulted = method_options(method, job.peft_options)
    parts = [f"Method {method} (peft {info.peft_config}): {info.summary}."]
    if info.lora_like:
        parts.append(f"Costed as {lora_equivalent(method)} (same shapes and passes).")
        return [" ".join(parts)]
    settings: list[str] = []
    if method in MODULE_METHODS and method != "adalora" and (info.rank is not None or method == "lora-fa"):
        r = _rank(job, info.rank)
        given = "lora_rank" in job.given
        given_text = "" if given else " (LoRA's default, --lora-rank)" if info.rank is None else " (peft's default)"
        settings.append(f"r = {r}{given_text}")
    if method in MODULE_METHODS:
        settings.append(_targets_text(model, job, target_kind(method)))
    for k, v in opts.items():
        src = CATALOGUE[method].options[k].why
        settings.append(f"{k} = {v}" + (f" (default: {src})" if k in defaulted else ""))
    if settings:
        parts.append("Settings: " + "; ".join(settings) + ".")
    t = method_terms(model, job)
    parts.append(f"Trainable parameters {t['trainable']:,.0f}, in fp32 with fp32 gradients and optimizer states.")
    notes = []
    if t["peft_fp32_flops"]:
        notes.append("the matmul with the built weight runs in fp32 at the GPU's fp32 peak (torch's default: "
                     "TF32 off for matmuls), forward and twice backward")
    if t["peft_fixed_act_bytes"]:
        notes.append(f"the weights built every forward are kept for backward "
                     f"({t['peft_fixed_act_bytes'] / 2**30:.2f} GiB)")
    if t["peft_buffer_bytes"]:
        notes.append(f"frozen buffers {t['peft_buffer_bytes'] / 2**30:.3f} GiB")
    if t["virtual_tokens"]:
        notes.append(f"each sample runs {t['virtual_tokens']:.0f} positions longer (logits included); tokens/s "
                     "counts the data's tokens only")
    if t["prefix_tokens"]:
        notes.append(f"every attention layer attends over {t['prefix_tokens']:.0f} more keys and values")
    if method == "adapter":
        notes.append("no activations beyond the base model's are assumed kept for it")
    if notes:
        parts.append("Costed: " + "; ".join(notes) + ".")
    return [" ".join(parts)]
