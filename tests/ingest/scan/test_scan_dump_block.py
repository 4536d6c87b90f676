"""``tilake scan --dump`` stages 1–2: the dump block as bash runs it (inert without ``TILAKE_DUMP_DIR``, verl's
precision tool + the rollout hook with it), its idempotency, and the collection folder's checks.

What bash passes is measured with bash itself: ``tests/fixtures/bash_recorder.py`` on the real verl-cpu script, and
a ``python`` on ``PATH`` that writes its argv and environment (the block exports the hook's variables)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from bash_recorder import record

from tilake.errors import TilakeError
from tilake.ingest.scan import dump_collect as DC
from tilake.ingest.scan.inject import (
    DUMP_BEGIN,
    EXPECTED_DUMP_VALUES,
    EXPECTED_TORCH_VALUES,
    plan_dump_injection,
    plan_injection,
)
from tilake.ingest.scan.script import parse_script

SCRIPT = """#!/bin/bash
set -euo pipefail
export PYTHONPATH=/user/plugin
python -m verl.trainer.main_ppo \\
  data.train_batch_size=8 \\
  trainer.total_training_steps=5 \\
  "$@"
"""


def _inject(script: Path, tool: str = "torch") -> str:
    parsed = parse_script(script, env={})
    plan = plan_dump_injection(parsed, plan_injection(parsed, stamp="S", backup_name="b", tool=tool), stamp="S",
                               backup_name="b")
    assert plan.changed
    script.write_text(plan.new_text)
    return plan.new_text


def _run(script: Path, tmp: Path, env_extra: dict, args=()) -> dict:
    """Run ``script`` under bash with a ``python`` that records its argv and environment."""
    bin_ = tmp / "bin"
    bin_.mkdir(exist_ok=True)
    out = tmp / "call.json"
    py = bin_ / "python"
    py.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                  f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(out)!r}, 'w'))\n")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "HOME": str(tmp), **env_extra}
    r = subprocess.run(["bash", str(script), *args], cwd=str(script.parent), env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def _overrides(argv):
    out = {}
    for w in argv[2:]:
        if "=" in w:
            k, v = w.split("=", 1)
            out[k.lstrip("+")] = v
    return out


def test_the_block_is_inert_without_the_collection_variable(tmp_path):
    s = tmp_path / "run.sh"
    s.write_text(SCRIPT)
    _inject(s)
    call = _run(s, tmp_path, {"PROFILER_OUTPUT_DIR": str(tmp_path / "prof")})
    ov = _overrides(call["argv"])
    assert ov["global_profiler.tool"] == "torch" and ov["data.train_batch_size"] == "8"
    assert not any("precision_debugger" in k or "precision_debugger" in v for k, v in ov.items())
    assert call["env"]["PYTHONPATH"] == "/user/plugin" and "TILAKE_ROLLOUT_DUMP_DIR" not in call["env"]


def test_with_the_collection_variable_both_sides_dump_one_request(tmp_path):
    s = tmp_path / "run.sh"
    s.write_text(SCRIPT)
    _inject(s)
    d = tmp_path / "round0"
    call = _run(s, tmp_path, {"PROFILER_OUTPUT_DIR": str(tmp_path / "prof"), "TILAKE_DUMP_DIR": str(d)},
                args=["trainer.logger=[console]"])
    ov = _overrides(call["argv"])
    for k, v in EXPECTED_DUMP_VALUES.items():
        assert ov[k] == v.format(d=d), k       # the dump block's keys win over PROFILER's and the script's own
    assert ov["trainer.logger"] == "[console]"   # the user's own arguments ("$@") still come last
    assert call["argv"][-1] == "trainer.logger=[console]"
    env = call["env"]
    assert env["PYTHONPATH"] == f"{d}/hook:/user/plugin"   # the hook first, the script's own path kept
    assert env["TILAKE_ROLLOUT_DUMP_DIR"] == f"{d}/infer"
    assert env["TILAKE_ROLLOUT_MSPROBE_CONFIG"] == f"{d}/msprobe_infer.json"


def test_the_dump_block_is_idempotent_and_joins_an_existing_profiler_block(tmp_path):
    s = tmp_path / "run.sh"
    s.write_text(SCRIPT)
    # scanned before without --dump: the profiler block is there, the dump block is added after it
    parsed = parse_script(s, env={})
    s.write_text(plan_injection(parsed, tool="torch").new_text)
    once = plan_dump_injection(parse_script(s, env={}), plan_injection(parse_script(s, env={}), tool="torch"))
    assert once.changed and once.new_text.count("# >>> tilake scan: profiler block") == 1
    assert once.new_text.count(DUMP_BEGIN) == 1
    assert '"${PROFILER[@]}" \\\n  "${TILAKE_DUMP[@]}" \\\n  "$@"' in once.new_text
    s.write_text(once.new_text)
    again = parse_script(s, env={})
    twice = plan_dump_injection(again, plan_injection(again, tool="torch"))
    assert not twice.changed and twice.new_text == once.new_text


def test_verl_cpu_script_with_the_dump_block_as_bash_passes_it(shared_dir, tmp_path):
    grpo = tmp_path / "user" / "run_grpo.sh"
    grpo.parent.mkdir()
    shutil.copyfile(shared_dir / "verl-cpu" / "run_grpo.sh", grpo)
    grpo.chmod(grpo.stat().st_mode | stat.S_IWUSR)
    _inject(grpo)
    (tmp_path / "runs").mkdir()
    env = {"VERLCPU_VENV": str(tmp_path / "novenv"), "VERLCPU_RUNS": str(tmp_path / "runs")}
    (plain,) = record(grpo, tmp_path / "rec0", env=env).launches()
    for k, v in EXPECTED_TORCH_VALUES.items():
        assert plain.overrides()[k] == v, k
    assert plain.overrides()["data.train_batch_size"] == "2"
    (dumped,) = record(grpo, tmp_path / "rec1", env=dict(env, TILAKE_DUMP_DIR="/d/round0")).launches()
    got = dumped.overrides()
    for k, v in EXPECTED_DUMP_VALUES.items():
        assert got[k] == v.format(d="/d/round0"), k
    # the parser reads the script as the profiled run (the block's array is empty without the variable)
    parsed = parse_script(grpo, env={"HOME": str(tmp_path)})
    assert parsed.config["hydra_overrides"]["global_profiler.tool"] == "torch"


# ------------------------------------------------------------------ the collection folder
def test_installed_hook_is_found_by_entry_point_and_imports_no_tilake(tmp_path):
    hook = DC.install_hook(tmp_path / "round0")
    code = ("import json, sys; from importlib.metadata import entry_points\n"
            "eps = [e for e in entry_points(group='vllm.general_plugins') if e.name == 'tilake_dump_hook']\n"
            "f = eps[0].load(); f()\n"   # no TILAKE_ROLLOUT_DUMP_DIR: a no-op
            "print(json.dumps([eps[0].value, sorted(m for m in sys.modules if m == 'tilake' or m.startswith('tilake.'))]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILAKE_")}
    r = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path[:0] = [sys.argv[1]]; exec(sys.argv[2])",
                        str(hook), code], env=dict(env, PYTHONPATH=str(hook)), capture_output=True, text=True,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    value, tilake_modules = json.loads(r.stdout)
    assert value == "tilake_dump_hook:register" and tilake_modules == []


def test_empty_or_missing_dumps_are_errors_naming_the_folder(tmp_path):
    rd = tmp_path / "round0"
    with pytest.raises(TilakeError, match="training side dumped nothing for RL step 1"):
        DC.find_train_dump(rd)
    rank = rd / "train" / "step_1" / "actor_compute_log_prob" / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({"task": "tensor", "level": "mix", "data": {}}))
    with pytest.raises(TilakeError, match="dump is empty") as e:
        DC.find_train_dump(rd)
    assert str(rank) in str(e.value)
    with pytest.raises(TilakeError, match="left no record"):
        DC.find_infer_dump(rd)
    (rd / "infer").mkdir()
    (rd / "infer" / "tilake_rollout_dump.json").write_text(json.dumps({"status": "error", "reason": "boom"}))
    with pytest.raises(TilakeError, match="did not dump the prefill: boom"):
        DC.find_infer_dump(rd)


def test_configs_put_load_on_the_stub_side_only(tmp_path):
    stub = tmp_path / "stub.json"
    stub.write_text(json.dumps({"task": "tensor", "level": "mix", "step": [0], "dump_path": "/x",
                                "load": {"path": "/src", "modules": ["Module.a.forward.0"]}}))
    out = DC.write_configs(tmp_path / "r1", "infer", stub)
    tr, inf = (json.loads(out[s].read_text()) for s in ("train", "infer"))
    assert "load" not in tr and tr["task"] == "tensor" and tr["level"] == "mix"
    assert inf["load"]["modules"] == ["Module.a.forward.0"] and inf["dump_path"] == str(tmp_path / "r1" / "infer")
    stub.write_text(json.dumps({"task": "tensor"}))
    with pytest.raises(TilakeError, match="no `load` section"):
        DC.write_configs(tmp_path / "r2", "infer", stub)
