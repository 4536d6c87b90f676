#!/bin/bash
# Qwen3-30B-A3B, Megatron TP4/PP2/EP4, already carries a profiler block; output piped to tee
HF_MODEL_PATH=/models/Qwen3-30B-A3B
offload=False
PROFILE_DIR=${PROFILE_DIR:-/data/prof}

PROFILER=(
    global_profiler.tool=npu
    global_profiler.steps=[2]
    global_profiler.save_path=${PROFILE_DIR}
    actor_rollout_ref.actor.profiler.enable=True
    actor_rollout_ref.actor.profiler.tool_config.npu.level=level0
    actor_rollout_ref.rollout.profiler.enable=True
)

python3 -m verl.trainer.main_ppo --config-path=config \
    --config-name='ppo_megatron_trainer.yaml'\
    data.train_batch_size=64 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    actor_rollout_ref.model.path=$HF_MODEL_PATH \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4 \
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=4 \
    actor_rollout_ref.actor.megatron.param_offload=${offload} \
    +actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=8 \
    +actor_rollout_ref.rollout.enable_expert_parallel=True \
    actor_rollout_ref.rollout.n=8 \
    trainer.device=npu \
    trainer.total_training_steps=3 \
    "${PROFILER[@]}" 2>&1 | tee "logs/qwen3_moe_$(date +%Y%m%d_%H%M).log"
