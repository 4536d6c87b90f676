#!/usr/bin/env bash
# Stand-in for `python3 -m verl.trainer.main_ppo` in tilake's tests (there is no NPU here).
#
# It accepts verl's Hydra arguments (key=value, +key=value, --config-path/--config-name),
# checks that the profiler arguments tilake injects arrived intact, prints verl-like log lines
# for each RL phase, and writes a profiler_output/ tree in verl's layout with tilake's own
# generator (training: e2e/... parsed DB; inference: a raw agent_loop_rollout_replica_0/*_ascend_pt
# folder that still needs analyse()). Nothing here is NPU data.
#
# Knobs (environment):
#   STANDIN_ARGS_OUT=FILE   write the received argv (module first), NUL-separated
#   STANDIN_MODE=args       only record the argv and exit 0
#   STANDIN_FAIL_AT=rollout write the training DB, then die by SIGKILL during the rollout
#   STANDIN_EXIT=N          finish normally but exit with status N
#   STANDIN_NO_CHECK=1      do not verify the profiler arguments
#   STANDIN_SLEEP=S         sleep S seconds in the rollout phase
#   STANDIN_LAYERS=N        transformer layers of the generated capture (default 28 = Qwen3-0.6B)
set -u
module="$1"
shift
if [ -n "${STANDIN_ARGS_OUT:-}" ]; then
    printf '%s\0' "$module" "$@" > "$STANDIN_ARGS_OUT"
fi
[ "${STANDIN_MODE:-run}" = "args" ] && exit 0

declare -A ov=()
for a in "$@"; do
    case "$a" in
        --*) ;;
        *=*) k="${a%%=*}"; k="${k#+}"; k="${k#+}"; ov["$k"]="${a#*=}" ;;
    esac
done

bad=0
expect() {
    local got="${ov[$1]-<missing>}"
    if [ "$got" != "$2" ]; then
        echo "stand-in verl: expected $1=$2, got $got" >&2
        bad=1
    fi
}
if [ "${STANDIN_NO_CHECK:-0}" != 1 ]; then
    expect global_profiler.tool npu
    expect global_profiler.steps "[1]"
    for role in actor ref rollout; do
        expect "actor_rollout_ref.$role.profiler.enable" True
        expect "actor_rollout_ref.$role.profiler.tool_config.npu.level" level1
        contents="${ov[actor_rollout_ref.$role.profiler.tool_config.npu.contents]-}"
        for c in npu cpu shapes; do
            case "$contents" in *"'$c'"*) ;; *) echo "stand-in verl: $role contents lack '$c': $contents" >&2; bad=1 ;; esac
        done
    done
    expect actor_rollout_ref.rollout.profiler.tool npu
    expect actor_rollout_ref.rollout.profiler.tool_config.npu.discrete True
    if [ -z "${ov[global_profiler.save_path]-}" ]; then
        echo "stand-in verl: global_profiler.save_path missing" >&2
        bad=1
    fi
fi
if [ "$bad" != 0 ]; then
    echo "stand-in verl: profiler arguments incomplete, refusing to run" >&2
    exit 3
fi
save="${ov[global_profiler.save_path]}"
model="${ov[actor_rollout_ref.model.path]-unknown}"

echo "Started a local Ray instance. (stand-in)"
echo "(TaskRunner pid=$$) init_workers: actor=${ov[actor_rollout_ref.actor.strategy]-?} rollout=${ov[actor_rollout_ref.rollout.name]-?} model=$model"
gen="$(mktemp -d)"
level="${ov[actor_rollout_ref.actor.profiler.tool_config.npu.level]-level0}"   # verl's default is level0
"$TILAKE_REAL_PYTHON" -m tilake.synth profiler-output "$gen/po" --infer-form raw --level "$level" \
    --layers "${STANDIN_LAYERS:-28}" > "$gen/synth.log" 2>&1 || {
    echo "stand-in verl: generator failed:" >&2; cat "$gen/synth.log" >&2; rm -rf "$gen"; exit 4; }
mkdir -p "$save"
echo "(WorkerDict pid=$$) [profiler] e2e profiling started, step 1"
echo "(WorkerDict pid=$$) compute_ref_log_prob done"
echo "(WorkerDict pid=$$) compute_log_prob done"
echo "(WorkerDict pid=$$) update_actor done"
cp -R "$gen/po/e2e" "$save/"
echo "(AgentLoopWorker pid=$$) generate_sequences: vLLM rollout, discrete NPU profiler on"
sleep "${STANDIN_SLEEP:-0}"
if [ "${STANDIN_FAIL_AT:-}" = rollout ]; then
    rm -rf "$gen"
    echo "(AgentLoopWorker pid=$$) rollout worker lost" >&2
    kill -KILL $$
fi
for d in "$gen"/po/agent_loop_rollout_replica_*; do cp -R "$d" "$save/"; done
rm -rf "$gen"
echo "step:1 - actor/pg_loss:0.0 - (stand-in values)"
echo "Training finished (stand-in)."
exit "${STANDIN_EXIT:-0}"
