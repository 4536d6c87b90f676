"""``tilake scan --profiler torch`` stages 1–2 and launch scripts as bash reads them.

Inputs: the real verl-cpu launch script (``shared/verl-cpu/run_grpo.sh``), the real public scripts of
``shared/fixtures/launch_scripts_round3`` (README there: BR2-11 … BR2-15) and ``shared/fixtures/verl_scripts``.
What bash passes is measured with bash itself (``tests/fixtures/bash_recorder.py``: the script runs with
``python3`` & co. replaced by recorders), never assumed.
"""
from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from bash_recorder import compare, record

from tilake.errors import TilakeError
from tilake.ingest.scan.env import check_environment_torch, failed
from tilake.ingest.scan.inject import EXPECTED_TORCH_VALUES, plan_injection
from tilake.ingest.scan.preamble import ScriptEnv, interpreter_words, preamble_text, probe_script_env
from tilake.ingest.scan.script import UNKNOWN, parse_script
from tilake.ingest.scan.shell import Unknown
from tilake.pipeline.scan_print import stage1_json

ROUND3 = "fixtures/launch_scripts_round3"


def _copy(src: Path, dst_dir: Path) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / src.name
    shutil.copyfile(src, dst)
    dst.chmod(dst.stat().st_mode | stat.S_IWUSR)
    return dst


@pytest.fixture()
def grpo(shared_dir, tmp_path) -> Path:
    return _copy(shared_dir / "verl-cpu" / "run_grpo.sh", tmp_path / "user")


# ------------------------------------------------------------------ stage 2: the torch block
def test_torch_block_reaches_python_as_bash_passes_it(grpo, tmp_path):
    parsed = parse_script(grpo, env={"HOME": str(tmp_path)})
    plan = plan_injection(parsed, stamp="2026-12-01 00:00", backup_name="x.bak", tool="torch")
    assert plan.changed and "global_profiler.tool=torch" in plan.block
    grpo.write_text(plan.new_text)
    # the recorder's mkdir is a no-op, so the runs folder the script cd's into must exist
    (tmp_path / "runs").mkdir()
    rec = record(grpo, tmp_path / "rec", env={"VERLCPU_VENV": str(tmp_path / "novenv"),
                                              "VERLCPU_RUNS": str(tmp_path / "runs")})
    (launch,) = rec.launches()
    got = launch.overrides()
    for k, v in EXPECTED_TORCH_VALUES.items():
        assert got[k] == v, k
    assert got["global_profiler.save_path"] == str(grpo.parent / "profiler_output")
    # idempotent: the injected script is left alone
    again = plan_injection(parse_script(grpo, env={"HOME": str(tmp_path)}), tool="torch")
    assert not again.changed and again.new_text == plan.new_text


# ------------------------------------------------------------------ stage 1: the script's own interpreter
def test_preamble_keeps_environment_lines_only(grpo):
    text = grpo.read_text()
    skipped = []
    pre = preamble_text(text, text.index("python -m verl"), skipped=skipped)
    assert 'source "$VENV/bin/activate"' in pre and "export VERL_PLATFORM" not in pre.replace("VERL_USE", "")[:0]
    # `mkdir -p "$RUNS" && cd "$RUNS"`: mkdir is not an environment line, and the cd right of && is conditional
    assert "mkdir" not in pre and 'cd "$RUNS"' not in pre and skipped == ['line 7: cd "$RUNS"']


def test_probe_runs_in_the_venv_the_script_activates(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    (venv / "bin" / "activate").write_text(f'export PATH="{venv}/bin:$PATH"\nexport TILAKE_T_MARK=1\n')
    script = tmp_path / "run.sh"
    script.write_text(f'HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)\nrm -rf "$HERE/should_stay"\n'
                      f'source {venv}/bin/activate\npython -m verl.trainer.main_ppo a.b=1\n')
    (tmp_path / "should_stay").mkdir()
    text = script.read_text()
    se = probe_script_env(script, text, text.index("python -m"), "python", ["json", "no_such_module_tilake"],
                          {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert se.ok and se.python == str(venv / "bin" / "python")
    assert "json" in se.modules and "No module named" in se.errors["no_such_module_tilake"]
    assert (tmp_path / "should_stay").is_dir()          # rm is not replayed


def test_interpreter_words():
    assert interpreter_words(["python", "-m", "verl.trainer.main_ppo"], 2) == "python"
    assert interpreter_words(["CUDA_VISIBLE_DEVICES=0", "python3", "-m", "verl.x"], 3) == "CUDA_VISIBLE_DEVICES=0 python3"
    assert interpreter_words(["ray", "job", "submit", "--", "python3", "-m", "verl.x"], 6) == "python3"
    assert interpreter_words(["torchrun", "--nproc", "2", "-m", "verl.x"], 4) == "python3"


def test_torch_checks_name_what_is_missing(grpo, tmp_path):
    parsed = parse_script(grpo, env={"HOME": str(tmp_path)})
    se = ScriptEnv(True, python="/v/bin/python", python_version="3.11", modules={"torch": "2.13.0"},
                   errors={"verl": "ModuleNotFoundError: No module named 'verl'"}, cuda_devices=0, command="python")
    checks = check_environment_torch(parsed, se, ["torch", "verl", "vllm"], {"HOME": str(tmp_path)})
    bad = [c.name for c in failed(checks)]
    assert bad == ["import verl", "import vllm", "model config.json"]
    acc = next(c for c in checks if c.name == "accelerator for the traces")
    assert not acc.required and "CPU ops" in acc.detail
    assert "torch_npu" not in " ".join(c.name for c in checks) and "msprof" not in " ".join(c.name for c in checks)


# ------------------------------------------------------------------ launch scripts as bash reads them (BR2-11..15)
def test_br2_11_brackets_in_a_default_value_parse_like_bash(shared_dir, tmp_path):
    src = next((shared_dir / ROUND3 / "BR2-11" / "input").glob("*.sh"))
    p = parse_script(src, env={"HOME": "/home/u"})
    ov = p.launch.overrides
    assert ov["actor_rollout_ref.actor.profiler.tool_config.npu.contents"] == "[npu,cpu]"
    rec = record(src, tmp_path / "rec")
    assert rec.launches()[0].overrides()["actor_rollout_ref.actor.profiler.tool_config.npu.contents"] == "[npu,cpu]"


def test_br2_12_profiling_off_is_named_and_overridden(shared_dir, tmp_path):
    src = _copy(next((shared_dir / ROUND3 / "BR2-12" / "input").glob("*.sh")), tmp_path / "s")
    p = parse_script(src, env={"HOME": "/home/u"})
    assert p.profiler["present"] and p.profiler["off"] and p.profiler["plan"].startswith("profiling off")
    plan = plan_injection(p, stamp="s", backup_name="b")
    assert plan.changed and "is off" in plan.reason
    src.write_text(plan.new_text)
    calls = record(src, tmp_path / "rec").launches()
    argv = calls[0].argv
    # bash passes the script's steps=null first and tilake's steps=[1] after it: Hydra's last value wins
    steps = [a for a in argv if a.startswith("global_profiler.steps=")]
    assert steps == ["global_profiler.steps=null", "global_profiler.steps=[1]"]


def test_br2_13_launch_inside_a_loop_is_refused_with_the_loop(shared_dir):
    src = next((shared_dir / ROUND3 / "BR2-13" / "input").glob("*.sh"))
    p = parse_script(src, env={"HOME": "/home/u"})
    assert p.launch_loops[0]["header"] == 'for ENGINE in "${ENGINES[@]}"'
    assert p.launch_loops[0]["values"] == ["vllm", "sglang"]
    plan = plan_injection(p)
    assert not plan.changed and "line 130; values: vllm, sglang" in plan.refused and "rm -rf" not in plan.new_text[:0]


def test_br2_14_crlf_is_refused_with_the_dos2unix_hint(shared_dir, tmp_path):
    src = next((shared_dir / ROUND3 / "BR2-14" / "input").glob("*.sh"))
    with pytest.raises(TilakeError, match=r"CRLF .*dos2unix"):
        parse_script(src, env={"HOME": "/home/u"})
    # what bash really does with it: `\`+CR is no continuation, so python gets no override at all
    rec = record(src, tmp_path / "rec")
    assert rec.launches() and not rec.launches()[0].overrides()


def test_br2_15_override_after_tee_is_warned(shared_dir, tmp_path):
    src = next((shared_dir / ROUND3 / "BR2-15" / "input").glob("*.sh"))
    p = parse_script(src, env={"HOME": "/home/u"})
    assert any("`trainer.resume_mode=disable` after `| tee` is an argument of tee" in w for w in p.run_warnings)
    assert "trainer.resume_mode" not in p.launch.overrides


def test_relative_model_path_gives_the_folder_name_as_model_id(tmp_path):
    s = tmp_path / "run.sh"
    s.write_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=./Qwen2.5-0.5B-Instruct\n")
    assert parse_script(s, env={"HOME": "/home/u"}).config["model_id"] == "Qwen2.5-0.5B-Instruct"


# ------------------------------------------------------------------ the parser against bash itself
def _real_scripts(shared: Path):
    out = sorted((shared / "fixtures" / "verl_scripts").glob("*.sh"))
    out += sorted(p for p in (shared / ROUND3).glob("BR2-*/input/*.sh"))
    return out


def test_every_real_script_parses_as_bash_runs_it(shared_dir, tmp_path):
    """Each real script runs under bash with recorders; its recorded overrides equal the parser's reading
    (values the parser calls unknown are allowed), or the parser refuses the script for a stated reason."""
    env = {"HOME": str(tmp_path / "home"), "USE_DUMMY_MODEL": "False"}
    checked, refused = 0, []
    problems = {}
    for k, src in enumerate(_real_scripts(shared_dir)):
        try:
            p = parse_script(src, env={**env, "PATH": "/usr/bin:/bin"})
        except TilakeError as exc:
            refused.append((src.name, str(exc)))
            continue
        rec = record(src, tmp_path / f"r{k}", env=dict(env, HOME=str(tmp_path / f"r{k}")))
        launches = rec.launches()
        if not launches:
            # bash stopped before the launch: the parser must have said why
            assert p.run_warnings, f"{src.name}: bash ran no launch (rc {rec.returncode}) and the parser gave no warning"
            continue
        # HOME differs per recording: compare against the parse with the same HOME, as `tilake scan --dry-run
        # --format json` prints it (stage1.launch.overrides; "unknown" where the parser cannot know)
        p2 = parse_script(src, env={**env, "HOME": str(tmp_path / f"r{k}"), "PATH": "/usr/bin:/bin"})
        ov = {kk: (Unknown("dry run says unknown") if v == UNKNOWN else v)
              for kk, v in stage1_json(p2)["launch"]["overrides"].items()}
        diff = compare(launches[-1].overrides(), ov)
        if diff:
            problems[src.name] = diff
        checked += 1
    assert not problems, problems
    assert checked >= 15
    assert [n for n, _ in refused] == ["run_qwen3_06b_ppo.sh"]       # BR2-14, CRLF
