"""Measure preference and RL steps with TRL itself: DPOTrainer and GRPOTrainer on the profiler's
random-weight model, synthetic text of exact token lengths (a word-level tokenizer built in memory, so
nothing is downloaded), a few optimizer steps, each timed from the trainer's step begin to its end
(GRPO: generation, scoring and the update).

torch, transformers, trl and datasets are imported inside the functions."""

from __future__ import annotations

import copy
import tempfile
import time
from typing import Any

from tuneplan.errors import InputError
from tuneplan.profile.config import ProfileConfig

PROFILED_STAGES = ("sft", "dpo", "grpo")
"""Stages the profiler measures (sft: its own training loop; dpo, grpo: TRL's trainers)."""
TRAINERS = ("loop", "trl")
"""How an SFT step is run: the profiler's own loop (default) or TRL's SFTTrainer (dpo, grpo: always TRL)."""
WORDS = 256
"""Words of the in-memory tokenizer (count): token ids 3..258 of the model's vocabulary."""


def check_stage(cfg: ProfileConfig) -> None:
    if cfg.stage not in PROFILED_STAGES:
        raise InputError("stage", f"unknown stage '{cfg.stage}' for the profiler", PROFILED_STAGES)
    if cfg.trainer not in TRAINERS:
        raise InputError("trainer", f"unknown trainer '{cfg.trainer}'", TRAINERS)
    if cfg.stage == "sft" and cfg.trainer == "loop":
        return
    import importlib.util

    if importlib.util.find_spec("trl") is None or importlib.util.find_spec("datasets") is None:
        raise InputError("stage", f"{cfg.stage}: needs the trl package (pip install 'tuneplan[profile]')")
    if cfg.nproc > 1:
        raise InputError("nproc", f"--stage {cfg.stage} is profiled in one process (--nproc 1)")
    if cfg.stage == "grpo" and (cfg.micro_batch * cfg.grad_accum) % cfg.group_size:
        raise InputError("group-size", f"micro-batch x grad-accum ({cfg.micro_batch * cfg.grad_accum} "
                         f"completions) must be divisible by the group size ({cfg.group_size}), as in TRL")


def word_tokenizer(vocab_size: int) -> Any:
    """A whitespace word-level tokenizer: <pad> 0, <s> 1, </s> 2, then w0..w255 (ids < vocab_size)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    n = max(1, min(WORDS, vocab_size - 3))
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(n)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<pad>")


def _text(rng: Any, n: int) -> str:
    return " ".join(f"w{int(x)}" for x in rng.integers(0, WORDS, size=max(1, n)))


def _dataset(cfg: ProfileConfig, rows: int) -> Any:
    """DPO: prompt + chosen + rejected, each completion half the sequence (seq_len tokens per sequence
    with the eos); GRPO: a prompt of seq_len tokens."""
    import numpy as np
    from datasets import Dataset

    rng = np.random.default_rng(cfg.seed)
    if cfg.stage == "sft":
        data = {"text": [_text(rng, cfg.seq_len - 1) for _ in range(rows)]}
    elif cfg.stage == "dpo":
        half = cfg.seq_len // 2
        data = {"prompt": [_text(rng, half) for _ in range(rows)],
                # a leading space: TRL joins prompt and completion text as they are
                "chosen": [" " + _text(rng, cfg.seq_len - half - 1) for _ in range(rows)],
                "rejected": [" " + _text(rng, cfg.seq_len - half - 1) for _ in range(rows)]}
    else:
        data = {"prompt": [_text(rng, cfg.seq_len) for _ in range(rows)]}
    return Dataset.from_dict(data)


def _timer(device: str) -> Any:
    from transformers import TrainerCallback

    from tuneplan.profile.device import sync

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            sync(device)
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            sync(device)
            self.times.append(time.perf_counter() - self.t0)

    return StepTimer()


def _common_args(cfg: ProfileConfig, device: str, out_dir: str) -> dict[str, Any]:
    return dict(output_dir=out_dir, per_device_train_batch_size=cfg.micro_batch,
                gradient_accumulation_steps=cfg.grad_accum, max_steps=cfg.warmup + cfg.steps,
                learning_rate=1e-5, report_to=[], save_strategy="no", logging_strategy="no",
                disable_tqdm=True, use_cpu=not device.startswith("cuda"), bf16=cfg.precision == "bf16",
                gradient_checkpointing=cfg.grad_ckpt, dataloader_num_workers=0, seed=cfg.seed)


def _reward(completions, **kw) -> list[float]:  # noqa: ANN001
    """A rule: the completion's length in characters (its cost is what the estimate leaves out)."""
    return [float(len(c)) for c in completions]


def measure_stage(cfg: ProfileConfig, built: Any, device: str) -> tuple[list[float], int | None]:
    """(timed step seconds after the warm-up, the tokens of the longest training micro-batch) of an SFT,
    DPO or GRPO run through TRL on the built model (a runner.BuiltModel)."""
    import warnings

    import datasets

    datasets.disable_progress_bars()
    model = built.model
    if cfg.stage == "grpo":  # the profiler builds models with use_cache off; generation needs the KV cache
        model.config.use_cache = True
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.use_cache = True
    tok = word_tokenizer(built.vocab_size)
    timer = _timer(device)
    longest = LongestBatch()
    hook = model.register_forward_pre_hook(longest, with_kwargs=True)
    n_rows = cfg.micro_batch * cfg.grad_accum * (cfg.warmup + cfg.steps)
    with tempfile.TemporaryDirectory(prefix="tuneplan-trl-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import trl

        common = _common_args(cfg, device, tmp)
        if cfg.stage == "sft":
            args, extra, rows = trl.SFTConfig(**common, max_length=cfg.seq_len, packing=False), {}, n_rows
        elif cfg.stage == "dpo":  # reference: a frozen copy (TRL would load one from the Hub by name)
            ref = None if cfg.is_lora else copy.deepcopy(model).eval().requires_grad_(False)
            args, extra, rows = trl.DPOConfig(**common, max_length=cfg.seq_len), {"ref_model": ref}, n_rows
        else:
            args = trl.GRPOConfig(**common, num_generations=cfg.group_size, max_completion_length=cfg.completion_len,
                                  generation_kwargs={"min_new_tokens": cfg.completion_len}, beta=0.0)
            extra, rows = {"reward_funcs": _reward}, max(n_rows // cfg.group_size, 1)
        trainer_class = {"sft": trl.SFTTrainer, "dpo": trl.DPOTrainer, "grpo": trl.GRPOTrainer}[cfg.stage]
        trainer = trainer_class(model=model, args=args, train_dataset=_dataset(cfg, rows), processing_class=tok,
                                callbacks=[timer], **extra)
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # no metrics printed
        try:
            trainer.train()
        finally:
            hook.remove()
    times = timer.times[cfg.warmup:]
    if not times:
        raise RuntimeError(f"TRL ran {len(timer.times)} steps, none after the {cfg.warmup} warm-up steps")
    return times, longest.tokens or None


class LongestBatch:
    """Forward pre-hook: the most tokens (`input_ids.numel()`, padded) one training forward took.
    Forwards without gradients (generation, a reference model's pass through the adapter-free policy)
    do not count."""

    def __init__(self) -> None:
        self.tokens = 0

    def __call__(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        ids = kwargs.get("input_ids", args[0] if args else None)
        if getattr(module, "training", False) and torch.is_grad_enabled() and ids is not None:
            self.tokens = max(self.tokens, int(ids.numel()))


def stage_cells(cfg: ProfileConfig, med: float) -> dict[str, Any]:
    """The row's stage columns and the throughput figures in the stage's own units: DPO samples are
    pairs (2 sequences each); GRPO samples are prompts, its tokens prompt + completion per completion."""
    import trl

    by_trl = {"framework": "trl", "trl_version": trl.__version__}
    if cfg.stage == "sft":
        return {"stage": "sft", **by_trl} if cfg.trainer == "trl" else {"stage": "sft"}
    if cfg.stage == "dpo":
        tokens = 2 * cfg.micro_batch * cfg.grad_accum * cfg.seq_len
        reference = "LoRA adapter disabled" if cfg.is_lora else "a frozen copy"
        return {"stage": "dpo", "tokens_per_s": tokens / med, "tokens_per_s_per_gpu": tokens / med,
                "train_tokens_total": None, **by_trl,
                "notes_extra": f"DPO pairs: chosen + rejected of seq_len tokens each; reference: {reference}"}
    comps = cfg.micro_batch * cfg.grad_accum
    tokens = comps * (cfg.seq_len + cfg.completion_len)
    return {"stage": "grpo", "group_size": cfg.group_size, "completion_len": cfg.completion_len,
            "prompts_per_step": comps // cfg.group_size, "tokens_per_s": tokens / med,
            "tokens_per_s_per_gpu": tokens / med, "samples_per_s": comps / cfg.group_size / med,
            "global_batch_size": comps // cfg.group_size, "train_tokens_total": None, **by_trl,
            "notes_extra": f"GRPO: {comps} completions of {cfg.completion_len} tokens (min_new_tokens) after "
                           "prompts of seq_len tokens, HF generate, rule reward, beta 0"}
