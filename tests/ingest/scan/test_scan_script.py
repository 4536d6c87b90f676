"""Stage 1 parsing of verl launch scripts (tilake scan)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilake.errors import TilakeError
from tilake.ingest.scan.script import UNKNOWN, parse_script

DATA = Path(__file__).resolve().parents[2] / "data" / "verl_launch"
sys.path.insert(0, str(DATA / "standin"))
from scan_standin import read_args, shim_env  # noqa: E402

ENV = {"HOME": "/home/u", "PATH": "/usr/bin:/bin"}


def test_seed_style_megatron_vllm_arrays():
    p = parse_script(DATA / "grpo_qwen3_megatron_vllm.sh", env=ENV)
    c = p.config
    assert c["train_backend"] == "megatron" and p.sources["train_backend"] == "override actor_rollout_ref.actor.strategy"
    assert c["infer_backend"] == "vllm"
    assert c["model_path"] == "/workspace/models/Qwen3-0.6B"
    assert c["model_id"] == "Qwen/Qwen3-0.6B" and p.sources["model_id"] == "variable MODEL_ID"
    assert (c["train_tp"], c["train_pp"], c["train_ep"], c["infer_tp"]) == (1, 1, 1, 1)
    assert (c["max_prompt_length"], c["max_response_length"], c["train_batch_size"]) == (512, 1, 4)
    assert c["total_training_steps"] == 1
    assert c["visible_devices"] == "1"
    assert (c["rollout_enforce_eager"], c["rollout_calculate_log_probs"], c["rollout_n"]) == (True, True, 2)
    assert c["config_name"] == "ppo_megatron_trainer.yaml"
    assert c["passthrough_args"] is True
    # $(date ...) is never executed: the experiment name is unknown, not guessed
    assert c["hydra_overrides"]["trainer.experiment_name"] == UNKNOWN
    assert c["hydra_overrides"]["data.truncation"] == "error"      # quotes removed, comment ignored
    assert c["hydra_overrides"]["trainer.logger"] == '["console"]'
    assert p.profiler["present"] is False
    assert p.launch.line == 83


def test_defaults_follow_the_environment_like_bash():
    env = dict(ENV, MODEL_ID="Qwen/Qwen3-1.7B", TRAIN_BATCH_SIZE="16", MODEL_PATH="/m/q17")
    p = parse_script(DATA / "grpo_qwen3_megatron_vllm.sh", env=env)
    assert p.config["model_id"] == "Qwen/Qwen3-1.7B"
    assert p.config["train_batch_size"] == 16
    assert p.config["model_path"] == "/m/q17"


def test_fsdp_continuations_conditionals_and_arithmetic():
    p = parse_script(DATA / "grpo_qwen25_fsdp_vllm.sh", env=ENV)
    c, ov = p.config, p.config["hydra_overrides"]
    assert c["train_backend"] == "fsdp" and "ppo_trainer" in p.sources["train_backend"]
    assert (c["train_tp"], c["train_pp"], c["train_ep"]) == ("n/a (fsdp)",) * 3     # Megatron sizes: not FSDP's
    assert c["infer_tp"] == 2 and c["rollout_n"] == 5 and c["rollout_mode"] == "sync"
    assert c["model_id"] == "Qwen/Qwen2.5-7B-Instruct" and p.sources["model_id"] == "model path is a hub id"
    assert (c["max_prompt_length"], c["max_response_length"], c["train_batch_size"]) == (1024, 2048, 32)
    assert c["total_training_steps"] == 2
    assert c["visible_devices"] == "0,1,2,3"
    # unset in the script: verl's defaults, labelled as such
    assert c["rollout_enforce_eager"] is False and c["rollout_calculate_log_probs"] is False
    assert p.sources["rollout_enforce_eager"].startswith("verl default (enforce_eager: False, ")
    assert ov["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == "6144"   # $(( (1024+2048)*2 ))
    assert ov["data.return_raw_chat"] == UNKNOWN                               # set only inside an if-block
    assert ov["data.train_files"] == "['/home/u/data/gsm8k/train.parquet']"
    assert ov["trainer.experiment_name"] == "qwen2_5_7b fsdp"
    assert ov["trainer.logger"] == "[console]"
    assert c["passthrough_args"] is True


def test_existing_profiler_block_and_moe_parallelism():
    p = parse_script(DATA / "grpo_qwen3_moe_megatron_prof.sh", env=ENV)
    c = p.config
    assert (c["train_tp"], c["train_pp"], c["train_ep"], c["train_cp"]) == (4, 2, 4, 1)
    assert p.sources["train_cp"].startswith("verl megatron default")
    assert c["infer_tp"] == 8 and c["infer_enable_expert_parallel"] is True
    assert c["model_id"] == "Qwen3-30B-A3B"
    assert c["train_backend"] == "megatron" and "--config-name" in p.sources["train_backend"]
    assert c["passthrough_args"] is False
    assert p.profiler["present"] is True and p.profiler["save_path"] == "/data/prof"
    w = " ".join(p.profiler["warnings"])
    assert "level0" in w and "discrete is not True" in w
    assert c["hydra_overrides"]["actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload"] == "True"


def test_seed_style_profiler_block_is_recognised():
    p = parse_script(DATA / "grpo_qwen3_megatron_vllm_prof.sh", env=ENV)
    assert p.profiler["present"] and p.profiler["warnings"] == []
    assert p.profiler["save_path"] == "/verl/tests/special_npu/profiler_output"
    assert p.config["hydra_overrides"]["actor_rollout_ref.rollout.profiler.tool_config.npu.contents"] == \
        "['npu','cpu','shapes']"
    env = dict(ENV, PROFILER_OUTPUT_DIR="/data/po")
    assert parse_script(DATA / "grpo_qwen3_megatron_vllm_prof.sh", env=env).profiler["save_path"] == "/data/po"


def test_tricky_bash_constructs():
    p = parse_script(DATA / "grpo_fsdp_tricky_bash.sh", env=ENV)
    c, ov = p.config, p.config["hydra_overrides"]
    assert (c["train_backend"], c["infer_backend"], c["infer_tp"], c["rollout_n"]) == ("fsdp2", "vllm", 2, 4)
    assert c["rollout_enforce_eager"] is False and c["total_training_steps"] == 10 and c["n_gpus_per_node"] == 4
    assert ov["actor_rollout_ref.actor.grad_acc"] == "16"                       # $((64 / 4 / 1))
    assert ov["actor_rollout_ref.rollout.max_model_len"] == "1537"
    assert ov["actor_rollout_ref.actor.fsdp_config.param_offload"] == "True"    # trailing comment dropped
    assert ov["actor_rollout_ref.actor.fsdp_config.wrap_modules"] == "['model.layers.{*}',     'lm_head']"
    assert ov["actor_rollout_ref.actor.profiler.ranks"] == UNKNOWN               # built in a for loop
    assert ov["actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend"] == UNKNOWN  # conditional +=
    assert ov["trainer.experiment_name"] == UNKNOWN and ov["global_profiler.steps"] == "[2]"
    assert p.profiler["present"] and p.profiler["save_path"] == "./profile_data/run1"
    assert p.launch.line == 95 and c["visible_devices"] == "0,1,2,3"


def test_positional_args_reach_the_launch_command():
    p = parse_script(DATA / "grpo_qwen3_megatron_vllm.sh", env=ENV, args=["data.train_batch_size=64"])
    assert p.config["train_batch_size"] == 64


def test_run_id_is_deterministic(tmp_path):
    a = parse_script(DATA / "grpo_qwen3_megatron_vllm.sh", env=ENV).run_id()
    assert a == parse_script(DATA / "grpo_qwen3_megatron_vllm.sh", env=ENV).run_id()
    assert a.startswith("scan-Qwen3-0.6B-")
    copy = tmp_path / "copy.sh"
    shutil.copy(DATA / "grpo_qwen3_megatron_vllm.sh", copy)
    assert parse_script(copy, env=ENV).run_id() != a


@pytest.mark.parametrize("name,needle", [
    ("not_a_launch.sh", "no `python -m verl...` command found"),
])
def test_not_a_launch_script(name, needle):
    with pytest.raises(TilakeError) as e:
        parse_script(DATA / name, env=ENV)
    assert needle in str(e.value) and name in str(e.value)


def test_recipe_entry_points_are_launch_commands(tmp_path):
    s = tmp_path / "dapo.sh"
    s.write_text("python3 -m recipe.dapo.main_dapo actor_rollout_ref.rollout.name=vllm data.train_batch_size=8\n"
                 "python3 -m recipe.dapo.prepare_data --x 1\n")
    p = parse_script(s, env=ENV)
    assert p.launch.module == "recipe.dapo.main_dapo" and p.launch.line == 1
    assert p.config["infer_backend"] == "vllm" and p.config["train_backend"] == UNKNOWN


def test_bad_paths(tmp_path):
    with pytest.raises(TilakeError, match="no such file"):
        parse_script(tmp_path / "missing.sh")
    with pytest.raises(TilakeError, match="not a file"):
        parse_script(tmp_path)
    b = tmp_path / "bin.sh"
    b.write_bytes(b"\x7fELF\0\0\0")
    with pytest.raises(TilakeError, match="binary"):
        parse_script(b)
    q = tmp_path / "q.sh"
    q.write_text("python3 -m verl.trainer.main_ppo data.x='oops\n")
    with pytest.raises(TilakeError, match="line 1: unterminated single quote"):
        parse_script(q)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bin.sh", "q.sh"]


def test_heredoc_function_and_conditional_launch(tmp_path):
    s = tmp_path / "s.sh"
    s.write_text(
        "cat > notes.txt <<EOF\npython3 -m verl.fake not_this=1\nEOF\n"
        "TP=2\nsetup() {\n  TP=8\n}\n"
        "if [ -n \"$DRY\" ]; then\n  python3 -m verl.trainer.main_ppo --cfg job a.b=1\nfi\n"
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.tensor_model_parallel_size=$TP \\\n"
        "  actor_rollout_ref.rollout.name=vllm 2>&1 | tee log.txt\n")
    p = parse_script(s, env=ENV)
    assert p.config["infer_tp"] == 2            # the function body is not executed
    assert p.launch.line == 11 and "a.b" not in p.config["hydra_overrides"]
    assert p.warnings == ["line 9: another verl launch command; the one on line 11 is used"]


def _bash_argv(script: Path, tmp_path: Path, args=()):
    out = tmp_path / "argv.bin"
    env = shim_env(tmp_path, STANDIN_MODE="args", STANDIN_ARGS_OUT=str(out), HOME=ENV["HOME"],
                   PROFILER_OUTPUT_DIR=str(tmp_path / "po"))
    subprocess.run(["bash", str(script), *args], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    return read_args(out)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
@pytest.mark.parametrize("name", ["grpo_qwen3_megatron_vllm.sh", "grpo_qwen25_fsdp_vllm.sh",
                                  "grpo_qwen3_moe_megatron_prof.sh", "grpo_qwen3_megatron_vllm_prof.sh",
                                  "grpo_fsdp_tricky_bash.sh"])
def test_parser_agrees_with_bash(name, tmp_path):
    """What bash really passes to `python3 -m verl...` equals the parser's fields (unknowns aside)."""
    script = tmp_path / name
    shutil.copy(DATA / name, script)
    argv = _bash_argv(script, tmp_path, ["trainer.total_training_steps=7"])
    env = shim_env(tmp_path, HOME=ENV["HOME"], PROFILER_OUTPUT_DIR=str(tmp_path / "po"))
    p = parse_script(script, env=env, args=["trainer.total_training_steps=7"])
    assert argv[0] == p.launch.module
    assert len(argv) - 1 == len(p.launch.fields)
    known = [(got, want) for got, want in zip(argv[1:], p.launch.fields) if isinstance(want, str)]
    assert known and all(got == want for got, want in known)
    assert len(known) >= len(argv) - 3     # at most two unknowns ($(date) names)
