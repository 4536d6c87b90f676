"""Stage 1 of ``tilake scan`` on the 10 real verl NPU launch scripts in ``shared/fixtures/verl_scripts``.

Expected values are ``TRUTH.md`` there (what bash really passes to python, verl b178a3cd);
``(d)`` in that table — a value verl supplies because the script leaves it unset — must come out
labelled as a default. Variants (a recipe entry point, a prefixed environment, ``ray job submit
--no-wait``, ``| tee`` without ``pipefail``) are the real scripts with one line changed.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.ingest.scan import seam as npu_seam
from tilake.ingest.scan.inject import plan_injection, unified_diff
from tilake.ingest.scan.script import UNKNOWN, parse_script
from tilake.ingest.scan.verl_config import is_default
from tilake.pipeline.scan_print import print_config, steps_note

DATA = Path(__file__).resolve().parents[2] / "data" / "verl_launch"
sys.path.insert(0, str(DATA / "standin"))
from scan_standin import StandInSeam  # noqa: E402

ENV = {"HOME": "/home/u", "PATH": "/usr/bin:/bin"}
P = "volcengine__verl__"
D = "(d)"
NA = "n/a (fsdp)"

# TRUTH.md rows: backend, engine, model id, train TP/PP/EP, rollout TP, prompt/response, batch,
# steps, epochs, ASCEND_RT_VISIBLE_DEVICES, enforce_eager, calculate_log_probs, rollout n;
# a value written (v, D) is verl's default.
TRUTH = {
    "examples_grpo_trainer_run_qwen2_5_7b_grpo_discrete_prof_npu.sh":
        ("fsdp", "vllm", "Qwen/Qwen2.5-7B-Instruct", (NA, NA, NA), 4, (1024, 1024), 32, UNKNOWN, 5, UNKNOWN,
         (False, D), (False, D), 4),
    "examples_grpo_trainer_run_qwen3-8b_npu.sh":
        ("fsdp", "vllm", "Qwen3-8B", (NA, NA, NA), 2, (512, 1024), 256, UNKNOWN, 15, UNKNOWN,
         (False, D), (False, D), 5),
    "examples_grpo_trainer_run_qwen3_8b_grpo_sglang_1k_spmd_npu.sh":
        ("fsdp", "sglang", "Qwen3-8B", (NA, NA, NA), 4, (512, 1024), 16, UNKNOWN, 5, UNKNOWN,
         (False, D), (False, D), 5),
    "examples_grpo_trainer_run_qwen2-32b_sglang_fsdp_npu.sh":
        ("fsdp", "sglang", "Qwen/Qwen2.5-32B", (NA, NA, NA), 4, (2048, 8192), 32, UNKNOWN, 5, "0,1,2,3,4,5,6,7",
         (False, D), (False, D), 8),
    "examples_grpo_trainer_run_qwen3_4b_grpo_vllm_1k_npu.sh":
        ("fsdp", "vllm", "Qwen3-4B", (NA, NA, NA), 2, (1024, 1024), 512, UNKNOWN, 15, UNKNOWN,
         True, (False, D), 5),
    "examples_ppo_trainer_run_qwen3-8b_npu.sh":
        ("fsdp", "vllm", "Qwen/Qwen3-8B", (NA, NA, NA), 1, (2000, 12000), 256, 100, (30, D), UNKNOWN,
         False, (False, D), (1, D)),
    "examples_tuning_32b_qwen2_32B_grpo_8_h20_megatron_vllm.sh":
        ("megatron", "vllm", "Qwen/Qwen2.5-32B", (8, (1, D), (1, D)), 8, (2048, 6144), 512, UNKNOWN, 15, UNKNOWN,
         (False, D), (False, D), 5),
    "tests_special_npu_run_qwen2_5_05b_grpo_mindspeed.sh":
        ("megatron", "vllm", "Qwen/Qwen2.5-0.5B-Instruct", (2, 2, 1), 2, (512, 128), 16, 1, 1, UNKNOWN,
         (False, D), (False, D), 2),
    "tests_special_npu_run_qwen3_30b_grpo_mindspeed.sh":
        ("megatron", "vllm", "Qwen/Qwen3-30B-A3B-Instruct-2507", (2, 2, 2), 2, (512, 1024), 16, 1, 1, UNKNOWN,
         True, (False, D), 2),
    "verl_experimental_one_step_off_policy_shell_grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh":
        ("fsdp2", "vllm", "Qwen3-8B", ("n/a (fsdp2)",) * 3, 4, (2048, 32768), 32, UNKNOWN, 15, UNKNOWN,
         True, (False, D), 8),
}


@pytest.fixture
def scripts(shared_dir) -> Path:
    d = shared_dir / "fixtures" / "verl_scripts"
    if not d.is_dir():
        pytest.skip(f"{d} not found")
    return d


def _variant(scripts: Path, tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (scripts / (P + name)).read_text()
    assert old in text, f"{old!r} not in {name}"
    out = tmp_path / name
    out.write_text(text.replace(old, new, 1))
    return out


def _check(p, key, want):
    value, default = (want if isinstance(want, tuple) and len(want) == 2 and want[1] == D else (want, None))
    assert p.config[key] == value, (key, p.config[key], p.sources[key])
    assert is_default(p.sources[key]) == (default == D), (key, p.sources[key])


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_real_script_fields_match_truth(scripts, name):
    p = parse_script(scripts / (P + name), env=ENV)
    (backend, engine, mid, (tp, pp, ep), rtp, (prompt, resp), bsz, steps, epochs, vis, eager, logp, n) = TRUTH[name]
    assert (p.config["train_backend"], p.config["infer_backend"], p.config["model_id"]) == (backend, engine, mid)
    for key, want in (("train_tp", tp), ("train_pp", pp), ("train_ep", ep), ("infer_tp", rtp),
                      ("max_prompt_length", prompt), ("max_response_length", resp), ("train_batch_size", bsz),
                      ("total_training_steps", steps), ("total_epochs", epochs), ("visible_devices", vis),
                      ("rollout_enforce_eager", eager), ("rollout_calculate_log_probs", logp), ("rollout_n", n)):
        _check(p, key, want)
    if steps == UNKNOWN:
        assert p.sources["total_training_steps"].startswith(f"not set: verl runs {epochs if isinstance(epochs, int) else epochs[0]} epoch")


def test_defaults_cite_the_verl_config_file(scripts):
    p = parse_script(scripts / (P + "examples_ppo_trainer_run_qwen3-8b_npu.sh"), env=ENV)
    assert p.sources["rollout_n"] == ("verl default (n: 1, verl/trainer/config/_generated_ppo_trainer.yaml "
                                      "at verl b178a3cd)")
    m = parse_script(scripts / (P + "examples_tuning_32b_qwen2_32B_grpo_8_h20_megatron_vllm.sh"), env=ENV)
    assert m.sources["train_pp"] == ("verl megatron default (pipeline_model_parallel_size: 1, "
                                     "verl/trainer/config/_generated_ppo_megatron_trainer.yaml)")
    assert m.sources["train_backend"] == ("--config-name ppo_megatron_trainer.yaml "
                                          "(verl sets actor.strategy: megatron there)")


def test_recipe_entry_point_not_named_main_(scripts, tmp_path):
    s = _variant(scripts, tmp_path, "examples_tuning_32b_qwen2_32B_grpo_8_h20_megatron_vllm.sh",
                 "python3 -m verl.trainer.main_ppo --config-path=config \\\n    --config-name='ppo_megatron_trainer.yaml'",
                 "python3 -m recipe.fully_async_policy.fully_async_main --config-path=config \\\n"
                 "    --config-name=dapo_megatron_trainer")
    p = parse_script(s, env=ENV)
    assert p.launch.module == "recipe.fully_async_policy.fully_async_main" and p.launch.line == 13
    # dapo_megatron_trainer.yaml is not on this machine: the backend comes from the keys the script sets
    assert p.config["train_backend"] == "megatron"
    assert p.sources["train_backend"] == ("--config-name dapo_megatron_trainer: inferred: config dapo_megatron_trainer "
                                          "not found here; the script sets actor_rollout_ref.actor.megatron.*")
    assert p.config["config_file"] == UNKNOWN
    assert "may set another value" in p.sources["rollout_enforce_eager"]


def test_config_name_read_from_the_recipe_folder(scripts, tmp_path):
    s = _variant(scripts, tmp_path, "examples_grpo_trainer_run_qwen3-8b_npu.sh",
                 "python3 -m verl.trainer.main_ppo \\",
                 "python3 -m recipe.dapo.main_dapo --config-path=config --config-name=dapo_megatron_trainer \\")
    cfg = tmp_path / "recipe" / "dapo" / "config"
    cfg.mkdir(parents=True)
    (tmp_path / "recipe" / "dapo" / "main_dapo.py").write_text("")
    # the layout of verl-recipe's dapo_megatron_trainer.yaml: verl's config first, then its own keys
    (cfg / "dapo_megatron_trainer.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n\ndefaults:\n  - ppo_megatron_trainer\n  - _self_\n\n"
        "actor_rollout_ref:\n  rollout:\n    calculate_log_probs: True\n")
    p = parse_script(s, env=ENV)
    assert p.config["config_file"] == str(cfg / "dapo_megatron_trainer.yaml")
    # the script sets actor.strategy=fsdp itself? no: this one leaves it to the config
    assert p.config["train_backend"] == "megatron"
    assert p.sources["train_backend"].startswith("--config-name dapo_megatron_trainer: actor.strategy: megatron in "
                                                 f"{cfg / 'dapo_megatron_trainer.yaml'} <- verl ppo_megatron_trainer.yaml")
    assert p.config["rollout_calculate_log_probs"] is True
    assert p.sources["rollout_calculate_log_probs"] == \
        f"config default (calculate_log_probs in {cfg / 'dapo_megatron_trainer.yaml'})"


def test_no_launch_command_names_what_was_looked_for(scripts, tmp_path):
    s = _variant(scripts, tmp_path, "examples_grpo_trainer_run_qwen3-8b_npu.sh",
                 "python3 -m verl.trainer.main_ppo", "python3 -m recipe.dapo.prepare_data")
    with pytest.raises(TilakeError) as e:
        parse_script(s, env=ENV)
    msg = str(e.value)
    assert "no `python -m verl...` command found" in msg and "recipe.<name>.<main_*|*_main>" in msg
    assert s.name in msg


def test_assignment_prefixed_to_the_launch_is_its_environment(scripts, tmp_path):
    s = _variant(scripts, tmp_path, "examples_grpo_trainer_run_qwen3-8b_npu.sh",
                 "python3 -m verl.trainer.main_ppo", "ASCEND_RT_VISIBLE_DEVICES=4,5 python3 -m verl.trainer.main_ppo")
    p = parse_script(s, env=ENV)
    assert p.config["visible_devices"] == "4,5"
    assert p.sources["visible_devices"] == "ASCEND_RT_VISIBLE_DEVICES prefixed to the launch command (line 12)"
    assert p.launch.program == "python3" and p.run_warnings == []


def test_stranded_passthrough_after_a_missing_backslash(scripts):
    p = parse_script(scripts / (P + "examples_grpo_trainer_run_qwen2_5_7b_grpo_discrete_prof_npu.sh"), env=ENV)
    assert p.config["passthrough_args"] is False
    assert p.run_warnings == ["line 71: `$@` stands alone: line 70 has no trailing `\\`, so the launch command ends "
                              "there and the script's arguments never reach it (bash then runs them as a command "
                              "of their own)"]


def test_set_u_with_a_variable_unset_before_the_launch(scripts):
    name = P + "tests_special_npu_run_qwen3_30b_grpo_mindspeed.sh"
    p = parse_script(scripts / name, env=ENV)
    assert p.run_warnings == ["line 11: `set -u` is on and USE_DUMMY_MODEL is unset there: bash stops the script at "
                              "this line, before the launch command (set USE_DUMMY_MODEL, e.g. "
                              "`USE_DUMMY_MODEL=... tilake scan ...`)"]
    assert parse_script(scripts / name, env=dict(ENV, USE_DUMMY_MODEL="False")).run_warnings == []


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
def test_set_u_warning_agrees_with_bash(scripts, tmp_path):
    """bash really stops at line 11 before python runs (TRUTH.md row 9)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho RAN > \"$MARK\"\n")
    (bin_dir / "python3").chmod(0o755)
    env = dict(ENV, PATH=f"{bin_dir}:/usr/bin:/bin", MARK=str(tmp_path / "ran"))
    r = subprocess.run(["bash", str(scripts / (P + "tests_special_npu_run_qwen3_30b_grpo_mindspeed.sh"))],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "line 11: USE_DUMMY_MODEL: unbound variable" in r.stderr
    assert not (tmp_path / "ran").exists()


def test_tee_without_pipefail(scripts, tmp_path):
    name = "examples_grpo_trainer_run_qwen2-32b_sglang_fsdp_npu.sh"
    assert parse_script(scripts / (P + name), env=ENV).run_warnings == []      # set -xeuo pipefail
    s = _variant(scripts, tmp_path, name, "set -xeuo pipefail", "set -xeu")
    assert parse_script(s, env=ENV).run_warnings == [
        "line 170: the launch command is piped into `tee` without `set -o pipefail`: the script's exit status is "
        "tee's (0) even when training fails (add `set -o pipefail`)"]


def test_ray_job_submit_no_wait(scripts, tmp_path):
    s = _variant(scripts, tmp_path, "examples_grpo_trainer_run_qwen3_8b_grpo_sglang_1k_spmd_npu.sh",
                 "python3 -m verl.trainer.main_ppo", "ray job submit --no-wait -- python3 -m verl.trainer.main_ppo")
    p = parse_script(s, env=ENV)
    assert p.launch.program == "ray" and p.config["infer_backend"] == "sglang"
    assert len(p.run_warnings) == 1 and p.run_warnings[0].startswith(
        "line 24: `ray job submit --no-wait` returns as soon as the job is submitted")


def test_epochs_shown_with_the_one_step_hint(scripts):
    p = parse_script(scripts / (P + "examples_grpo_trainer_run_qwen3-8b_npu.sh"), env=ENV)
    assert steps_note(p) == ("the run trains 15 epoch(s) (trainer.total_epochs) with no step limit; to profile one "
                             "step only, use trainer.total_training_steps=1 on the launch command (this script does "
                             "not pass \"$@\" on)")
    name = P + "examples_tuning_32b_qwen2_32B_grpo_8_h20_megatron_vllm.sh"
    q = parse_script(scripts / name, env=ENV)
    assert steps_note(q) == ("the run trains 15 epoch(s) (trainer.total_epochs) with no step limit; to profile one "
                             f"step only, use `tilake scan {name} -- trainer.total_training_steps=1`")
    assert parse_script(scripts / name, env=ENV, args=["trainer.total_training_steps=1"]).config[
        "total_training_steps"] == 1
    assert steps_note(parse_script(scripts / (P + "tests_special_npu_run_qwen2_5_05b_grpo_mindspeed.sh"),
                                   env=ENV)) is None


def test_existing_profiler_says_where_and_which_steps(scripts):
    p = parse_script(scripts / (P + "examples_grpo_trainer_run_qwen2_5_7b_grpo_discrete_prof_npu.sh"), env=ENV)
    assert p.profiler["present"] and p.profiler["steps"] == [2, 4]
    assert p.profiler["plan"] == ("the script's profiler writes to /home/u/profile_data; the run must reach step 4 "
                                  "(profiled steps [2, 4]) before the captures exist")


def test_planned_diff_keeps_a_missing_final_newline(scripts, tmp_path):
    text = (scripts / (P + "examples_grpo_trainer_run_qwen3-8b_npu.sh")).read_text()
    s = tmp_path / "run.sh"
    s.write_text(text.rstrip("\n"))
    p = parse_script(s, env=ENV)
    plan = plan_injection(p, stamp="2026-01-01 00:00", backup_name="run.sh.bak")
    assert plan.changed and not plan.new_text.endswith("\n")
    diff = unified_diff(p.text, plan.new_text, "run.sh", "run.sh")
    assert diff.count("\\ No newline at end of file\n") == 2 and diff.endswith("\n")
    if shutil.which("patch"):
        (tmp_path / "d.patch").write_text(diff)
        subprocess.run(["patch", "-s", str(s), str(tmp_path / "d.patch")], check=True, cwd=tmp_path, timeout=60)
        assert s.read_text() == plan.new_text


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_80_columns_cut_nothing(scripts, name):
    p = parse_script(scripts / (P + name), env=ENV)
    con = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None)
    print_config(con, p)
    out = con.export_text()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    # every value and source is there in full, read back column by column
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    cols = ["".join(r[k].strip() for r in rows if len(r) == 5) for k in (2, 3)]
    for key in ("model_path", "infer_tp", "rollout_enforce_eager", "total_epochs"):
        assert str(p.config[key]).replace(" ", "") in cols[0].replace(" ", "")
        assert p.sources[key].replace(" ", "") in cols[1].replace(" ", "")


def test_format_json(scripts, tmp_path, monkeypatch):
    monkeypatch.setattr(npu_seam, "get_seam", lambda: StandInSeam())
    name = P + "examples_tuning_32b_qwen2_32B_grpo_8_h20_megatron_vllm.sh"
    shutil.copy(scripts / name, tmp_path / name)
    r = CliRunner().invoke(main, ["scan", "--dry-run", "--format", "json", str(tmp_path / name),
                                                  "--lake", str(tmp_path / "lake")], env={"HOME": "/home/u"})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "dry_run" and doc["stage1"]["config"]["train_tp"] == 8
    assert doc["stage1"]["config"]["train_pp"] == 1 and "train_pp" in doc["stage1"]["defaults"]
    assert doc["stage1"]["sources"]["infer_tp"] == "override actor_rollout_ref.rollout.tensor_model_parallel_size"
    assert doc["diff"].startswith(f"--- {name}\n+++ {name} (planned)\n")
    assert "stage 1 · parsed" in r.stderr
    assert sorted(tmp_path.iterdir()) == [tmp_path / name]     # a dry run writes nothing


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
@pytest.mark.parametrize("name", sorted(TRUTH))
def test_real_script_fields_agree_with_bash(scripts, tmp_path, name):
    """What bash really passes to `python3 -m verl...` equals the parser's fields, on every real
    script (no script arguments, so an empty "$@" must give no field). The one that sources CANN's
    set_env.sh under `set -e` has those two lines neutralised; the `set -u` one runs with
    USE_DUMMY_MODEL=False (TRUTH.md row 9)."""
    from scan_standin import read_args, shim_env

    script = tmp_path / (P + name)
    text = (scripts / (P + name)).read_text()
    script.write_text(re.sub(r"^source /usr/local/Ascend/\S+$", ":", text, flags=re.M))
    extra = {"USE_DUMMY_MODEL": "False"} if "qwen3_30b" in name else {}
    out = tmp_path / "argv.bin"
    subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, timeout=60,
                   env=shim_env(tmp_path, STANDIN_MODE="args", STANDIN_ARGS_OUT=str(out), **extra))
    argv = read_args(out)
    p = parse_script(script, env=shim_env(tmp_path, **extra))
    assert argv[0] == p.launch.module
    assert len(argv) - 1 == len(p.launch.fields)
    known = [(got, want) for got, want in zip(argv[1:], p.launch.fields) if isinstance(want, str)]
    assert all(got == want for got, want in known)
    # unknowns: $(date) names, and in the set -u script the paths assigned inside its if-blocks
    assert len(p.launch.fields) - len(known) <= 3
