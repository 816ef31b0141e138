#!/bin/bash
# OpenRLHF 0.11 PPO launch (actor, critic, reference, reward model and vLLM engines on GPUs of their own),
# written for tuneplan's tests; tuneplan reads the arguments and never runs the script
ray job submit --address="http://127.0.0.1:8265" -- python3 -m openrlhf.cli.train_ppo_ray \
   --ref.num_nodes 1 --ref.num_gpus_per_node 8 \
   --reward.num_nodes 1 --reward.num_gpus_per_node 8 \
   --critic.num_nodes 2 --critic.num_gpus_per_node 8 \
   --actor.num_nodes 4 --actor.num_gpus_per_node 8 \
   --vllm.num_engines 4 --vllm.tensor_parallel_size 4 \
   --actor.model_name_or_path meta-llama/Llama-3.1-70B-Instruct \
   --reward.model_name_or_path meta-llama/Llama-3.1-8B \
   --critic.model_name_or_path meta-llama/Llama-3.1-8B \
   --rollout.batch_size 1024 --rollout.n_samples_per_prompt 1 \
   --train.batch_size 128 --train.micro_batch_size 1 \
   --rollout.max_new_tokens 1024 --data.max_len 1024 \
   --algo.kl.init_coef 0.01 --ds.zero_stage 3 --bf16 \
   --actor.gradient_checkpointing_enable --algo.advantage.estimator gae
