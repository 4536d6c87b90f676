#!/usr/bin/env bash
# FSDP + vLLM with the bash constructs real launch scripts use: case patterns, C-style for,
# here-strings, comments inside arrays, a quoted element spanning lines, conditional +=.
export HYDRA_FULL_ERROR=1
export ASCEND_RT_VISIBLE_DEVICES=${ASCEND_RT_VISIBLE_DEVICES:-0,1,2,3}
DEVICE_COUNT=$(awk -F',' '{print NF}' <<< "${ASCEND_RT_VISIBLE_DEVICES}")
NGPUS=${NGPUS:-4}
ROLLOUT_BACKEND=${ROLLOUT_BACKEND:-vllm}
COLOCATE=${COLOCATE:-True}

case "${COLOCATE}" in
    True|true|1)
        WORLD=${WORLD:-${NGPUS}}
        ;;
    *)
        WORLD=8
        ;;
esac

RANKS="["
for ((r = 0; r < NGPUS; r++)); do
    if [ "$r" -gt 0 ]; then RANKS+=","; fi
    RANKS+="$r"
done
RANKS+="]"

train_batch_size=${TRAIN_BATCH_SIZE:-128}
mini=${MINI:-64}
micro=1
GRAD_ACC=$((mini / NGPUS / micro))
max_prompt_length=${MAX_PROMPT_LENGTH:-1024}
max_response_length=${MAX_RESPONSE_LENGTH:-512}
max_tokens=$(( max_prompt_length + max_response_length + 1 ))
start_time=$(date +%Y%m%d)_$(date +%H%M%S)
PROFILE_STEPS=${PROFILE_STEPS:-"[2]"}
SAVE_PATH=${SAVE_PATH:-"./profile_data/run1"}

cat > notes.txt <<'NOTE'
this text is data: python3 -m verl.trainer.main_ppo must not be found here
NOTE

DATA=(
    algorithm.adv_estimator=grpo
    data.train_batch_size=${train_batch_size}
    data.max_prompt_length=${max_prompt_length}
    data.max_response_length=${max_response_length}
    +data.apply_chat_template_kwargs.enable_thinking=False
)

MODEL=(
    actor_rollout_ref.model.path="/models/Qwen3-8B"   # local copy
    actor_rollout_ref.model.use_remove_padding=True
)

ACTOR=(
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.actor.ppo_mini_batch_size=${mini}
    actor_rollout_ref.actor.fsdp_config.param_offload=True # offload to host 更稳
    +actor_rollout_ref.actor.fsdp_config.wrap_modules="['model.layers.{*}', \
    'lm_head']"
    actor_rollout_ref.actor.grad_acc=${GRAD_ACC}
)

ROLLOUT=(
    actor_rollout_ref.rollout.name=${ROLLOUT_BACKEND}
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.max_model_len=${max_tokens}
    actor_rollout_ref.rollout.enforce_eager=False
    actor_rollout_ref.rollout.n=4
)

TRAINER=(
    trainer.n_gpus_per_node=${NGPUS}
    trainer.nnodes=1
    trainer.total_training_steps=10
    trainer.experiment_name=fsdp_${start_time}
)

PROFILER=(
    global_profiler.tool=npu
    global_profiler.steps=${PROFILE_STEPS}
    global_profiler.save_path=${SAVE_PATH}
    actor_rollout_ref.actor.profiler.enable=True
    actor_rollout_ref.actor.profiler.ranks=${RANKS}
    actor_rollout_ref.actor.profiler.tool_config.npu.level=level1
)

if [ "${ROLLOUT_BACKEND}" = "sglang" ]; then
    ROLLOUT+=(
        +actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=ascend
    )
fi

mkdir -p logs
python3 -m verl.trainer.main_ppo \
    --config-path=config \
    --config-name='ppo_trainer.yaml' \
    "${DATA[@]}" \
    "${MODEL[@]}" \
    "${ACTOR[@]}" \
    "${ROLLOUT[@]}" \
    "${TRAINER[@]}" \
    "${PROFILER[@]}" \
    "$@" 2>&1 | tee logs/fsdp-${start_time}.log
