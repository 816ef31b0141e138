"""GRPO / PPO / RLOO: a step = rollout generation (HF generate in the training process, or vLLM
colocated or on its own GPUs) + scoring (reward model or a rule) + reference / value passes + the
policy update (an SFT step over prompt + completion for every completion)."""

from __future__ import annotations

import math

import numpy as np

from tuneplan.errors import InputError
from tuneplan.estimators.stage_run import (
    POLICY_PARTS,
    StageRun,
    add_memory,
    first_value,
    forward_only,
    reference_bytes,
    search_micro_batch,
    shard_degree,
)
from tuneplan.physics import stages as ps
from tuneplan.physics.architecture import kv_cache_bytes_per_token
from tuneplan.physics.constants import BYTES_PER_GIB, DEFAULT_CONSTANTS
from tuneplan.physics.ops import efficiency
from tuneplan.specs.gpu import GPUSpec
from tuneplan.specs.job import RL_STAGES, JobSpec
from tuneplan.specs.model import ModelSpec

DECODE_CEILING_TOKENS = 1e12
"""Decode's compute roofline takes the efficiency curve at its ceiling (tokens -> infinity): a decode
step's small matmuls are memory-bound, which its bytes-over-bandwidth term already counts."""


def _named_model(name: str, field: str) -> ModelSpec:
    """A second model of the job (reward model, teacher), its errors named as its own option."""
    from tuneplan.specs.catalog import resolve_model

    try:
        return resolve_model(name)
    except InputError as exc:
        raise InputError(field, str(exc).split(": ", 1)[-1].replace("pass --model ", f"pass --{field} ")) from None


def rl_batch(jspec: JobSpec, group: int) -> tuple[int, int, int]:
    """(prompts per step, completions per step, gradient-accumulation steps) of an RL job: with
    --prompts-per-step, completions = prompts x group and the micro-steps follow; without it, TRL's
    rule: completions = micro-batch x grad-accum x training GPUs, prompts = completions / group."""
    dp = jspec.training_gpus // (jspec.tp * jspec.pp * jspec.cp)
    per = jspec.micro_batch * dp
    if jspec.prompts_per_step is not None:
        n = jspec.prompts_per_step * group
        return jspec.prompts_per_step, n, ps.micro_steps(n, per)
    n = per * jspec.grad_accum
    if n % group:
        raise InputError("group-size", f"completions per step (micro-batch x grad-accum x training GPUs = {n}) "
                         f"must be divisible by the group size ({group}); or give --prompts-per-step")
    return n // group, n, jspec.grad_accum


def _rate(a: dict, tokens: float) -> np.ndarray:
    """Achieved FLOP/s of a forward over `tokens` tokens per GPU (the SFT efficiency curve)."""
    trial = dict(a)
    trial["micro_batch"] = np.maximum(np.asarray(a["micro_batch"]) * 0 + tokens, 1.0)
    trial["seq_len"] = np.ones_like(np.asarray(a["seq_len"], dtype=float))
    trial["cp"] = np.ones_like(trial["seq_len"])
    return a["peak_flops"] * efficiency(trial) * a["matmul_rel"]


def _forward_flops_per_token(a: dict, context: float, with_head: bool = True) -> np.ndarray:
    """Forward FLOPs of one token at a given attention context (blocks, adapters, head, attention)."""
    head = a["head_flops"] if with_head else 0.0
    return a["fwd_block_flops"] + a["adapter_flops"] + head + a["attn_flops_per_seq"] * context


def _engine(a: dict, gspec: GPUSpec, jspec: JobSpec, c) -> dict:
    """The rollout engines' layout: GPUs per engine (its tensor x pipeline parallel), engines, the
    weights each GPU holds and the memory share the engine reserves. HF generate runs in the training
    model's own layout; a vLLM engine has its own (`--rollout-tp`, else the smallest power of two that
    leaves half its share to the KV cache), on the training GPUs or on `--rollout-gpus`."""
    pbytes = first_value(a["weight_bytes_compute"])
    cap = gspec.memory_gib * BYTES_PER_GIB
    if jspec.rollout_engine != "vllm":  # the training model as it is stored (quantised base, fp32 adapters)
        split = first_value(a["tp"] * a["pp"])
        stored = first_value(a["params_frozen_linear"] * a["frozen_linear_bytes"] + a["params_frozen_other"]
                             * a["frozen_other_bytes"] + a["params_trainable"]
                             * np.where(a["method_code"] == 0, pbytes, 4.0))
        return {"vllm": False, "server": False, "split": split, "engines": first_value(a["dp"]), "tp": None,
                "weights": stored / split, "share": 0.0, "cap": cap, "pbytes": pbytes}
    server = jspec.rollout_gpus > 0
    share = jspec.gpu_memory_utilization or (ps.VLLM_SERVER_MEMORY_SHARE if server else ps.VLLM_SLEEP_MEMORY_SHARE
                                             if jspec.rollout_sleep else ps.VLLM_COLOCATE_MEMORY_SHARE)
    full = first_value(a["params_total"]) * pbytes  # merged weights at the compute precision
    pool = jspec.rollout_gpus if server else jspec.training_gpus
    pp = jspec.rollout_pp or 1
    tp = jspec.rollout_tp or ps.engine_tp(full, pool, pp, share * cap - c.workspace_gib * BYTES_PER_GIB)
    return {"vllm": True, "server": server, "split": float(tp * pp), "engines": pool // (tp * pp), "tp": tp,
            "weights": full / (tp * pp), "full": full, "share": share, "cap": cap, "pbytes": pbytes}


def generation(a: dict, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, n: int, prompt: int, completion: int, c,
               longest: int | None = None, tail_share: float = ps.DECODE_TAIL_BATCH_SHARE) -> dict:
    """Prefill, decode (to the mean length, then the tail to the longest on `tail_share` of the batch),
    refit and memory of one step's rollouts. The step's completions share the engines; an engine's
    weights and FLOPs split over its GPUs, each GPU computing at the SFT efficiency curve's rate. The KV cache is the model's own
    (architecture.kv_cache_bytes_per_token: MLA's compressed latent, sliding windows, Mamba states),
    its layers split over the pipeline and its KV heads over tensor parallel: a rank holds at least one
    head (vLLM replicates KV heads fewer than its tp; MLA's latent is one, on every rank)."""
    e = _engine(a, gspec, jspec, c)
    vllm, split = e["vllm"], e["split"]
    tp = e["tp"] if vllm else first_value(a["tp"])
    heads = 1 if mspec.is_mla else max(mspec.n_kv_heads, 1)
    kv_tok = kv_cache_bytes_per_token(mspec, prompt + completion, e["pbytes"]) / (split / tp * min(tp, heads))
    batch = n / e["engines"]
    waves = 1
    if vllm:
        kv_room = e["share"] * e["cap"] - e["weights"] - c.workspace_gib * BYTES_PER_GIB
        need = ps.kv_cache_bytes(batch, prompt + completion, kv_tok)  # paged: the mean length's blocks
        seqs = math.ceil(batch / (jspec.max_num_seqs or ps.MAX_NUM_SEQS))  # the engine's concurrent sequences
        waves = max(1, math.ceil(need / kv_room), seqs) if kv_room > 0 else 0
    bw = gspec.memory_bandwidth_gbs * 1e9 * c.bandwidth_efficiency
    wave_batch = batch / max(waves, 1)

    def allreduce(tokens: float) -> float:  # a vLLM engine's tensor-parallel all-reduces over one forward
        return first_value(ps.engine_tp_allreduce_s(tokens, a["n_layers"], a["hidden"], e["pbytes"], e["tp"] or 1,
                                                    jspec.gpus_per_node, a["intra_bw"], a["inter_bw"], c))

    t_prefill = first_value(ps.prefill_s(_forward_flops_per_token(a, prompt * c.causal_fraction_flash) / split,
                                         batch * prompt, _rate(a, wave_batch * prompt))) + max(waves, 1) * allreduce(
        wave_batch * prompt)
    overhead = allreduce(wave_batch)  # every decode step's, latency-bound
    if not vllm:
        overhead += ps.hf_decode_overhead_s(first_value(a["n_layers"]), c.kernel_launch_s) + first_value(
            a["adapted_modules"]) * c.lora_kernels_per_module * c.kernel_launch_s
    traffic = ps.VLLM_KV_CACHE_TRAFFIC if vllm else ps.HF_KV_CACHE_TRAFFIC
    ceiling = _rate(a, DECODE_CEILING_TOKENS)

    def decode(steps: int, ctx: float, fn=ps.decode_s, *first, **kw) -> float:
        return first_value(fn(*first, steps, prompt, wave_batch, e["weights"], kv_tok, traffic, bw,
                              _forward_flops_per_token(a, ctx) / split, ceiling, overhead, **kw))

    t_decode = max(waves, 1) * decode(completion, prompt + (completion + 1.0) / 2.0)
    t_tail = 0.0
    if longest is not None and longest > completion and not vllm:
        # HF generate keeps finished sequences in the batch (padding) until the longest ends
        t_tail = max(waves, 1) * decode(longest, prompt + (longest + 1.0) / 2.0) - t_decode
    elif longest is not None and longest > completion:  # vLLM: the last wave's longest, the batch draining
        t_tail = decode(longest, prompt + (completion + longest) / 2.0, ps.decode_tail_s, completion,
                        share=tail_share)
    t_sync = 0.0
    if vllm:  # over NVLink, or the network where the weights' holders (or separate engines) span nodes
        link = ps.refit_bandwidth((gspec.intra_node_gbs or 16.0) * 1e9,
                                  (gspec.inter_node_gbps or c.default_inter_node_gbps) / 8.0 * 1e9,
                                  first_value(a["tp"] * a["pp"] * shard_degree(a)), jspec.gpus_per_node,
                                  e["server"] and jspec.nodes > 1)
        t_sync = first_value(ps.weight_sync_s(e["full"], link * c.comm_efficiency))
    kv_hf = 0.0 if vllm else 2.0 * ps.kv_cache_bytes(batch, prompt + max(completion, longest or 0), kv_tok)
    return {**e, "kv_tok": kv_tok, "prefill_s": t_prefill, "decode_s": t_decode, "tail_s": t_tail, "sync_s": t_sync,
            "waves": waves, "kv_hf_bytes": kv_hf, "batch": batch,
            "engine_bytes": e["share"] * e["cap"] if vllm and not e["server"] else 0.0}


def _lengths(jspec: JobSpec, default: int) -> tuple[int, int | None]:
    """(mean, longest) completion: --completion-len, else half of --completion-len-max when only the cap is
    given (physics/stages.py mean_from_cap), else `default` (TRL's); the longest no shorter than the mean."""
    longest = jspec.completion_len_max
    completion = jspec.completion_len or (ps.mean_from_cap(longest) if longest else default)
    if longest is not None and longest < completion:
        raise InputError("completion-len-max", f"{longest} is shorter than the mean completion length "
                         f"{completion} (--completion-len, TRL's default when not given)")
    return completion, longest


def _reward_s(ra: dict, jspec: JobSpec, seq: int, completions_per_gpu: float, c) -> float:
    """The reward model's no-grad forward over every completion of a training GPU (s)."""
    return first_value(ps.scoring_forward_s(_forward_flops_per_token(ra, seq * c.causal_fraction_flash, False),
                                            completions_per_gpu * seq, _rate(ra, jspec.micro_batch * seq)))


def mini_batches(out: dict, minis: int, micro_steps: int, even: bool = True) -> None:
    """Several optimizer steps per batch of rollouts: the update's micro-steps split into `minis`
    mini-batches, each ending in an optimizer step (the optimizer's time `minis` times). `even`: TRL's
    rule, the mini-batches must split the micro-steps evenly (verl and NeMo RL split the samples)."""
    if even and micro_steps % minis:
        raise InputError("train-steps-per-rollout", f"{minis} optimizer steps must divide the step's {micro_steps} "
                         "micro-steps (micro-batch x training data-parallel GPUs per optimizer step)")
    if minis > 1 and "optimizer_s" in out:
        more = out["optimizer_s"] * (minis - 1)
        out["optimizer_s"] = out["optimizer_s"] + more
        out["step_s"] = out["step_s"] + more


def _server_memory(gen: dict, seq: int, c) -> dict[str, float]:
    """A vLLM server GPU's memory: what it reserves and what the step's rollouts need (GiB)."""
    used = gen["weights"] + ps.kv_cache_bytes(gen["batch"], seq, gen["kv_tok"])
    return {"rollout_memory_per_gpu_gib": (gen["share"] * gen["cap"]
                                           + c.cuda_context_gib * BYTES_PER_GIB) / BYTES_PER_GIB,
            "rollout_needed_gib": used / BYTES_PER_GIB}


def _reward_model(jspec: JobSpec, gspec: GPUSpec, seq: int, c):
    """(ModelSpec, arrays) of the reward model (a full-precision copy of its config), or (None, None) for a rule."""
    if not jspec.reward_model:
        return None, None
    from tuneplan.physics.terms import build_arrays

    rm = _named_model(jspec.reward_model, "reward-model")
    rjob = jspec.training_job(jspec.reward_gpus or jspec.training_gpus, method="full", quant=None, stage="sft")
    return rm, build_arrays([(rm, gspec, rjob, seq)], c)


def _critic(est, jspec: JobSpec, gspec: GPUSpec, vspec: ModelSpec, n: int, seq: int, epochs: int, c):
    """(estimator output, no-grad forward s, `epochs` updates s) of PPO's value model: the reward model's
    architecture (else the policy's), fully trained, on --critic-gpus (else the training GPUs)."""
    from tuneplan.physics.terms import build_arrays

    cg = jspec.critic_gpus or jspec.training_gpus
    vjob = jspec.training_job(cg, method="full", quant=None, grad_accum=ps.micro_steps(
        n, jspec.micro_batch * (cg // (jspec.tp * jspec.pp * jspec.cp))))
    va = build_arrays([(vspec, gspec, vjob, seq)], c)
    value = dict(est.predict_arrays(va))
    return value, forward_only(value, va), epochs * first_value(value["step_s"])


def _hidden(jspec: JobSpec, policy: float, nograd: float, ref: float, reward: float, v_fwd: float,
            v_upd: float) -> float:
    """Seconds hidden by models on GPUs of their own running beside the policy's passes (OpenRLHF's and
    NeMo-Aligner's remote calls): the scoring phase takes its busiest pool, and the critic's update on
    its own GPUs runs beside the policy's."""
    scoring = {"train": nograd}
    for pool, t in (("ref" if jspec.ref_gpus else "train", ref), ("reward" if jspec.reward_gpus else "train", reward),
                    ("critic" if jspec.critic_gpus else "train", v_fwd)):
        scoring[pool] = scoring.get(pool, 0.0) + t
    return sum(scoring.values()) - max(scoring.values()) + (min(policy, v_upd) if jspec.critic_gpus else 0.0)


def _placement(jspec: JobSpec, gen: dict, critic: bool) -> dict:
    """The step's placement as the stage figures report it."""
    vllm = gen["vllm"]
    return {"rollout_gpus": jspec.rollout_gpus, "rollout_engine": jspec.rollout_engine, "rollout_waves": gen["waves"],
            "rollout_tp": gen["tp"], "rollout_pp": jspec.rollout_pp or (1 if vllm else None),
            "rollout_placement": ("separate" if gen["server"] else "colocated") if vllm else None,
            "gpu_memory_utilization": gen["share"] or None, "rollout_engines": gen["engines"],
            "rollout_sleep": jspec.rollout_sleep, "off_policy_steps": jspec.off_policy_steps,
            "critic_gpus": jspec.critic_gpus, "ref_gpus": jspec.ref_gpus, "reward_gpus": jspec.reward_gpus,
            "value_model": ("model" if critic else "head") if jspec.stage == "ppo" else None}


def _online_job(jspec: JobSpec, group: int) -> tuple[JobSpec, int]:
    """(job, trained sequences per prompt) of an online preference stage: its per-device batch counts
    prompts (OnlineDPOConfig), each `trained` sequences through the policy's trained pass; another
    stage's job and group as they are."""
    if jspec.stage not in ps.ONLINE_SHAPES:
        return jspec, group
    if jspec.group_size not in (None, 2):
        raise InputError("group-size", f"{jspec.stage} generates 2 completions per prompt (TRL's "
                         f"OnlineDPOTrainer fixes num_generations = 2), not {jspec.group_size}")
    trained = ps.ONLINE_SHAPES[jspec.stage].trained
    return jspec.updated(micro_batch=jspec.micro_batch * trained), trained


def _calls(a: dict, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, n: int, *rest) -> dict:
    """A step's generation as its generate calls run it: one call of every trained sequence (GRPO-style),
    or an online stage's calls (XPO's reference call, Nash-MD's mixture running two models per token)."""
    per_call, passes = ps.online_generation_scale(jspec.stage)
    gen = generation(a, mspec, gspec, jspec, round(n * per_call), *rest)
    return {**gen, **{k: gen[k] * passes for k in ("prefill_s", "decode_s", "tail_s")}}


def rl_stage(est, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, prompt_len: int,
             search_max_mb: bool = True, tail_share: float = ps.DECODE_TAIL_BATCH_SHARE) -> StageRun:
    from tuneplan.physics.terms import build_arrays

    c = getattr(est, "constants", None) or DEFAULT_CONSTANTS
    d = ps.rl_defaults(jspec.stage)
    group = jspec.group_size or int(d["group_size"])
    jspec, group = _online_job(jspec, group)
    beta = d["kl_beta"] if jspec.kl_beta is None else jspec.kl_beta
    epochs = jspec.ppo_epochs or int(d["ppo_epochs"])
    completion, longest = _lengths(jspec, int(d["completion_len"]))
    prompts, n, ga = rl_batch(jspec, group)
    minis = jspec.train_steps_per_rollout or 1
    train_gpus = jspec.training_gpus
    train_job = jspec.training_job(train_gpus, grad_accum=ga)
    seq = prompt_len + completion
    a = build_arrays([(mspec, gspec, train_job, seq)], c)
    out = dict(est.predict_arrays(a))
    fwd = forward_only(out, a)  # a no-grad pass of the policy's shapes over all completions
    mini_batches(out, minis, ga, jspec.prompts_per_step is None)
    for k in POLICY_PARTS + ("step_s", "compute_s", "communication_total_s"):
        if k in out:
            out[k] = out[k] * epochs
    gen = _calls(a, mspec, gspec, jspec, n, prompt_len, completion, c, longest, tail_share)
    if gen["vllm"] and gen["waves"] == 0:
        raise InputError("rollout-engine", f"vLLM's memory share on {gspec.name} does not hold {mspec.name}'s "
                         f"weights at rollout tp {gen['tp']}: shard them with a larger --rollout-tp, a larger "
                         "--gpu-memory-utilization, a larger GPU, or --rollout-engine hf")
    rm, ra = _reward_model(jspec, gspec, seq, c)
    scored = 2 * prompts if jspec.stage in ps.ONLINE_SHAPES else n  # online stages judge a pair per prompt
    t_reward = 0.0 if rm is None else _reward_s(ra, jspec, seq, scored / first_value(ra["dp"]), c)
    ref = beta > 0
    ref_weights = ref and not jspec.is_lora_family and not jspec.ref_gpus
    # the reference on GPUs of its own: the policy's no-grad pass at the GPU-count ratio
    t_ref = fwd * train_gpus / (jspec.ref_gpus or train_gpus) if ref else 0.0
    # old log-probs of the rollout policy, before the policy moves: PPO's epochs, or several mini-batches
    old_logp = jspec.stage == "ppo" or minis > 1 or jspec.old_logprobs
    t_nograd = fwd if old_logp else 0.0
    critic = jspec.stage == "ppo" and jspec.value_model != "head"  # a head rides on the policy's own passes
    value, v_fwd, v_upd = _critic(est, jspec, gspec, rm or mspec, n, seq, epochs, c) \
        if critic else (None, 0.0, 0.0)
    policy = first_value(out["step_s"])
    hidden = _hidden(jspec, policy, t_nograd, t_ref, t_reward, v_fwd, v_upd)
    t_gen = gen["prefill_s"] + gen["decode_s"] + gen["tail_s"]
    rest = policy + t_reward + t_ref + t_nograd + v_fwd + v_upd - hidden
    overlap = -hidden + first_value(ps.async_overlap_s(t_gen, rest, jspec.off_policy_steps))
    parts = {k: v for k, v, has in (  # each part in the breakdown only where the step has it
        ("rollout_prefill_s", gen["prefill_s"], True), ("rollout_decode_s", gen["decode_s"], True),
        ("rollout_decode_tail_s", gen["tail_s"], gen["tail_s"] > 0),
        ("rollout_weight_sync_s", gen["sync_s"], gen["vllm"]), ("reward_s", t_reward, rm is not None),
        ("reference_forward_s", t_ref, ref), ("policy_nograd_s", t_nograd, old_logp),
        ("value_model_s", v_fwd + v_upd, critic), ("overlap_s", overlap, overlap < 0)) if has}
    for k, v in parts.items():
        out[k] = np.asarray(v, dtype=float) * np.ones_like(out["step_s"])
    out["step_s"] = out["step_s"] + sum(np.asarray(v) for v in parts.values())
    rm_bytes = 0.0 if rm is None else first_value(reference_bytes(ra))  # a frozen copy, sharded like the policy

    def extras(arr, o):
        tokens = arr["micro_batch"] * arr["seq_len"] / arr["cp"]
        b = {"loss_buffers_gib": ps.logp_buffer_bytes(tokens)}
        if ref_weights:
            b["reference_model_gib"] = reference_bytes(arr)
        if rm is not None and not jspec.reward_gpus:
            b["reward_model_gib"] = rm_bytes + 0.0 * tokens
        if value is not None and not jspec.critic_gpus:
            b["value_model_gib"] = sum(value[k] for k in ("weights_gib", "gradients_gib", "gradient_buckets_gib",
                                       "master_weights_gib", "optimizer_gib", "activations_gib")) * BYTES_PER_GIB
        if not gen["vllm"]:  # HF generate's cache (doubled while torch.cat grows it) instead of activations
            held = (o["activations_gib"] + o["logits_gib"]) * BYTES_PER_GIB
            b["rollout_kv_cache_gib"] = np.maximum(gen["kv_hf_bytes"] - held, 0.0)
        g = BYTES_PER_GIB
        training = o["allocated_gib"] * g + sum(b.values())
        resident = (o["weights_gib"] + o.get("master_weights_gib", 0.0) + o.get("optimizer_gib", 0.0)) * g + sum(
            v for k, v in b.items() if k in ("reference_model_gib", "reward_model_gib", "value_model_gib"))
        return b, ps.colocated_engine_bytes(training, resident, gen["engine_bytes"], jspec.rollout_sleep)

    if "allocated_gib" in out:
        b, e = extras(a, out)
        add_memory(out, b, e, c)
    max_mb = search_micro_batch(est, a, 1.0, extras) if search_max_mb and "allocated_gib" in out else 0
    res = StageRun(arrays=a, out=out, totals_job=train_job, samples_scale=float(group), samples_per_step=prompts,
                   gpu_factor=jspec.gpus / train_gpus, one_time_s=0.0, max_micro_batch=max_mb)
    res.extra["stage"] = {"stage": jspec.stage, "prompts_per_step": prompts, "completions_per_step": n,
                          "group_size": group, "completion_len": completion, "prompt_len": prompt_len,
                          "kl_beta": beta, "grad_accum": ga, "training_gpus": train_gpus,
                          "ppo_epochs": epochs if jspec.stage == "ppo" else None, "completion_len_max": longest,
                          "train_steps_per_rollout": minis, **_placement(jspec, gen, critic)}
    if value is not None and jspec.critic_gpus and "nvidia_smi_gib" in value:
        res.extra["stage"]["critic_memory_per_gpu_gib"] = first_value(value["nvidia_smi_gib"])
        if not bool(np.asarray(value["fits"]).reshape(-1)[0]):
            res.warnings.append(f"the critic needs {first_value(value['nvidia_smi_gib']):.1f} GiB per GPU on its "
                                f"{jspec.critic_gpus} GPUs: it does not fit {gspec.name}")
    if gen["server"]:
        res.extra["stage"].update(_server_memory(gen, seq, c))
    if gen["waves"] > 1:
        res.warnings.append(f"an engine holds {1 / gen['waves']:.0%} of its share of the step's {n} completions at "
                            f"once (its KV-cache room, or --max-num-seqs): generation runs in {gen['waves']} waves, "
                            "each reading the weights again (more --rollout-gpus, or a larger share)")
    res.assumptions = rl_assumptions(jspec, group, completion, beta, epochs, prompts, n, ga, gen, rm is not None)
    return res


MEAN_FLOOR = 1
"""The least mean completion length (tokens): every completion ends at its first token but the longest,
which the synchronous step still waits for, decoding alone to the cap (the decode tail on one sequence);
a cap alone says nothing shorter of the longest, and it is where RL runs truncate."""


def mean_spread(est, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, prompt_len: int, run: StageRun
                ) -> dict | None:
    """An RL estimate whose mean completion length is not given: the (low, high) ratios of its step time,
    throughput and peak memory over the range the mean can take, each figure from the same stage evaluated
    at the mean's two bounds - MEAN_FLOOR (the tail on the longest alone), and the cap (every completion at
    it; the cap is --completion-len-max, else the default length the estimate generates to full). None when
    the mean is given."""
    if jspec.completion_len is not None or jspec.stage not in RL_STAGES:
        return None
    cap = run.extra["stage"]["completion_len_max"] or run.extra["stage"]["completion_len"]

    def figures(out: dict) -> dict[str, float]:
        step, mem = first_value(out["step_s"]), first_value(out.get("memory_gib", 0.0))
        return {"step_s": step, "tokens_per_s": first_value(out["tokens_per_step"]) / step,
                **({"memory_gib": mem} if mem > 0 else {})}

    got = [figures(run.out)] + [figures(rl_stage(est, mspec, gspec, jspec.updated(
        completion_len=m, completion_len_max=cap), prompt_len, False, share).out) for m, share in (
        (MEAN_FLOOR, 0.0), (cap, ps.DECODE_TAIL_BATCH_SHARE))]
    return {"mean_low": MEAN_FLOOR, "mean_high": cap,
            **{k: (min(g[k] for g in got) / v, max(g[k] for g in got) / v) for k, v in got[0].items()}}


ONLINE_NOTES = {
    "online-dpo": "Online DPO (TRL OnlineDPOTrainer): 2 completions per prompt in one generate call, judged, then "
                  "a DPO update: the policy's trained pass and the reference's forward on both.",
    "xpo": "XPO (TRL XPOTrainer, an OnlineDPOTrainer): one completion by the policy and one by the reference (two "
           "generate calls), judged; the policy's trained pass and the reference's forward on both.",
    "nash-md": "Nash-MD (TRL NashMDTrainer, an OnlineDPOTrainer): one completion by the policy and one by the "
               "geometric mixture of policy and reference (each decode step runs both models: 3 model-passes of "
               "generation per prompt), judged; the policy's trained pass and the reference's forward on the "
               "policy's completion only.",
}
"""What an online preference stage's step runs (trl 1.16 experimental/online_dpo; trl 0.19 xpo_trainer.py,
nash_md_trainer.py)."""


def rl_assumptions(jspec: JobSpec, group: int, completion: int, beta: float, epochs: int, prompts: int, n: int,
                   ga: int, gen: dict, has_rm: bool) -> list[str]:
    st = jspec.stage.upper()
    filled = [f"{k} {v}" for k, v, given in (
        ("group size", group, jspec.group_size),
        ("completion length", completion, jspec.completion_len or jspec.completion_len_max),
        ("KL beta", beta, jspec.kl_beta), ("PPO epochs", epochs, jspec.ppo_epochs if jspec.stage == "ppo" else 1))
        if given is None]
    longest = jspec.completion_len_max
    lengths = (f"{completion} new tokens each on average, the longest {longest}" if longest and longest > completion
               else f"up to {completion} new tokens each, all generated to full length")
    overlap = ("generation of the next step overlaps this step's training (--off-policy-steps "
               f"{jspec.off_policy_steps}): the step is the larger of the two plus the refit (the overlap part)"
               if jspec.off_policy_steps else "sequential, no overlap between generation and training (a "
               "synchronous loop: TRL, verl and NeMo RL by default)")
    online = [ONLINE_NOTES[jspec.stage] + f" Micro-batches count prompts ({jspec.micro_batch // group} per GPU, "
              f"{jspec.micro_batch} sequences); without --reward-model the judge (TRL's PairRM or an API judge) "
              "is not costed."] if jspec.stage in ONLINE_NOTES else []
    out = [f"{st}: a step = generate {n} completions ({prompts} prompts x group {group}, prompt length = "
           f"--seq-len, {lengths}) + score them + "
           f"update the policy on prompt + completion ({ga} micro-steps of {jspec.micro_batch}, the last one "
           f"partly filled where they do not divide); {overlap}."]
    out += online
    if filled:
        out.append("TRL defaults filled in: " + ", ".join(filled) + ".")
    if gen["vllm"]:
        given = "" if jspec.rollout_tp else (f" (not given: the smallest power of two leaving "
                                             f"{1 - ps.ENGINE_WEIGHT_SHARE_MAX:.0%} of the share to the KV cache)")
        layout = (f"{gen['engines']} engine(s) of tensor parallel {gen['tp']}{given} x pipeline "
                  f"{jspec.rollout_pp or 1}, each reserving {gen['share']:.0%} of a GPU's memory")
        where = (f"{jspec.rollout_gpus} GPU(s) of --gpus of their own (placement separate; share: vLLM's default "
                 f"{ps.VLLM_SERVER_MEMORY_SHARE:g})" if gen["server"] else
                 "the training GPUs (placement colocated; share: " + (
                     f"verl's {ps.VLLM_SLEEP_MEMORY_SHARE:g} as the engine sleeps" if jspec.rollout_sleep else
                     f"TRL's vllm_gpu_memory_utilization {ps.VLLM_COLOCATE_MEMORY_SHARE:g}") + ")")
        if jspec.gpu_memory_utilization:
            where = where.split(" (")[0] + f" (share {jspec.gpu_memory_utilization:g}, --gpu-memory-utilization)"
        out.append(f"Rollouts on vLLM, {layout}, on {where}: prefill from FLOPs and decode from memory bandwidth, "
                   f"both split over an engine's GPUs (weights once per decode step, the KV cache "
                   f"{ps.VLLM_KV_CACHE_TRAFFIC:g}x per token), CUDA graphs (no launch overhead); an engine of "
                   f"tensor parallel > 1 waits for {ps.ENGINE_TP_ALLREDUCES_PER_LAYER:g} all-reduces per layer in "
                   "every forward (each decode step's latency-bound). Refit after every "
                   "step: the full merged weights gathered from the GPUs holding the training copy (tp x pp x "
                   "FSDP/ZeRO-3 shards) over NVLink, or over the network where those GPUs or the engines span "
                   "nodes.")
    else:
        out.append(f"Rollouts by HF generate in the training process: prefill from FLOPs, decode from memory "
                   f"bandwidth with the KV cache read {ps.HF_KV_CACHE_TRAFFIC:g}x per token (DynamicCache grows by "
                   f"torch.cat) and {ps.HF_DECODE_KERNELS_PER_LAYER:g} kernel launches per layer per token (plus the "
                   "adapters' own); the cache (x2 while it grows) replaces the activations in the peak.")
    pools = [f"{k} on {v} GPUs of its own" for k, v in (("the critic", jspec.critic_gpus), ("the reference",
             jspec.ref_gpus), ("the reward model", jspec.reward_gpus)) if v]
    if pools:
        out.append("Models on GPUs of their own (" + ", ".join(pools) + ") run beside the policy's passes (OpenRLHF, "
                   "NeMo-Aligner): the scoring phase and the update each take their busiest pool, the rest is the "
                   "overlap part; their memory is not on the training GPUs (the critic's is in the stage figures); "
                   "a pass on another pool's GPU count scales the policy's by the GPU ratio.")
    out.append("Reward from a reward model's forward over prompt + completion." if has_rm else
               "Reward from a rule (no --reward-model): its CPU time is not counted.")
    if beta > 0:
        out.append(f"KL term (beta {beta:g}): a reference forward over all completions"
                   + (", the LoRA adapter disabled (no second copy)." if jspec.is_lora_family else
                      ", a frozen copy of the weights."))
    else:
        out.append("beta = 0: no reference model and no reference forward (TRL GRPO's default).")
    if jspec.stage == "ppo" and jspec.value_model == "head":
        out.append(f"PPO with a value head on the policy (TRL < 0.11 AutoModelForCausalLMWithValueHead): old "
                   f"log-probs and values from one no-grad forward, then {epochs} epochs of updates; no critic model.")
    elif jspec.stage == "ppo":
        out.append(f"PPO: old log-probs and values by no-grad forwards, then {epochs} epochs of policy and value "
                   "updates; the value model is the reward model's architecture (the policy's without one), "
                   "fully trained, its logits not counted.")
    if jspec.completion_len is None and jspec.completion_len_max:
        out.append(f"Mean completion length not given (--completion-len): {completion}, half the cap "
                   f"{jspec.completion_len_max} (lengths taken uniform up to the cap, as the decode tail below "
                   "assumes); the log-prob and update passes cost the mean (as packed batches: verl, NeMo RL, AReaL), "
                   "decode runs to the cap.")
    if jspec.completion_len_max is not None and jspec.completion_len_max > completion:
        out.append(f"Synchronous step: generation waits for the longest completion ({jspec.completion_len_max} "
                   f"tokens): decode to the mean ({completion}) at the batch's rate, then the tail to the longest "
                   + ("with finished sequences kept in the batch (HF generate pads them)." if not gen["vllm"] else
                      f"on the draining batch ({ps.DECODE_TAIL_BATCH_SHARE:g} of it on average: half the batch "
                      "longer than the mean, falling linearly to none at the longest; weights read every step)."))
    if jspec.rollout_sleep:
        out.append("The colocated engine sleeps while training (its KV cache and weights freed): the peak is the "
                   "larger of the training phase and the generation phase (the engine's share plus the training "
                   "weights, master copy and optimizer state that stay resident).")
    minis = jspec.train_steps_per_rollout or 1
    if minis > 1:
        out.append(f"{minis} optimizer steps per batch of rollouts (mini-batches): the optimizer step {minis} "
                   "times, and an old-policy log-prob forward over all completions before the first.")
    elif jspec.old_logprobs:
        out.append("An old-policy log-prob forward over all completions every step (--old-logprobs: verl, NeMo RL "
                   "and OpenRLHF recompute them after generation).")
    if not jspec.grad_ckpt:
        out.append("Gradient checkpointing off (tuneplan's default); TRL's configs default to "
                   "gradient_checkpointing=True: pass --grad-ckpt to match them.")
    out.append("Device-hours, cost and energy count every GPU of --gpus, rollout GPUs at the training GPUs' power.")
    return out


def gkd_stage(est, mspec: ModelSpec, gspec: GPUSpec, jspec: JobSpec, prompt_len: int,
              search_max_mb: bool = True) -> StageRun:
    """GKD (trl 1.16 experimental/gkd/gkd_trainer.py): each micro-step, with probability lmbda the student
    generates its micro-batch's completions (training_step), then the teacher's no-grad forward over the
    batch and the student's SFT step with the generalised JSD over both logits (compute_loss)."""
    from tuneplan.physics.terms import build_arrays

    c = getattr(est, "constants", None) or DEFAULT_CONSTANTS
    completion = jspec.completion_len or ps.GKD_COMPLETION_LEN
    seq = prompt_len + completion
    a = build_arrays([(mspec, gspec, jspec, seq)], c)
    out = dict(est.predict_arrays(a))
    teacher = _named_model(jspec.teacher_model, "teacher-model") if jspec.teacher_model else mspec
    ta = build_arrays([(teacher, gspec, jspec.training_job(jspec.gpus, method="full", quant=None, stage="sft"),
                        seq)], c)
    t_teacher = forward_only(dict(est.predict_arrays(ta)), ta)
    gen = generation(a, mspec, gspec, jspec, jspec.micro_batch * first_value(a["dp"]), prompt_len, completion, c)
    if gen["vllm"] and gen["waves"] == 0:
        raise InputError("rollout-engine", f"vLLM's memory share on {gspec.name} does not hold {mspec.name}'s "
                         "weights: a larger --gpu-memory-utilization, a larger GPU, or --rollout-engine hf")
    calls = ps.expected_generation_s(jspec.grad_accum, ps.GKD_LMBDA)  # generate calls per step, expected
    parts = {"rollout_prefill_s": gen["prefill_s"] * calls, "rollout_decode_s": gen["decode_s"] * calls,
             "reference_forward_s": t_teacher}
    if gen["vllm"]:
        parts["rollout_weight_sync_s"] = gen["sync_s"]
    for k, v in parts.items():
        out[k] = np.asarray(v, dtype=float) * np.ones_like(out["step_s"])
        out["step_s"] = out["step_s"] + out[k]
    t_bytes = first_value(reference_bytes(ta))

    def extras(arr, o):
        tokens = arr["micro_batch"] * arr["seq_len"] / arr["cp"]
        b = {"reference_model_gib": t_bytes + 0.0 * tokens,  # the teacher: a frozen model, shown as the reference
             "loss_buffers_gib": tokens * arr["vocab"] * ps.JSD_BYTES_PER_ELEMENT / arr["tp"]}
        g = BYTES_PER_GIB
        resident = (o["weights_gib"] + o.get("master_weights_gib", 0.0) + o.get("optimizer_gib", 0.0)) * g + t_bytes
        return b, ps.colocated_engine_bytes(o["allocated_gib"] * g + sum(b.values()), resident, gen["engine_bytes"],
                                            jspec.rollout_sleep)

    if "allocated_gib" in out:
        b, e = extras(a, out)
        add_memory(out, b, e, c)
    max_mb = search_micro_batch(est, a, 1.0, extras) if search_max_mb and "allocated_gib" in out else 0
    res = StageRun(arrays=a, out=out, totals_job=jspec, samples_scale=1.0, samples_per_step=jspec.global_batch,
                   gpu_factor=1.0, one_time_s=0.0, max_micro_batch=max_mb)
    res.extra["stage"] = {"stage": "gkd", "completion_len": completion, "prompt_len": prompt_len,
                          "teacher_model": teacher.name, "lmbda": ps.GKD_LMBDA, "rollout_engine": jspec.rollout_engine}
    engine = "vLLM colocated (its memory share added to the peak as for RL)" if gen["vllm"] else "HF generate"
    res.assumptions = [
        f"GKD (TRL GKDTrainer): on a share lmbda = {ps.GKD_LMBDA:g} of micro-steps (GKDConfig.lmbda, not an option "
        f"here) the student generates {completion} tokens per sample (--completion-len, else GKDConfig.max_new_tokens "
        f"{ps.GKD_COMPLETION_LEN}) by {engine}, costed as RL rollouts at the micro-batch; --seq-len is the prompt.",
        f"The teacher ({teacher.name}{'' if jspec.teacher_model else ', the student architecture: no --teacher-model'}"
        ") runs a no-grad forward over every sequence (the reference part), its frozen weights at the compute "
        "precision sharded like the student.",
        f"Generalised JSD (beta 0.5): {ps.JSD_BYTES_PER_ELEMENT:g} bytes per token x vocabulary beside the student's "
        "logits (the teacher's logits, both log-softmaxes, the mixture and the two KL terms); the generation "
        "phase's KV cache is taken below the training peak."]
    return res
