"""RL frameworks' configs: verl (its Hydra YAML, `actor_rollout_ref.*`, `data.*`, `trainer.*`), NeMo RL
(YAML recipes, `policy.*`, `grpo.*`, `cluster.*`), OpenRLHF (the arguments of `openrlhf.cli.train_ppo_ray`
in a launch script, read as text and never run) and TRL's GRPOConfig / DPOConfig keys.

Key names and defaults: verl 0.9.1 (verl/trainer/config/_generated_ppo_trainer.yaml,
experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml), OpenRLHF 0.11.2
(openrlhf/cli/train_ppo_ray.py; the older underscore names of 0.5-0.9 read as their aliases), TRL 1.16
(trl/trainer/grpo_config.py, dpo_config.py) and NeMo RL's recipes (examples/configs/grpo_math_1B.yaml:
PyPI's nemo-rl 0.0.0 is a placeholder, so its keys are those of the GitHub recipes, v0.3).
"""

from __future__ import annotations

import shlex

from tuneplan.configs.base import NO_EFFECT, ConfigError, ConfigRead, Doc

OPENRLHF_ENTRY = "openrlhf.cli.train_ppo_ray"
OPENRLHF_ALIASES = {
    "pretrain": "actor_model_name_or_path", "critic_pretrain": "critic_model_name_or_path",
    "reward_pretrain": "reward_model_name_or_path", "micro_train_batch_size": "train_micro_batch_size",
    "n_samples_per_prompt": "rollout_n_samples_per_prompt", "generate_max_len": "rollout_max_new_tokens",
    "prompt_max_len": "data_max_len", "init_kl_coef": "algo_kl_init_coef", "zero_stage": "ds_zero_stage",
    "gradient_checkpointing": "actor_gradient_checkpointing_enable", "max_epochs": "train_max_epochs",
    "advantage_estimator": "algo_advantage_estimator", "colocate_all_models": "train_colocate_all",
    "colocate_actor_ref": "train_colocate_actor_ref", "colocate_critic_reward": "train_colocate_critic_reward",
    "async_train": "train_async_enable", "lora_rank": "ds_lora_rank", "deepspeed_enable_sleep": "ds_enable_sleep",
    "micro_rollout_batch_size": "rollout_micro_batch_size", "ring_attn_size": "ds_ring_attn_size"}
"""OpenRLHF < 0.10's argument names -> 0.11's (dots written as underscores)."""
OPENRLHF_VLLM_SHARE = 0.95
"""OpenRLHF 0.11.2 `--vllm.gpu_memory_utilization` default (its engines on their own GPUs)."""


def openrlhf_args(text: str) -> dict | None:
    """The arguments of the `openrlhf.cli.train_ppo_ray` command in a launch script, as a mapping
    {"openrlhf": {name: value}} (dots in names as underscores; a bare flag is True), or None when the
    script does not run it. The script is only read."""
    if OPENRLHF_ENTRY not in text:
        return None
    words = shlex.split(text.replace("\\\n", " ").split(OPENRLHF_ENTRY, 1)[1], comments=True)
    args: dict = {}
    key = None
    for w in words:
        if w in ("&&", ";", "|", "||"):
            break
        if w.startswith("--"):
            key = w[2:].replace(".", "_").replace("-", "_")
            key = OPENRLHF_ALIASES.get(key, key)
            args[key] = True
        elif key is not None:
            args[key] = w if args[key] is True else f"{args[key]} {w}"
    return {"openrlhf": args}


def detect(data: dict) -> str | None:
    """verl, nemo-rl or openrlhf from the top-level keys, else None."""
    if isinstance(data.get("actor_rollout_ref"), dict):
        return "verl"
    if "openrlhf" in data and len(data) == 1:
        return "openrlhf"
    if isinstance(data.get("policy"), dict) and (set(data) & {"grpo", "dpo", "cluster", "loss_fn"}):
        return "nemo-rl"
    return None


def _float(doc: Doc, key: str, value, default: float = 0.0) -> float:
    """A number >= 0 (a KL coefficient may be 0); anything else is a one-line ConfigError."""
    v = default if value is None else value
    try:
        x = float(v) if not isinstance(v, bool) else -1.0
    except (TypeError, ValueError):
        x = -1.0
    if not 0.0 <= x < float("inf"):
        raise ConfigError(doc.where, key, f"'{v}' is not a number >= 0")
    return x


def _engine(out: ConfigRead, f: str, name, key: str) -> None:
    if name is not None:
        eng = "vllm" if str(name).lower() in ("vllm", "sglang", "trtllm") else "hf"
        out.set("rollout_engine", eng, f, key, "paged-KV servers (vLLM, SGLang) costed as vLLM" if eng == "vllm" else "")


def _stage(out: ConfigRead, f: str, adv, key: str) -> None:
    """The stage from an advantage estimator: GAE needs a critic (PPO), the rest are critic-free."""
    if adv is not None:
        a = str(adv).lower()
        out.set("stage", "ppo" if a == "gae" else "rloo" if a == "rloo" else "grpo", f, key,
                "" if a in ("gae", "grpo", "rloo") else f"{a}: critic-free, costed as GRPO")


def _old_logprobs(out: ConfigRead, f: str, who: str) -> None:
    out.assume("old_logprobs", True, f, f"{who} recomputes the rollout policy's log-probs after generation, every step")


def _minis(out: ConfigRead, f: str, total, per, key: str) -> None:
    """Optimizer steps per batch of rollouts = the batch over the mini-batch (same units)."""
    if total and per and total > per:
        out.set("train_steps_per_rollout", int(total // per), f, key, f"{total:g} / {per:g}")


def read_verl(doc: Doc, out: ConfigRead, follow) -> None:
    f, g = doc.path, doc.get
    out.notes.append(f"{f}: read as verl (ppo_trainer.yaml; defaults are verl 0.9.1's)")
    _old_logprobs(out, f, "verl")
    A, R = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
    if g("actor_rollout_ref.model.path"):
        out.set("model", str(g("actor_rollout_ref.model.path")), f, "actor_rollout_ref.model.path")
    _stage(out, f, g("algorithm.adv_estimator"), "algorithm.adv_estimator")
    out.assume("stage", "ppo", f, "algorithm.adv_estimator not set: verl's default gae (PPO)")
    per_node, nodes = doc.int("trainer.n_gpus_per_node") or 8, doc.int("trainer.nnodes") or 1
    train = per_node * nodes
    gen = (doc.int("rollout.nnodes", 0) or 0) * (doc.int("rollout.n_gpus_per_node") or 0)  # fully-async rollouter
    out.set("gpus", train + gen, f, "trainer.n_gpus_per_node x trainer.nnodes" + (" + rollout.*" if gen else ""))
    out.set("nodes", nodes + (doc.int("rollout.nnodes") or 0), f, "trainer.nnodes")
    _engine(out, f, g(R + "name"), R + "name")
    out.assume("rollout_engine", "vllm", f, "rollout.name not set: vLLM")
    if out.value("rollout_engine") == "vllm":  # the engine's own options (verl's hf rollout has none)
        if gen:
            out.set("rollout_gpus", gen, f, "rollout.nnodes x rollout.n_gpus_per_node", "fully-async rollouter")
            out.set("off_policy_steps", 1, f, "async_training", "generation runs ahead of the trainer")
        else:
            if doc.has(R + "free_cache_engine"):
                out.set("rollout_sleep", bool(g(R + "free_cache_engine")), f, R + "free_cache_engine")
            out.assume("rollout_sleep", True, f, "rollout.free_cache_engine not set: verl's default True (the "
                       "engine frees its KV cache while training)")
        for key, fld in (("tensor_model_parallel_size", "rollout_tp"), ("pipeline_model_parallel_size", "rollout_pp"),
                         ("max_num_seqs", "max_num_seqs")):
            if doc.int(R + key):
                out.set(fld, doc.int(R + key), f, R + key)
        out.assume("rollout_tp", 2, f, "rollout.tensor_model_parallel_size not set: verl's default 2")
        if doc.num(R + "gpu_memory_utilization"):
            out.set("gpu_memory_utilization", doc.num(R + "gpu_memory_utilization"), f, R + "gpu_memory_utilization")
        out.assume("gpu_memory_utilization", 0.5, f, "rollout.gpu_memory_utilization not set: verl's default 0.5")
    if doc.int(R + "n"):
        out.set("group_size", doc.int(R + "n"), f, R + "n")
    prompts, mini = doc.int("data.train_batch_size"), doc.int(A + "ppo_mini_batch_size")
    if prompts:
        out.set("prompts_per_step", prompts, f, "data.train_batch_size")
    _minis(out, f, prompts or 1024, mini, A + "ppo_mini_batch_size")
    for key, fld in (("data.max_prompt_length", "seq_len"), ("data.max_response_length", "completion_len_max")):
        if doc.int(key):
            out.set(fld, doc.int(key), f, key, "the cap" if fld == "completion_len_max" else "prompt cap")
    if doc.int(A + "ppo_micro_batch_size_per_gpu"):
        out.set("micro_batch", doc.int(A + "ppo_micro_batch_size_per_gpu"), f, A + "ppo_micro_batch_size_per_gpu")
    if out.value("stage") == "ppo":
        if doc.int(A + "ppo_epochs"):
            out.set("ppo_epochs", doc.int(A + "ppo_epochs"), f, A + "ppo_epochs")
        out.assume("ppo_epochs", 1, f, "actor.ppo_epochs not set: verl's default 1")
    kl = (A + "kl_loss_coef") if g(A + "use_kl_loss") else "algorithm.kl_ctrl.kl_coef" if g(
        "algorithm.use_kl_in_reward") else None
    if kl:
        out.set("kl_beta", _float(doc, kl, g(kl), 0.001), f, kl, "" if doc.has(kl) else "verl's default 0.001")
    out.assume("kl_beta", 0.0, f, "use_kl_loss and use_kl_in_reward off (verl's defaults): no reference model")
    ckpt = g("actor_rollout_ref.model.enable_gradient_checkpointing", True)
    out.set("grad_ckpt", bool(ckpt), f, "actor_rollout_ref.model.enable_gradient_checkpointing")
    if str(g(A + "strategy", "fsdp")).startswith("fsdp"):
        out.set("sharding", "fsdp", f, A + "strategy", "FSDP full sharding (verl's default fsdp_size -1)")
    for key, fld in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                     ("expert_model_parallel_size", "ep"), ("expert_tensor_parallel_size", "etp")):
        if doc.int(A + "megatron." + key):
            out.set(fld, doc.int(A + "megatron." + key), f, A + "megatron." + key)
    for key in (A + "fsdp_config.param_offload", A + "fsdp_config.optimizer_offload"):
        if g(key):
            out.ignore(f, key, "offload to the CPU is not modelled: the states are counted on the GPU")
    _no_effect(doc, out, ("actor_rollout_ref.actor.optim", "trainer.project_name", "trainer.experiment_name",
                          "trainer.logger", "data.train_files", "data.val_files", "trainer.save_freq",
                          "trainer.test_freq", "trainer.total_epochs", "custom_reward_function"))


def read_nemo_rl(doc: Doc, out: ConfigRead, follow) -> None:
    f, g = doc.path, doc.get
    out.notes.append(f"{f}: read as a NeMo RL recipe (policy / grpo / cluster)")
    if doc.has("grpo"):
        _old_logprobs(out, f, "NeMo RL")
    P, G = "policy.", "policy.generation."
    if g(P + "model_name"):
        out.set("model", str(g(P + "model_name")), f, P + "model_name")
    out.set("stage", "grpo" if doc.has("grpo") else "dpo" if doc.has("dpo") else "sft", f,
            "grpo" if doc.has("grpo") else "dpo" if doc.has("dpo") else "policy")
    per_node, nodes = doc.int("cluster.gpus_per_node") or 8, doc.int("cluster.num_nodes") or 1
    out.set("gpus", per_node * nodes, f, "cluster.gpus_per_node x cluster.num_nodes")
    out.set("nodes", nodes, f, "cluster.num_nodes")
    if out.value("stage") == "grpo":
        _engine(out, f, g(G + "backend"), G + "backend")
        colocated = g(G + "colocated.enabled", True)
        if colocated:
            out.set("rollout_sleep", True, f, G + "colocated.enabled", "colocated: vLLM sleeps while training")
        else:
            res = (doc.int(G + "colocated.resources.gpus_per_node") or per_node) * (
                doc.int(G + "colocated.resources.num_nodes") or 1)
            out.set("rollout_gpus", res, f, G + "colocated.resources")
        for key, fld in (("tensor_parallel_size", "rollout_tp"), ("pipeline_parallel_size", "rollout_pp")):
            if doc.int(G + "vllm_cfg." + key):
                out.set(fld, doc.int(G + "vllm_cfg." + key), f, G + "vllm_cfg." + key)
        if doc.num(G + "vllm_cfg.gpu_memory_utilization"):
            out.set("gpu_memory_utilization", doc.num(G + "vllm_cfg.gpu_memory_utilization"), f,
                    G + "vllm_cfg.gpu_memory_utilization")
        prompts, group = doc.int("grpo.num_prompts_per_step"), doc.int("grpo.num_generations_per_prompt")
        for v, fld, key in ((prompts, "prompts_per_step", "grpo.num_prompts_per_step"),
                            (group, "group_size", "grpo.num_generations_per_prompt"),
                            (doc.int(G + "max_new_tokens"), "completion_len_max", G + "max_new_tokens")):
            if v:
                out.set(fld, v, f, key)
        _minis(out, f, (prompts or 0) * (group or 0), doc.int(P + "train_global_batch_size"),
               P + "train_global_batch_size")
        out.set("kl_beta", _float(doc, "loss_fn.reference_policy_kl_penalty", g("loss_fn.reference_policy_kl_penalty")),
                f, "loss_fn.reference_policy_kl_penalty")
        if g("grpo.async_grpo.enabled"):
            out.set("off_policy_steps", doc.int("grpo.async_grpo.max_trajectory_age_steps") or 1, f,
                    "grpo.async_grpo.max_trajectory_age_steps")
        total, new = doc.int(P + "max_total_sequence_length"), doc.int(G + "max_new_tokens")
        if total and new and total > new:
            out.set("seq_len", total - new, f, P + "max_total_sequence_length", "less max_new_tokens: the prompt")
    elif doc.int(P + "max_total_sequence_length"):
        out.set("seq_len", doc.int(P + "max_total_sequence_length"), f, P + "max_total_sequence_length")
    if doc.int(P + "train_micro_batch_size"):
        out.set("micro_batch", doc.int(P + "train_micro_batch_size"), f, P + "train_micro_batch_size")
    mg = P + "megatron_cfg."
    if g(mg + "enabled"):
        for key, fld in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                         ("context_parallel_size", "cp"), ("expert_model_parallel_size", "ep"),
                         ("expert_tensor_parallel_size", "etp")):
            if doc.int(mg + key):
                out.set(fld, doc.int(mg + key), f, mg + key)
        if g(mg + "activation_checkpointing") is not None:
            out.set("grad_ckpt", bool(g(mg + "activation_checkpointing")), f, mg + "activation_checkpointing")
    else:
        dt = P + "dtensor_cfg."
        out.set("sharding", "fsdp", f, dt + "enabled", "DTensor FSDP2: weights, gradients and states sharded")
        for key, fld in (("tensor_parallel_size", "tp"), ("context_parallel_size", "cp")):
            if doc.int(dt + key):
                out.set(fld, doc.int(dt + key), f, dt + key)
        if g(dt + "activation_checkpointing") is not None:
            out.set("grad_ckpt", bool(g(dt + "activation_checkpointing")), f, dt + "activation_checkpointing")
    _no_effect(doc, out, ("policy.optimizer", "policy.scheduler", "logger", "checkpointing", "data.dataset_name",
                          "env", "grpo.val_period", "grpo.max_num_steps"))


def read_openrlhf(doc: Doc, out: ConfigRead, follow) -> None:
    f = doc.path
    out.notes.append(f"{f}: read as the arguments of {OPENRLHF_ENTRY} (OpenRLHF 0.11.2 names; the script is not run)")
    _old_logprobs(out, f, "OpenRLHF")

    def arg(name, conv=int):
        v = doc.get("openrlhf." + name)
        if v is None or v is True and conv is not bool:
            return None
        if conv is bool:
            return v is True or str(v).lower() in ("true", "1")
        if conv is str:
            return str(v)
        x = _float(doc, "--" + name, v)
        if conv is int and not x.is_integer():
            raise ConfigError(doc.where, "--" + name, f"'{v}' is not an integer")
        return conv(x)

    def pool(who: str) -> int:
        return (arg(who + "_num_nodes") or 1) * (arg(who + "_num_gpus_per_node") or 8)

    if arg("actor_model_name_or_path", str):
        out.set("model", arg("actor_model_name_or_path", str), f, "--actor.model_name_or_path")
    _stage(out, f, arg("algo_advantage_estimator", str) or "gae", "--algo.advantage.estimator")
    ppo = out.value("stage") == "ppo"
    every = arg("train_colocate_all", bool)
    engines = (arg("vllm_num_engines") or 0) * (arg("vllm_tensor_parallel_size") or 1)
    sizes = {"rollout_gpus": 0 if every else engines, "critic_gpus": 0 if every or not ppo else pool("critic"),
             "ref_gpus": 0 if every or arg("train_colocate_actor_ref", bool) else pool("ref"),
             "reward_gpus": 0 if every or arg("train_colocate_critic_reward", bool) or not arg(
                 "reward_model_name_or_path", str) else pool("reward")}
    if not (arg("algo_kl_init_coef", float) or 0.01):
        sizes["ref_gpus"] = 0
    out.set("gpus", pool("actor") + sum(sizes.values()), f, "--actor/critic/ref/reward num_nodes x num_gpus_per_node"
            + ("" if every else " + vllm.num_engines x vllm.tensor_parallel_size"))
    out.set("nodes", max(1, out.value("gpus") // (arg("actor_num_gpus_per_node") or 8)), f, "--actor.num_nodes")
    for fld, n in sizes.items():
        if n:
            out.set(fld, n, f, "--" + fld.replace("_gpus", ".num_nodes").replace("rollout", "vllm"))
    if engines:
        out.set("rollout_engine", "vllm", f, "--vllm.num_engines")
        out.set("rollout_tp", arg("vllm_tensor_parallel_size") or 1, f, "--vllm.tensor_parallel_size")
        share = arg("vllm_gpu_memory_utilization", float)
        out.set("gpu_memory_utilization", share or OPENRLHF_VLLM_SHARE, f, "--vllm.gpu_memory_utilization",
                "" if share else "OpenRLHF's default 0.95")
        if every and arg("vllm_enable_sleep", bool):
            out.set("rollout_sleep", True, f, "--vllm.enable_sleep")
    if arg("critic_model_name_or_path", str) is None and ppo:
        out.notes.append(f"{f}: no --critic.model_name_or_path: the critic is the actor's architecture")
    if arg("reward_model_name_or_path", str) and not arg("reward_remote_url", str):
        out.set("reward_model", arg("reward_model_name_or_path", str), f, "--reward.model_name_or_path")
    for name, fld, conv in (("rollout_batch_size", "prompts_per_step", int),
                            ("rollout_n_samples_per_prompt", "group_size", int),
                            ("rollout_max_new_tokens", "completion_len_max", int), ("data_max_len", "seq_len", int),
                            ("train_micro_batch_size", "micro_batch", int), ("algo_kl_init_coef", "kl_beta", float),
                            ("ds_lora_rank", "lora_rank", int)):
        if arg(name, conv) is not None:
            out.set(fld, arg(name, conv), f, "--" + name)
    if arg("ds_lora_rank"):
        out.set("method", "lora", f, "--ds.lora.rank")
    if ppo and arg("train_max_epochs"):
        out.set("ppo_epochs", arg("train_max_epochs"), f, "--train.max_epochs")
    elif ppo:
        out.assume("ppo_epochs", 1, f, "--train.max_epochs not set: OpenRLHF's default 1")
    batch = (arg("rollout_batch_size") or 1024) * (arg("rollout_n_samples_per_prompt") or 1)
    _minis(out, f, batch, arg("train_batch_size") or 128, "--train.batch_size")
    zero = arg("ds_zero_stage")
    out.set("sharding", {3: "zero3", 2: "zero2", 1: "zero1"}.get(zero or 2, "ddp"), f, "--ds.zero_stage",
            "" if zero else "OpenRLHF's default 2")
    out.set("grad_ckpt", bool(arg("actor_gradient_checkpointing_enable", bool)), f,
            "--actor.gradient_checkpointing_enable")
    if arg("train_async_enable", bool) and engines and not every:
        out.set("off_policy_steps", arg("train_async_queue_size") or 1, f, "--train.async_enable")
    if arg("bf16", bool):
        out.set("precision", "bf16", f, "--bf16")


def read_trl_rl(doc: Doc, out: ConfigRead) -> None:
    """TRL GRPOConfig's rollout keys and DPOConfig's stage (top-level keys of a TRL config)."""
    f, g = doc.path, doc.get
    if not doc.has("num_generations") and doc.has("beta") and (doc.has("loss_type") or doc.has(
            "precompute_ref_log_probs") or doc.has("max_prompt_length")):
        out.set("stage", "dpo", f, "beta", "DPOConfig's keys")
        for k in ("beta", "loss_type"):
            if doc.has(k):
                doc.touch(k)
                out.ignore(f, k, NO_EFFECT)
        if g("precompute_ref_log_probs"):
            out.set("precompute_ref", True, f, "precompute_ref_log_probs")
        return
    if out.value("stage") not in ("grpo", "rloo"):
        return
    if g("use_vllm"):
        out.set("rollout_engine", "vllm", f, "use_vllm")
        if g("vllm_mode", "colocate") == "colocate":
            share = doc.num("vllm_gpu_memory_utilization")
            if share:
                out.set("gpu_memory_utilization", share, f, "vllm_gpu_memory_utilization")
            if g("vllm_enable_sleep_mode"):
                out.set("rollout_sleep", True, f, "vllm_enable_sleep_mode")
            if doc.int("vllm_tensor_parallel_size"):
                out.set("rollout_tp", doc.int("vllm_tensor_parallel_size"), f, "vllm_tensor_parallel_size")
        else:
            out.notes.append(f"{f}: vllm_mode server: give the server's GPUs with --rollout-gpus (the config does "
                             "not say how many)")
    if g("beta") is not None:
        out.set("kl_beta", _float(doc, "beta", g("beta")), f, "beta")
    if doc.int("steps_per_generation") and doc.int("steps_per_generation") > 1:
        out.set("train_steps_per_rollout", doc.int("steps_per_generation"), f, "steps_per_generation")
    if doc.int("max_prompt_length"):
        out.set("seq_len", doc.int("max_prompt_length"), f, "max_prompt_length", "the prompt")


def _no_effect(doc: Doc, out: ConfigRead, keys: tuple[str, ...]) -> None:
    for k in keys:
        if doc.has(k):
            doc.touch(k)
            out.ignore(doc.path, k, NO_EFFECT)
