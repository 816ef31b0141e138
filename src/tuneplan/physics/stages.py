"""Preference (DPO, ORPO, KTO, SimPO, CPO) and RL (GRPO, PPO, RLOO) stages, term by term.

Each term is a small named function of plain numbers (or numpy arrays, which broadcast) that can be
checked by hand; `tuneplan.estimators.stages` composes them with the SFT step of the policy. Defaults
are TRL's (trl 1.16 config dataclasses) unless said otherwise; docs/stages.md states every assumption.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuneplan.physics.parallel import hierarchical_allreduce_parts

# ---- TRL defaults (trl 1.16.0: trl/trainer/*_config.py) ------------------------------------------
GRPO_GROUP_SIZE = 8
"""Completions per prompt, GRPO (count): trl GRPOConfig.num_generations default."""
RLOO_GROUP_SIZE = 2
"""Completions per prompt, RLOO (count): trl RLOOConfig.num_generations default."""
PPO_GROUP_SIZE = 1
"""Completions per prompt, PPO (count): one response per query (trl <= 0.2x PPOTrainer, OpenRLHF)."""
COMPLETION_LEN = 512
"""Generated tokens per completion (tokens): trl GRPOConfig / RLOOConfig.max_completion_length default."""
GRPO_KL_BETA = 0.0
"""KL coefficient, GRPO (dimensionless): trl GRPOConfig.beta default (0: no reference model is loaded)."""
RLOO_KL_BETA = 0.05
"""KL coefficient, RLOO (dimensionless): trl RLOOConfig.beta default."""
PPO_KL_BETA = 0.05
"""KL coefficient, PPO (dimensionless): trl 0.11-0.2x PPOConfig.kl_coef default (PPOTrainer left trl 1.x)."""
PPO_EPOCHS = 4
"""Optimisation passes over each batch of rollouts, PPO (count): trl 0.11-0.2x PPOConfig.num_ppo_epochs."""
ONLINE_COMPLETION_LEN = 64
"""Generated tokens per completion, online DPO / XPO / Nash-MD (tokens): trl 1.16
experimental/online_dpo/online_dpo_config.py OnlineDPOConfig.max_new_tokens default (XPOConfig and
NashMDConfig subclass it, trl 0.19 trainer/xpo_config.py, nash_md_config.py)."""
ONLINE_KL_BETA = 0.1
"""KL coefficient, online DPO / XPO / Nash-MD (dimensionless): OnlineDPOConfig.beta default [0.1]."""
VLLM_COLOCATE_MEMORY_SHARE = 0.3
"""Share of each training GPU's memory vLLM reserves when colocated (fraction): trl GRPOConfig
.vllm_gpu_memory_utilization default (vllm_mode 'colocate', the default mode)."""
VLLM_SERVER_MEMORY_SHARE = 0.9
"""Share of a rollout GPU's memory a vLLM server reserves (fraction): `trl vllm-serve`'s
gpu_memory_utilization default (= vLLM's own default)."""
VLLM_SLEEP_MEMORY_SHARE = 0.5
"""Share of each GPU's memory a colocated engine that sleeps while training reserves (fraction): verl
0.9.1 trainer/config/rollout/rollout.yaml `gpu_memory_utilization: 0.5` (with `free_cache_engine: True`)."""
MAX_NUM_SEQS = 256
"""Sequences one engine decodes at once (count): verl 0.9.1 trainer/config/rollout/rollout.yaml
`max_num_seqs: 256` (= vLLM V0's EngineArgs default; V1 raises it on large GPUs): a larger batch per
engine decodes in waves, each reading the weights again."""
ENGINE_WEIGHT_SHARE_MAX = 0.5
"""Most of an engine's memory share its weights may take when tuneplan picks the engine's tensor
parallel size (fraction): the smallest power of two leaving at least half the share to the KV cache."""

# ---- physics constants -------------------------------------------------------------------------
FORWARD_SHARE = 1.0 / 3.0
"""Share of a training step's element-wise work and per-layer launch overhead that belongs to the
forward pass (fraction): the backward runs two passes of the same shapes (input and weight grads)."""
HF_DECODE_KERNELS_PER_LAYER = 16.0
"""Kernels one decoder layer launches per generated token in eager HF generate (count): 2 norms, q/k/v/o
projections (4), rotary (2), cache update (2), attention (1), gate/up/down (3), activation and multiply
(1), residual adds (1); counted from transformers' Llama decoder layer."""
HF_KV_CACHE_TRAFFIC = 3.0
"""Passes over the KV cache per generated token in HF generate (count): attention reads it once and
transformers' DynamicCache grows it with torch.cat (read and write the whole cache) every step."""
VLLM_KV_CACHE_TRAFFIC = 1.0
"""Passes over the KV cache per generated token in vLLM (count): paged attention reads it once, new
entries are written in place."""
REFERENCE_LOGITS_BYTES_PER_ELEMENT = 6.0
"""Bytes per (token, vocabulary) element the reference forward holds next to the policy's activations
(bytes): 16-bit logits + their fp32 log-softmax (TRL < 1.0 concatenated_forward, LLaMA-Factory). TRL >=
1.0's fused LM head scores in tiles and materialises none: then an upper bound."""
LOGP_BUFFER_BYTES_PER_TOKEN = 16.0
"""Per-token buffers of the preference and RL losses (bytes per token): fp32 per-token log-probs of the
policy and of the reference, the completion mask and the gathered labels (4 x 4 bytes)."""


@dataclass(frozen=True)
class StageShape:
    """Sequences one sample costs in each pass of a preference stage."""

    trained: float  # sequences through the policy's forward and backward
    policy_nograd: float  # extra no-grad forwards of the policy (KTO's KL completions)
    reference: float  # sequences through the reference model's forward (0: no reference)


PREFERENCE_SHAPES = {
    "sft": StageShape(1.0, 0.0, 0.0),
    # chosen + rejected concatenated into one batch; reference on both (trl DPOTrainer._compute_loss)
    "dpo": StageShape(2.0, 0.0, 2.0),
    # odds ratio on the policy only, NLL on chosen: no reference (trl.experimental.orpo)
    "orpo": StageShape(2.0, 0.0, 0.0),
    # unpaired: one completion per sample; the KL completion (mismatched pair) through the policy with no
    # grad and, with the completion, through the reference (trl KTOTrainer, calculate_kl=True default)
    "kto": StageShape(1.0, 1.0, 2.0),
    # reference-free length-normalised margin (trl CPOTrainer loss_type='simpo')
    "simpo": StageShape(2.0, 0.0, 0.0),
    # sigmoid preference loss + NLL on chosen, reference-free (trl CPOTrainer)
    "cpo": StageShape(2.0, 0.0, 0.0),
    # chosen + rejected in one batch through a sequence classifier (num_labels 1), Bradley-Terry loss on
    # the two scores, no reference (trl/trainer/reward_trainer.py RewardTrainer.compute_loss)
    "rm": StageShape(2.0, 0.0, 0.0),
}


def stage_shape(stage: str) -> StageShape:
    """Sequences per sample in the policy's trained pass, its no-grad pass and the reference pass."""
    return PREFERENCE_SHAPES[stage]


def reference_weights_needed(has_reference_pass: bool, lora_family: bool, precompute_ref: bool) -> bool:
    """A second copy of the frozen weights is held when the stage has a reference pass computed during
    training with a fully trained (or freeze-tuned) policy. Under LoRA the adapter is disabled for the
    reference pass (the frozen base is the reference); precomputed log-probs need no model."""
    return has_reference_pass and not lora_family and not precompute_ref


def reference_weight_bytes(params_total, bytes_per_weight, model_split, shard_degree):
    """Bytes of the frozen reference copy per GPU: parameters x bytes, divided by tensor x pipeline
    parallel and by the ZeRO-3/FSDP shard degree (TRL prepares the reference like the policy)."""
    return params_total * bytes_per_weight / model_split / shard_degree


def forward_only_s(forward_s, elementwise_s, overhead_s, dequant_s, grad_ckpt):
    """A no-grad forward of the same shapes as a training step (s): the step's forward matmuls, the
    forward's share of the element-wise work and launch overhead, and one of the dequantisation passes
    (2 per step, 3 with gradient checkpointing)."""
    passes = 2.0 + np.asarray(grad_ckpt, dtype=float)
    return forward_s + FORWARD_SHARE * (elementwise_s + overhead_s) + dequant_s / passes


def reference_logits_bytes(tokens, vocab, tp):
    """Bytes of the reference's logits and log-softmax, held beside the policy's activations (the
    reference pass runs after the policy's forward): tokens x vocabulary x 6 bytes / tensor parallel."""
    return tokens * vocab * REFERENCE_LOGITS_BYTES_PER_ELEMENT / tp


def logp_buffer_bytes(tokens):
    """Bytes of the losses' per-token buffers (log-probs of policy and reference, mask, labels)."""
    return tokens * LOGP_BUFFER_BYTES_PER_TOKEN


# ---- RL: generation, scoring, update ------------------------------------------------------------
def completions_per_step(prompts_per_step, group_size):
    """Completions generated, scored and trained on per optimizer step (count)."""
    return prompts_per_step * group_size


def kv_cache_bytes(batch, context, kv_per_token):
    """KV cache of a generation batch at its longest context (bytes)."""
    return batch * context * kv_per_token


def prefill_s(flops_per_token, tokens, rate):
    """Prompt prefill (s): compute-bound, forward FLOPs per token x prompt tokens / achieved FLOP/s."""
    return flops_per_token * tokens / rate


def decode_step_bytes(weight_bytes, batch, kv_per_token, context, kv_traffic):
    """Bytes one decode step moves: every weight once (shared by the batch) and each sequence's KV
    cache `kv_traffic` times at its current context."""
    return weight_bytes + batch * kv_per_token * context * kv_traffic


def decode_s(completion_len, prompt_len, batch, weight_bytes, kv_per_token, kv_traffic, bandwidth,
             flops_per_token, rate, per_token_overhead_s):
    """Decode of `completion_len` tokens for `batch` sequences (s). Each step is the slower of its bytes
    over memory bandwidth and its FLOPs (batch x forward FLOPs per token) over the achieved rate, plus a
    fixed per-step overhead; the KV cache is taken at the mean context, prompt + (completion + 1) / 2
    (exact for the memory term, which grows linearly with the context)."""
    mean_context = prompt_len + (completion_len + 1.0) / 2.0
    t_mem = decode_step_bytes(weight_bytes, batch, kv_per_token, mean_context, kv_traffic) / bandwidth
    t_flops = batch * flops_per_token / rate
    return completion_len * (np.maximum(t_mem, t_flops) + per_token_overhead_s)


DECODE_TAIL_BATCH_SHARE = 0.25
"""Mean share of an engine batch still decoding past the mean completion length (fraction): the tail's
model takes half the batch longer than the mean and that half draining linearly to none at the cap, so
the tail decodes on average a quarter of the batch."""


def decode_tail_s(mean_len, max_len, prompt_len, batch, weight_bytes, kv_per_token, kv_traffic, bandwidth,
                  flops_per_token, rate, per_token_overhead_s, share=DECODE_TAIL_BATCH_SHARE):
    """Decode from the mean completion length to the longest (s): a synchronous step waits for its
    longest completion, and decode is memory-bound, so each of the (max - mean) steps still reads every
    weight while the batch drains; the tail's batch is `share` x batch (at least one sequence; share 0:
    the longest alone) at its mean context prompt + (mean + max) / 2. Zero when max <= mean."""
    steps = np.maximum(np.asarray(max_len, dtype=float) - mean_len, 0.0)
    tail_batch = np.maximum(batch * share, 1.0)
    context = prompt_len + (mean_len + max_len) / 2.0
    t_mem = decode_step_bytes(weight_bytes, tail_batch, kv_per_token, context, kv_traffic) / bandwidth
    t_flops = tail_batch * flops_per_token / rate
    return steps * (np.maximum(t_mem, t_flops) + per_token_overhead_s)


def mean_from_cap(max_len: int) -> int:
    """Mean completion length when only the cap is known (tokens): the lengths `decode_tail_s` assumes
    above the mean (the share still decoding falls linearly to none at the cap) taken down to zero,
    i.e. uniform on [0, cap]: half the cap. Decode still runs to the cap (the tail); the passes over
    the completions (log-probs, update) cost the mean, as packed batches (verl use_dynamic_bsz, NeMo RL
    and AReaL sequence packing) hold only the generated tokens."""
    return max(1, int(max_len) // 2)


def colocated_engine_bytes(training_peak, resident, engine_pool, sleeps):
    """What a colocated inference engine adds to the training step's peak (bytes). Awake all along
    (TRL's default colocate) its pool sits on top of the training peak; sleeping while training (verl,
    NeMo RL, TRL vllm_enable_sleep_mode) the step's peak is the larger phase - training, or generation:
    the training state that stays resident (weights, master copy, optimizer) plus the engine's pool - so
    the engine adds only what the generation phase exceeds the training phase by."""
    if not sleeps:
        return engine_pool
    return np.maximum(resident + engine_pool - training_peak, 0.0)


def hf_decode_overhead_s(n_layers, kernel_launch_s):
    """Per-token launch overhead of eager HF generate (s): kernels per layer x layers x launch time.
    vLLM replays CUDA graphs: none."""
    return HF_DECODE_KERNELS_PER_LAYER * n_layers * kernel_launch_s


ENGINE_TP_ALLREDUCES_PER_LAYER = 2.0
"""All-reduces one decoder layer's forward runs in a tensor-parallel inference engine (count): after the
attention's output projection and after the MLP's down projection (or the MoE's combine), both
row-parallel with their results reduced (vllm model_executor/models/llama.py: LlamaAttention.o_proj,
LlamaMLP.down_proj, RowParallelLinear reduce_results=True; Shoeybi et al., 'Megatron-LM', 2019, Sec. 3)."""


CUSTOM_ALLREDUCE_LATENCY_STEPS = 2.0
"""Latencies of one all-reduce inside a node in vLLM (count): its custom all-reduce has every rank read
its peers' buffers over NVLink between two barriers, whatever the tp (vllm/distributed/
device_communicators/custom_all_reduce.py, csrc/custom_all_reduce.cuh one-shot / two-shot); an engine
spanning nodes falls back to NCCL's ring."""


def engine_tp_allreduce_s(tokens, n_layers, hidden, bytes_per_element, tp, gpus_per_node, intra_bw, inter_bw, c):
    """Tensor-parallel all-reduces of one engine forward over `tokens` tokens (s): 2 per layer of the
    tokens' hidden states over the engine's tp GPUs. Inside a node: the ring's bytes (2 (tp - 1)/tp of
    them) over NVLink and vLLM's custom all-reduce's 2 latencies; across nodes NCCL's ring, hierarchical
    (parallel.hierarchical_allreduce_parts), each ring step paying its latency. A decode step moves a
    few kB per all-reduce, so the latencies rule it. None at tp 1."""
    b_in, _, t_in, t_out = hierarchical_allreduce_parts(tokens * hidden * bytes_per_element, tp, gpus_per_node,
                                                        intra_bw, inter_bw, c)
    if tp <= gpus_per_node:
        t_in = (b_in / (intra_bw * c.comm_efficiency) + CUSTOM_ALLREDUCE_LATENCY_STEPS * c.comm_latency_s) * (tp > 1)
    return ENGINE_TP_ALLREDUCES_PER_LAYER * n_layers * (t_in + t_out)


def weight_sync_s(weight_bytes, bandwidth):
    """Refit: the policy's weights moved from the trainer to the inference engine after each step (s),
    bytes over the link. Colocated (verl's sharding manager, NeMo RL's CUDA-IPC refit) each GPU gathers
    the full weights from the trainer's shards over NVLink and hands its engine shard over in place;
    on separate engine GPUs (verl fully-async / one-step-off, NeMo RL non-colocated, OpenRLHF
    `vllm.sync_backend nccl`) the trainer broadcasts them over NVLink within a node, else the network."""
    return weight_bytes / bandwidth


def refit_bandwidth(intra, inter, holders: float, gpus_per_node: int, server_across_nodes: bool):
    """The link a refit's bytes cross (bytes/s). Every engine GPU receives the full weights from the GPUs
    that together hold one training copy (`holders`: tensor x pipeline parallel x the FSDP / ZeRO-3 shard
    degree): verl 0.6.0 workers/fsdp_workers.py rollout_mode all-gathers each FSDP tensor over the shard
    group (DTensor.full_tensor()), utils/megatron_utils.py per_tensor_generator broadcasts each tensor over
    the pipeline group and all-gathers it over expert and tensor parallel. Those groups spanning nodes (or
    engines on nodes of their own) put the bytes on each GPU's network share, else on NVLink."""
    return inter if server_across_nodes or holders > gpus_per_node else intra


def engine_tp(weight_bytes, pool_gpus: int, pp: int, room_bytes: float) -> int:
    """The smallest power-of-two tensor parallel size dividing the generation GPUs (over `pp` pipeline
    stages) whose weight shard takes at most ENGINE_WEIGHT_SHARE_MAX of the engine's memory `room_bytes`;
    the largest dividing size when none does."""
    t = 1
    while pool_gpus % (2 * t * pp) == 0 and weight_bytes / (t * pp) > ENGINE_WEIGHT_SHARE_MAX * room_bytes:
        t *= 2
    return t


def micro_steps(completions, per_micro_step):
    """Micro-steps of the update (count): completions over micro-batch x data-parallel GPUs, the last
    one partly filled where they do not divide (verl and NeMo RL split a batch unevenly or pad it)."""
    return int(np.ceil(completions / per_micro_step))


def async_overlap_s(generation_s, training_s, off_policy_steps: int):
    """What overlapping generation with training hides (s, <= 0): with k >= 1 off-policy steps the
    engines generate step n+1 while the trainer trains on step n, so the step is the larger of the two,
    not their sum; 0 for a synchronous step (k = 0)."""
    return -np.minimum(generation_s, training_s) if off_policy_steps >= 1 else 0.0 * generation_s


def scoring_forward_s(flops_per_token, tokens, rate):
    """A reward (or value) model's no-grad forward over the completions (s): FLOPs over the rate."""
    return flops_per_token * tokens / rate


GKD_LMBDA = 0.5
"""Share of micro-steps on which the student generates its own completions, GKD (fraction): trl 1.16
experimental/gkd/gkd_config.py GKDConfig.lmbda default (GKDTrainer.training_step: random() <= lmbda)."""
GKD_COMPLETION_LEN = 128
"""Tokens the student generates per completion, GKD (tokens): GKDConfig.max_new_tokens default."""
JSD_BYTES_PER_ELEMENT = 30.0
"""Bytes per (token, vocabulary) element the generalised JSD holds beside the student's own logits (bytes):
the teacher's 16-bit logits (2), the log-softmax of student and teacher (fp32 under autocast: 8), their stack and the
mixture's logsumexp (8 + 4) and the two kl_div terms (8), counted from trl 1.16 GKDTrainer
.generalized_jsd_loss at 0 < beta < 1 (default 0.5)."""


def expected_generation_s(generation_s, lmbda):
    """The student's generation per micro-step in expectation (s): it runs on a share `lmbda` of them."""
    return generation_s * lmbda


@dataclass(frozen=True)
class OnlineShape:
    """An online preference stage per prompt: the sequences through the policy's trained pass (and the
    reference's no-grad pass), the completions one generation call makes, and the models each decode
    step runs summed over the step's generation calls (a model-pass each reads its weights)."""

    trained: int
    call_batch: int
    model_passes: int


ONLINE_SHAPES = {
    # 2 completions per prompt in one generate call (prompt_ids.repeat(2, 1)); policy and reference on both
    # (trl 1.16 experimental/online_dpo/online_dpo_trainer.py _generate, training_step)
    "online-dpo": OnlineShape(2, 2, 1),
    # one completion by the policy, one by the reference (two generate calls); the policy's trained pass
    # and the reference's on both (trl 0.19 trainer/xpo_trainer.py _generate_completions, _compute_logprobs)
    "xpo": OnlineShape(2, 1, 2),
    # one completion by the policy, one by the geometric mixture of policy and reference (each decode step
    # runs both models: 1 + 2 passes); trained and reference passes on the policy's completion only
    # (trl 0.19 trainer/nash_md_trainer.py GeometricMixtureWrapper, _compute_logprobs)
    "nash-md": OnlineShape(1, 1, 3),
}


def online_generation_scale(stage: str) -> tuple[float, float]:
    """(generation batch per trained sequence, model-passes per generation call) of a stage: a GRPO-style
    stage generates every trained sequence in one call (1, 1); an online preference stage's calls follow
    its OnlineShape."""
    s = ONLINE_SHAPES.get(stage)
    return (1.0, 1.0) if s is None else (s.call_batch / s.trained, float(s.model_passes))


def rl_defaults(stage: str) -> dict[str, float]:
    """TRL's defaults for an RL stage: group size (an online preference stage: trained sequences per
    prompt), completion length, KL coefficient, PPO epochs."""
    if stage in ONLINE_SHAPES:
        return {"group_size": ONLINE_SHAPES[stage].trained, "completion_len": ONLINE_COMPLETION_LEN,
                "kl_beta": ONLINE_KL_BETA, "ppo_epochs": 1}
    group = {"grpo": GRPO_GROUP_SIZE, "rloo": RLOO_GROUP_SIZE, "ppo": PPO_GROUP_SIZE}[stage]
    beta = {"grpo": GRPO_KL_BETA, "rloo": RLOO_KL_BETA, "ppo": PPO_KL_BETA}[stage]
    return {"group_size": group, "completion_len": COMPLETION_LEN, "kl_beta": beta,
            "ppo_epochs": PPO_EPOCHS if stage == "ppo" else 1}
