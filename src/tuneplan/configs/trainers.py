"""Trainer configs: axolotl, LLaMA-Factory, and TRL / transformers (SFTConfig, TrainingArguments,
alignment-handbook recipes). Defaults are each framework's own (read from their argument classes:
axolotl utils/schemas, llamafactory/hparams, trl/trainer/*_config.py, transformers TrainingArguments)."""

from __future__ import annotations

from tuneplan.configs.base import NO_EFFECT, ConfigRead, Doc
from tuneplan.configs.launchers import read_deepspeed, read_fsdp
from tuneplan.configs.maps import attention, galore_rank, precision, set_optimizer, targets, truthy
from tuneplan.configs.rl import read_trl_rl

HF_BATCH_DEFAULT = 8  # transformers TrainingArguments.per_device_train_batch_size default (samples per GPU).
HF_EPOCHS_DEFAULT = 3.0  # transformers TrainingArguments.num_train_epochs default.
AXOLOTL_SEQ_DEFAULT = 512  # axolotl `sequence_len` default (tokens), utils/schemas/config.py.
LLAMAFACTORY_CUTOFF_DEFAULT = 2048  # LLaMA-Factory `cutoff_len` default (tokens), hparams/data_args.py.
LLAMAFACTORY_RANK_DEFAULT = 8  # LLaMA-Factory `lora_rank` default, hparams/finetuning_args.py.
LLAMAFACTORY_GALORE_RANK_DEFAULT = 16
"""LLaMA-Factory `galore_rank` default, hparams/finetuning_args.py (0.9.5)."""
TRL_MAX_LENGTH_DEFAULT = 1024  # TRL SFTConfig `max_length` default (tokens), trl/trainer/sft_config.py.
TRL_LORA_R_DEFAULT = 16  # TRL ModelConfig `lora_r` default, trl/trainer/model_config.py.
PEFT_LORA_R_DEFAULT = 8  # peft LoraConfig `r` default (axolotl passes lora_r through to it).
PEFT_DEFAULT_TARGETS = ("q", "v")
"""peft's default LoRA targets for Llama-like models (q_proj, v_proj) when none are named."""
NO_EFFECT_KEYS = (
    "learning_rate", "lr_scheduler", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps",
    "weight_decay", "max_grad_norm", "seed", "logging_steps", "logging_strategy", "log_level", "output_dir",
    "overwrite_output_dir", "report_to", "run_name", "hub_model_id", "hub_strategy", "push_to_hub",
    "save_strategy", "save_total_limit", "save_only_model", "wandb_project", "wandb_entity", "wandb_watch",
    "wandb_name", "wandb_log_model", "lora_dropout", "chat_template", "template", "special_tokens", "tokens",
    "tokenizer_type", "model_revision", "trust_remote_code", "plot_loss", "ddp_timeout", "dataset_num_proc",
    "preprocessing_num_workers", "dataloader_num_workers", "overwrite_cache", "resume_from_checkpoint",
    "eos_token", "adam_beta1", "adam_beta2", "adam_epsilon", "optim_args", "lora_model_dir", "logging_dir",
    "dataset_prepared_path", "do_train", "do_eval", "remove_unused_columns", "tf32", "model_type",
    "stage", "hub_private_repo", "trust_remote_code", "train_on_inputs", "group_by_length",
)
"""Keys every trainer reader lists as ignored for having no effect on time or memory."""


DATA_KEYS = ("datasets", "dataset", "dataset_mixture", "dataset_name", "dataset_config", "data", "dataset_dir",
             "dataset_kwargs", "dataset_text_field", "split")
"""Keys naming the data: tuneplan does not download data sets, so their size comes from --examples / --tokens."""
EVAL_KEYS = ("val_set_size", "evals_per_epoch", "eval_steps", "eval_strategy", "per_device_eval_batch_size",
             "eval_dataset", "val_size", "dataset_val", "batch_size_val", "run_val_every_n_steps", "eval",
             "test_datasets", "eval_sample_packing", "eval_batch_size", "evaluation_strategy")
SAVE_KEYS = ("saves_per_epoch", "save_steps", "save_strategy", "save_total_limit", "save_interval", "checkpointer",
             "save_adapter_weights_only", "save_safetensors", "out_dir")
NO_EFFECT_LEAVES = ("lr", "weight_decay", "betas", "eps", "fused", "foreach", "num_warmup_steps", "path",
                    "_component_", "log_dir", "checkpoint_files", "recipe_checkpoint", "output_dir", "model_type",
                    "enabled", "shuffle", "seed", "log_every_n_steps", "log_peak_memory_stats", "log_level",
                    "clip_grad_norm", "metric_logger", "profiler", "low_cpu_ram", "shuffle")


def _common_ignored(doc: Doc, out: ConfigRead) -> None:
    """Every key the reader did not read, listed as ignored with why."""
    for k in doc.unread():
        top, leaf = k.split(".")[0], k.rsplit(".", 1)[-1]
        if top in DATA_KEYS:
            why = "names the data, not its size (pass --examples or --tokens)"
        elif top in EVAL_KEYS:
            why = "evaluation settings: not estimated (pass --eval-every / --eval-examples)"
        elif top in SAVE_KEYS:
            why = "checkpoint settings: saves estimated from --save-every"
        else:
            no_effect = top in NO_EFFECT_KEYS or leaf in NO_EFFECT_LEAVES or top in NO_EFFECT_LEAVES
            why = NO_EFFECT if no_effect else "not read by tuneplan"
        out.ignore(doc.path, k, why)


def _attention_impl(doc: Doc, out: ConfigRead, key: str) -> bool:
    """An `attn_implementation`-style key: memory-efficient attention or eager. False when absent."""
    impl = doc.get(key)
    if impl is not None:
        out.set("flash_attn", attention(impl), doc.path, key)
        out.set("attention", str(impl), doc.path, key)
    return impl is not None


def _quant_method(out: ConfigRead, f: str, method: str, bits4_key: str | None, bits8_key: str | None) -> str:
    """LoRA over a 4-bit base is QLoRA (nf4); over 8 bits, LoRA with int8 base weights."""
    if bits4_key:
        out.set("quant", "nf4", f, bits4_key)
        return "qlora" if method in ("lora", "qlora") else method
    if bits8_key:
        out.set("quant", "int8", f, bits8_key)
    return method


def _distributed(doc: Doc, out: ConfigRead, follow) -> None:
    """`deepspeed` (a file to follow, or the config inline) and the FSDP keys of HF-style configs."""
    ds = doc.get("deepspeed")
    if isinstance(ds, str) and ds:
        follow(ds, "deepspeed")
    elif isinstance(ds, dict):
        read_deepspeed(doc, out, prefix="deepspeed.")
    read_fsdp(doc, out, "fsdp", "fsdp_config")
    key = "accelerator_config.gradient_accumulation_kwargs.sync_each_batch"
    sync = doc.get(key)
    if sync is not None:  # accelerate's GradientAccumulationPlugin: reduce every micro-batch instead of no_sync
        out.set("grad_accum_sync", "every-micro-batch" if truthy(sync) else "no-sync", doc.path, key)


def _hf_args(doc: Doc, out: ConfigRead, follow, defaults: dict, flavour: str) -> None:
    """transformers TrainingArguments keys (shared by TRL and LLaMA-Factory configs)."""
    f = doc.path
    out.take("micro_batch", doc.int("per_device_train_batch_size"), f, "per_device_train_batch_size")
    if not doc.has("per_device_train_batch_size"):
        out.assume("micro_batch", HF_BATCH_DEFAULT, f, f"per_device_train_batch_size not set: {flavour} default")
    out.take("grad_accum", doc.int("gradient_accumulation_steps"), f, "gradient_accumulation_steps", 1,
             f"gradient_accumulation_steps not set: {flavour} default")
    out.take("epochs", doc.num("num_train_epochs"), f, "num_train_epochs", HF_EPOCHS_DEFAULT,
             f"num_train_epochs not set: {flavour} default")
    out.take("max_steps", doc.steps("max_steps"), f, "max_steps", note="optimizer steps; overrides num_train_epochs")
    for key in ("bf16", "fp16"):
        if doc.flag(key):
            out.set("precision", key, f, key)
    if "precision" in defaults:
        out.assume("precision", defaults["precision"], f, defaults["precision_why"])
    opt = doc.get("optim")
    if opt is not None:
        set_optimizer(out, f, "optim", opt)
        rank = galore_rank(doc.get("optim_args"))
        if rank and out.value("optimizer") == "galore-adamw":
            out.set("galore_rank", rank, f, "optim_args", "GaLore's rank")
    out.assume("optimizer", "adamw", f, f"optim not set: {flavour} default adamw_torch_fused")
    out.assume("optimizer_impl", "fused", f, f"optim not set: {flavour} default adamw_torch_fused (transformers >= "
                                            "4.55 with torch >= 2.8; adamw_torch, foreach, before)")
    out.take("grad_ckpt", doc.flag("gradient_checkpointing"), f, "gradient_checkpointing", defaults.get("grad_ckpt"),
             defaults.get("grad_ckpt_why", ""))
    doc.touch("gradient_checkpointing_kwargs")
    _distributed(doc, out, follow)
    if truthy(doc.get("use_liger_kernel", False)):
        out.notes.append(f"{f}: use_liger_kernel: Liger's fused kernels are not modelled (their lower "
                         "loss memory is not counted)")
    if truthy(doc.get("torch_compile", False)):
        out.notes.append(f"{f}: torch_compile: compiled kernels are not modelled")


# ---- axolotl -----------------------------------------------------------------------------------

def read_axolotl(doc: Doc, out: ConfigRead, follow) -> None:
    f = doc.path
    _model(doc, out, "base_model", "base_model_config")
    _axolotl_method(doc, out)
    if rl := doc.get("rl"):
        if str(rl).lower() in AXOLOTL_RL:
            out.set("stage", AXOLOTL_RL[str(rl).lower()], f, "rl")
            _rl_keys(doc, out, "trl.")
        else:
            out.ignore(f, "rl", f"'{rl}' is not modelled: estimated as supervised fine-tuning steps")
    _axolotl_batch(doc, out)
    _axolotl_precision(doc, out)
    _axolotl_attention(doc, out)
    opt = doc.get("optimizer")
    if opt is not None:
        set_optimizer(out, f, "optimizer", opt)
    out.assume("optimizer", "adamw", f, "optimizer not set: axolotl default adamw_torch_fused")
    out.assume("optimizer_impl", "fused", f, "optimizer not set: axolotl default adamw_torch_fused")
    _distributed(doc, out, follow)
    doc.touch("fsdp_version")
    for key, fld in (("tensor_parallel_size", "tp"), ("context_parallel_size", "cp"),
                     ("sequence_parallel_degree", "cp")):
        v = doc.int(key)
        if v is not None and v > 1:
            out.set(fld, v, f, key)
    _common_ignored(doc, out)


def _model(doc: Doc, out: ConfigRead, *keys: str) -> None:
    """The model id from the first of `keys` the file states (a later different one is a conflict)."""
    for key in keys:
        if doc.get(key):
            out.set("model", str(doc.get(key)), doc.path, key)


def _lora_rank_alpha(doc: Doc, out: ConfigRead, rank_key: str, default: int, why: str, alpha_note: str) -> None:
    """The LoRA rank (else the framework's default) and alpha (reported: it does not change the cost)."""
    out.take("lora_rank", doc.int(rank_key), doc.path, rank_key, default, why)
    out.take("lora_alpha", doc.get("lora_alpha"), doc.path, "lora_alpha", note=alpha_note)


def _target_modules(doc: Doc, out: ConfigRead, f: str) -> None:
    """`lora_target_modules` (axolotl, TRL): the modules tuneplan models set, the others said ignored."""
    if tm := doc.strs("lora_target_modules"):
        t, unknown = targets(tm)
        if t:
            out.set("lora_targets", t, f, "lora_target_modules")
        if unknown:
            out.ignore(f, "lora_target_modules", f"modules {', '.join(unknown)} not modelled")


def _axolotl_method(doc: Doc, out: ConfigRead) -> None:
    f = doc.path
    adapter = str(doc.get("adapter") or "").strip().lower()
    b4, b8 = (k if doc.flag(k) else None for k in ("load_in_4bit", "load_in_8bit"))  # the keys that load 4 / 8 bits
    if adapter in ("lora", "qlora"):
        method = "dora" if truthy(doc.get("peft_use_dora", False)) else adapter
        if truthy(doc.get("gptq", False)):
            method = "gptq-lora"
        else:
            method = _quant_method(out, f, method, b4 or ("adapter" if adapter == "qlora" else None), b8)
        if method == "dora" and b4:
            out.ignore(f, "load_in_4bit", "DoRA over a 4-bit base is estimated as DoRA over 16-bit weights")
        out.set("method", method, f, "adapter")
        _lora_rank_alpha(doc, out, "lora_r", PEFT_LORA_R_DEFAULT, "lora_r not set: peft's default r",
                         "scales the update: no effect on cost")
        if truthy(doc.get("lora_target_linear", False)):
            out.set("lora_targets", ("all-linear",), f, "lora_target_linear")
        _target_modules(doc, out, f)
        out.assume("lora_targets", PEFT_DEFAULT_TARGETS, f, "no lora_target_modules: peft's default q_proj, v_proj")
        if mts := doc.strs("lora_modules_to_save"):
            out.set("modules_to_save", tuple(str(x) for x in mts), f, "lora_modules_to_save",
                    "trained in full; their weights, gradients and optimizer state are not counted")
    elif adapter:
        out.ignore(f, "adapter", f"adapter '{adapter}' is not modelled: estimated as LoRA")
        out.set("method", "lora", f, "adapter")
    else:
        if unfrozen := doc.strs("unfrozen_parameters", split=False):
            out.set("method", "freeze", f, "unfrozen_parameters")
            out.set("unfrozen", tuple(str(x) for x in unfrozen), f, "unfrozen_parameters")
        else:
            out.assume("method", "full", f, "no adapter: axolotl trains every parameter")
        if b8 or b4:
            out.ignore(f, b4 or b8, "quantised loading without an adapter: full fine-tuning needs 16-bit weights")


def _axolotl_batch(doc: Doc, out: ConfigRead) -> None:
    f = doc.path
    mb = doc.int("micro_batch_size")
    out.take("micro_batch", mb, f, "micro_batch_size", 1, "micro_batch_size not set: axolotl default")
    ga = doc.int("gradient_accumulation_steps")
    bs = doc.int("batch_size")  # per GPU: axolotl's normalize_config derives GA from it, then x world size
    if ga is None and bs:
        out.set("grad_accum", max(1, bs // (mb or 1)), f, "batch_size",
                f"batch_size {bs} // micro_batch_size {mb or 1} (axolotl's normalize_config)")
    out.take("grad_accum", ga, f, "gradient_accumulation_steps", 1, "gradient_accumulation_steps not set: axolotl default")
    out.take("seq_len", doc.int("sequence_len"), f, "sequence_len", AXOLOTL_SEQ_DEFAULT,
             "sequence_len not set: axolotl default")
    pack = doc.flag("sample_packing")
    out.take("packing", pack, f, "sample_packing", False, "sample_packing not set: axolotl default off")
    doc.touch("eval_sample_packing")
    if not pack:
        if truthy(doc.get("pad_to_sequence_len", False)):
            out.set("padding", "max", f, "pad_to_sequence_len")
        else:
            out.assume("padding", "longest", f, "unpacked batches padded to their longest sample (axolotl's collator)")
    gc = doc.get("gradient_checkpointing")
    out.take("grad_ckpt", None if gc is None else isinstance(gc, str) or bool(gc), f, "gradient_checkpointing", False,
             "gradient_checkpointing not set: axolotl default off",
             f"'{gc}': activations offloaded to CPU, not modelled (checkpointing counted)" if isinstance(gc, str) else "")
    doc.touch("gradient_checkpointing_kwargs")
    if ao := doc.get("activation_offloading"):
        out.set("activation_offload", str(ao), f, "activation_offloading", "not modelled: activations counted on the GPU")
    out.take("epochs", doc.num("num_epochs"), f, "num_epochs", 1.0, "num_epochs not set: axolotl default")
    out.take("max_steps", doc.steps("max_steps"), f, "max_steps")


def _axolotl_precision(doc: Doc, out: ConfigRead) -> None:
    f = doc.path
    for key, pr in (("bfloat16", "bf16"), ("float16", "fp16"), ("fp8", "fp8"), ("bf16", "bf16"), ("fp16", "fp16"),
                    ("float32", "fp32")):  # the first one set wins
        v = doc.get(key)
        if key == "bf16" and str(v).lower() == "auto":
            out.set("precision", "bf16", f, "bf16", "'auto': bf16 on GPUs that have it (Ampere and newer)")
        elif v is not None and truthy(v):
            out.set("precision", pr, f, key, "no mixed precision" if key in ("bfloat16", "float16") else "")
    out.assume("precision", "bf16", f, "bf16 not set: axolotl default 'auto' (bf16 where supported)")


def _axolotl_attention(doc: Doc, out: ConfigRead) -> None:
    f = doc.path
    _attention_impl(doc, out, "attn_implementation")
    for key in ("flash_attention", "sdp_attention", "xformers_attention", "flex_attention", "eager_attention"):
        if truthy(doc.get(key, False)):
            out.set("flash_attn", key != "eager_attention", f, key)
    out.assume("flash_attn", True, f, "no attention setting: transformers' default SDPA (memory-efficient)")


# ---- LLaMA-Factory -----------------------------------------------------------------------------

def read_llamafactory(doc: Doc, out: ConfigRead, follow) -> None:
    f = doc.path
    _model(doc, out, "model_name_or_path")
    ft = str(doc.get("finetuning_type") or "lora").lower()
    if not doc.has("finetuning_type"):
        out.notes.append(f"{f}: finetuning_type not set: LLaMA-Factory's default lora")
    qb = doc.get("quantization_bit")
    qm = str(doc.get("quantization_method") or "bnb").lower()
    if ft == "lora" or ft == "oft":
        if ft == "oft":
            out.ignore(f, "finetuning_type", "OFT is not modelled: estimated as LoRA")
        method = "dora" if truthy(doc.get("use_dora", False)) else "lora"
        if qb in (4, "4"):
            out.set("quant", "nf4", f, "quantization_bit", f"4-bit {qm} base weights")
            method = "qlora" if method == "lora" else method
        elif qb in (8, "8"):
            out.set("quant", "int8", f, "quantization_bit", f"8-bit {qm} base weights")
        elif qb is not None:
            out.ignore(f, "quantization_bit", f"{qb}-bit ({qm}) base weights are not modelled: 4-bit assumed")
            out.set("quant", "nf4", f, "quantization_bit")
            method = "qlora" if method == "lora" else method
        out.set("method", method, f, "finetuning_type") if doc.has("finetuning_type") else out.assume(
            "method", method, f, "finetuning_type not set: LLaMA-Factory default lora")
        _lora_rank_alpha(doc, out, "lora_rank", LLAMAFACTORY_RANK_DEFAULT, "lora_rank not set: LLaMA-Factory default",
                         "no effect on cost")
        out.assume("lora_alpha", out.value("lora_rank") * 2, f, "lora_alpha not set: LLaMA-Factory default 2 x rank")
        tgt = doc.strs("lora_target") or ["all"]
        t, unknown = targets(tgt)
        if doc.has("lora_target"):
            out.set("lora_targets", t or ("all-linear",), f, "lora_target")
        else:
            out.assume("lora_targets", ("all-linear",), f, "lora_target not set: LLaMA-Factory default all")
        if unknown:
            out.ignore(f, "lora_target", f"modules {', '.join(unknown)} not modelled")
        if doc.get("additional_target"):
            out.set("modules_to_save", str(doc.get("additional_target")), f, "additional_target",
                    "trained in full; not counted")
    elif ft == "freeze":
        out.set("method", "freeze", f, "finetuning_type")
        n = doc.int("freeze_trainable_layers", minimum=None)
        if isinstance(n, int) and n != 0:
            out.set("trainable_layers", abs(n), f, "freeze_trainable_layers",
                    "the first layers (negative value): counted as the last" if n < 0 else "")
        else:
            out.assume("trainable_layers", 2, f, "freeze_trainable_layers not set: LLaMA-Factory default")
    elif ft == "full":
        out.set("method", "full", f, "finetuning_type")
        if truthy(doc.get("pure_bf16", False)):
            out.set("master_weights", "none", f, "pure_bf16", "bf16 weights trained in place")
        if truthy(doc.get("use_galore", False)):
            _llamafactory_galore(doc, out)
    out.take("seq_len", doc.int("cutoff_len"), f, "cutoff_len", LLAMAFACTORY_CUTOFF_DEFAULT,
             "cutoff_len not set: LLaMA-Factory default")
    stage = str(doc.get("stage") or "sft")
    pack = doc.get("packing")
    if truthy(doc.get("neat_packing", False)):
        out.set("packing", True, f, "neat_packing")
    elif pack is not None:
        out.set("packing", truthy(pack), f, "packing")
    else:
        out.assume("packing", stage == "pt", f, f"packing not set: LLaMA-Factory packs only pre-training (stage {stage})")
    if not out.value("packing"):
        out.assume("padding", "longest", f, "unpacked batches padded to their longest sample (LLaMA-Factory's collator)")
    _llamafactory_stage(doc, out, stage)
    if truthy(doc.get("disable_gradient_checkpointing", False)):
        out.set("grad_ckpt", False, f, "disable_gradient_checkpointing")
    elif truthy(doc.get("use_unsloth_gc", False)):
        out.set("grad_ckpt", True, f, "use_unsloth_gc", "unsloth's offloaded checkpointing: counted as checkpointing")
    else:
        out.assume("grad_ckpt", True, f, "LLaMA-Factory enables gradient checkpointing unless "
                                         "disable_gradient_checkpointing is set")
    doc.touch("use_reentrant_gc")
    _attention_impl(doc, out, "flash_attn")
    out.assume("flash_attn", True, f, "flash_attn not set: LLaMA-Factory default auto (SDPA or FlashAttention)")
    if truthy(doc.get("enable_liger_kernel", False)):
        out.notes.append(f"{f}: enable_liger_kernel: Liger's fused kernels are not modelled")
    ms = doc.int("max_samples")
    if isinstance(ms, int) and ms > 0:
        ds = doc.get("dataset")
        n_ds = len([x for x in str(ds).split(",") if x.strip()]) if ds else 1
        out.set("examples", float(ms * n_ds), f, "max_samples",
                f"at most {ms} per dataset x {n_ds} dataset(s): an upper bound")
    _hf_args(doc, out, follow, {"precision": "fp32", "precision_why": "neither bf16 nor fp16 set: fp32 "
                                "(transformers default)"}, "transformers")
    _common_ignored(doc, out)


LLAMAFACTORY_PREF_LOSSES = {"orpo": "orpo", "simpo": "simpo"}
"""LLaMA-Factory `pref_loss` values that are stages of their own (sigmoid, hinge, ipo, kto_pair: DPO)."""
AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "grpo": "grpo",
              "gdpo": "grpo"}
"""axolotl `rl` values -> tuneplan stages (IPO is DPO with another loss; GDPO a GRPO variant)."""


def _llamafactory_galore(doc: Doc, out: ConfigRead) -> None:
    """LLaMA-Factory's `use_galore` (hparams/finetuning_args.py, 0.9.5): GaLore-AdamW with its own rank
    default 16; `galore_layerwise` steps each weight in its gradient hook (counted with every gradient
    held: an upper bound); `galore_target` other than all is counted as all the block linears."""
    f = doc.path
    out.set("optimizer", "galore-adamw", f, "use_galore")
    out.take("galore_rank", doc.int("galore_rank"), f, "galore_rank", LLAMAFACTORY_GALORE_RANK_DEFAULT,
             "galore_rank not set: LLaMA-Factory default")
    if truthy(doc.get("galore_layerwise", False)):
        out.ignore(f, "galore_layerwise", "layer-wise steps free each gradient early: counted with all of them held")
    tgt = doc.get("galore_target")
    if tgt not in (None, "all"):
        out.ignore(f, "galore_target", f"'{tgt}': counted as all the block linears")
    doc.touch("galore_update_interval", "galore_scale", "galore_proj_type")


def _llamafactory_stage(doc: Doc, out: ConfigRead, stage: str) -> None:
    f = doc.path
    if stage in ("sft", "pt"):
        return
    if stage == "dpo":
        loss = str(doc.get("pref_loss") or "sigmoid")
        out.set("stage", LLAMAFACTORY_PREF_LOSSES.get(loss, "dpo"), f, "stage" + ("+pref_loss" if doc.has(
            "pref_loss") else ""))
    elif stage in ("kto", "ppo"):
        out.set("stage", stage, f, "stage")
    else:
        out.notes.append(f"{f}: stage {stage}: estimated as supervised fine-tuning steps")


def _rl_keys(doc: Doc, out: ConfigRead, prefix: str = "") -> None:
    """TRL's GRPO / RLOO keys (top level in TRL configs, under `trl:` in axolotl)."""
    f = doc.path
    for key, fld in (("num_generations", "group_size"), ("max_completion_length", "completion_len_max")):
        v = doc.int(prefix + key)
        if v and out.value("stage") in ("grpo", "ppo", "rloo"):
            out.set(fld, v, f, prefix + key)


# ---- TRL / transformers --------------------------------------------------------------------------

TRL_KEYS = ("max_length", "max_seq_length", "packing", "dataset_text_field", "dataset_name", "dataset_mixture",
            "use_peft", "lora_r", "model_name_or_path", "assistant_only_loss", "completion_only_loss",
            "padding_free", "dataset_kwargs", "chat_template", "num_generations", "max_completion_length")
"""Keys that mark a TRL script config (SFTConfig + ModelConfig + ScriptArguments) rather than bare
transformers TrainingArguments."""


def read_trl(doc: Doc, out: ConfigRead, follow) -> None:
    f = doc.path
    is_trl = any(doc.has(k) for k in TRL_KEYS)
    flavour = "TRL SFTConfig" if is_trl else "transformers TrainingArguments"
    out.notes.append(f"{f}: read as {flavour} (defaults are {flavour}'s)")
    _model(doc, out, "model_name_or_path")
    for key in ("torch_dtype", "dtype"):
        out.take("precision", precision(doc.get(key)), f, key, note="model loaded in it")
    if not _attention_impl(doc, out, "attn_implementation"):
        out.assume("flash_attn", True, f, "attn_implementation not set: transformers' default SDPA")
    b4, b8 = (k if doc.flag(k) else None for k in ("load_in_4bit", "load_in_8bit"))  # the keys that load 4 / 8 bits
    if truthy(doc.get("use_peft", False)):
        method = "dora" if truthy(doc.get("use_dora", False)) else "lora"
        method = _quant_method(out, f, method, b4, b8)
        out.set("method", method, f, "use_peft")
        _lora_rank_alpha(doc, out, "lora_r", TRL_LORA_R_DEFAULT, "lora_r not set: TRL ModelConfig default",
                         "no effect on cost")
        _target_modules(doc, out, f)
        out.assume("lora_targets", PEFT_DEFAULT_TARGETS, f, "lora_target_modules not set: peft's default q_proj, v_proj")
    else:
        out.assume("method", "full", f, "use_peft not set: every parameter trained")
        if b4 or b8:
            out.ignore(f, b4 or b8, "quantised loading without use_peft: full fine-tuning needs 16-bit weights")
    if doc.has("num_generations"):
        out.set("stage", "grpo", f, "num_generations", "GRPOConfig's key (RLOO: --stage rloo)")
        _rl_keys(doc, out)
    read_trl_rl(doc, out)
    seq_key = next((k for k in ("max_length", "max_seq_length") if doc.has(k)), None)
    out.take("seq_len", doc.int(seq_key) if seq_key else None, f, seq_key or "max_length",
             TRL_MAX_LENGTH_DEFAULT if is_trl else None, "max_length not set: TRL SFTConfig default")
    out.take("packing", doc.flag("packing"), f, "packing")
    doc.touch("packing_strategy")
    if truthy(doc.get("padding_free", False)):
        out.set("packing", True, f, "padding_free", "padding-free batches: no padding, as packing")
    if not out.value("packing"):
        out.assume("packing", False, f, "packing not set: off")
        out.assume("padding", "longest", f, "unpacked batches padded to their longest sample (the trainer's collator)")
    if truthy(doc.get("activation_offloading", False)):
        out.set("activation_offload", "true", f, "activation_offloading", "not modelled: activations counted on the GPU")
    defaults = {"precision": "bf16" if is_trl else "fp32",
                "precision_why": "bf16 not set: TRL's default bf16 (unless fp16)" if is_trl else
                "neither bf16 nor fp16 set: fp32 (transformers default)",
                "grad_ckpt": is_trl,
                "grad_ckpt_why": "gradient_checkpointing not set: TRL's default on" if is_trl else
                "gradient_checkpointing not set: transformers default off"}
    _hf_args(doc, out, follow, defaults, flavour)
    _common_ignored(doc, out)
