"""Stage 1c/2 of tilake scan: byte-identical backup, idempotent profiler-block injection."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tilake.errors import TilakeError
from tilake.ingest.scan import inject as scan_inject
from tilake.ingest.scan.inject import (
    BLOCK_BEGIN,
    EXPECTED_PROFILER_VALUES,
    backup_script,
    check_writable,
    plan_injection,
    unified_diff,
    write_script,
)
from tilake.ingest.scan.script import parse_script

DATA = Path(__file__).resolve().parents[2] / "data" / "verl_launch"
sys.path.insert(0, str(DATA / "standin"))
from scan_standin import read_args, shim_env  # noqa: E402

SCRIPTS = ["grpo_qwen3_megatron_vllm.sh", "grpo_qwen25_fsdp_vllm.sh"]


def _copy(tmp_path: Path, name: str) -> Path:
    d = tmp_path / "job dir"          # a space in the folder exercises quoting
    d.mkdir(exist_ok=True)
    dst = d / name
    shutil.copy(DATA / name, dst)
    return dst


def test_backup_is_byte_identical_and_reused(tmp_path):
    s = _copy(tmp_path, "grpo_qwen3_megatron_vllm.sh")
    s.write_bytes(s.read_bytes() + "# 中文注释, no final newline".encode())
    os.chmod(s, 0o750)
    b, created = backup_script(s, now=datetime(2026, 1, 2, 3, 4))
    assert created and b.name == s.name + ".bak_20260102_0304"
    assert b.read_bytes() == s.read_bytes() and (b.stat().st_mode & 0o777) == 0o750
    b2, created2 = backup_script(s, now=datetime(2026, 1, 2, 3, 5))
    assert (b2, created2) == (b, False)
    s.write_text("changed\n")
    b3, created3 = backup_script(s, now=datetime(2026, 1, 2, 3, 4))
    assert created3 and b3.name == s.name + ".bak_20260102_0304_2" and b.read_bytes() != b3.read_bytes()


@pytest.mark.parametrize("name", SCRIPTS)
def test_injection_only_adds_and_is_idempotent(name, tmp_path):
    s = _copy(tmp_path, name)
    original = s.read_text()
    p = parse_script(s, env={"HOME": "/h"})
    plan = plan_injection(p, stamp="T", backup_name="x.bak")
    assert plan.changed
    diff = unified_diff(original, plan.new_text, "a", "b")
    body = [ln for ln in diff.splitlines()[2:] if not ln.startswith("@@")]
    removed = [ln[1:] for ln in body if ln.startswith("-")]
    added = [ln[1:] for ln in body if ln.startswith("+")]
    # at most the launch line gains the array inline; nothing else is removed or rewritten
    assert len(removed) <= 1
    for ln in removed:
        assert any(a.replace(' "${PROFILER[@]}"', "") == ln for a in added)
    # removing what was added gives back the original, byte for byte
    stripped = plan.new_text.replace(plan.block, "")
    stripped = re.sub(r' \\\n *"\$\{PROFILER\[@\]\}"| "\$\{PROFILER\[@\]\}"', "", stripped, count=1)
    assert stripped == original
    write_script(s, plan.new_text)
    again = plan_injection(parse_script(s, env={"HOME": "/h"}))
    assert not again.changed and again.new_text == plan.new_text
    assert "tilake profiler block" in again.reason or "already has a profiler configuration" in again.reason


def test_existing_profiler_block_is_left_alone(tmp_path):
    s = _copy(tmp_path, "grpo_qwen3_moe_megatron_prof.sh")
    plan = plan_injection(parse_script(s, env={}))
    assert not plan.changed and plan.new_text == s.read_text()
    assert "already has a profiler configuration" in plan.reason


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
@pytest.mark.parametrize("name", SCRIPTS)
def test_injected_script_passes_profiler_args_through_bash(name, tmp_path):
    s = _copy(tmp_path, name)
    write_script(s, plan_injection(parse_script(s, env={"HOME": "/h"})).new_text)
    out = tmp_path / "argv.bin"
    env = shim_env(tmp_path, STANDIN_MODE="args", STANDIN_ARGS_OUT=str(out))
    r = subprocess.run(["bash", str(s), "user.extra=1"], cwd=s.parent, env=env, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    argv = read_args(out)
    got = dict(a.split("=", 1) for a in argv[1:] if "=" in a and not a.startswith("--"))
    for k, v in EXPECTED_PROFILER_VALUES.items():
        assert got[k] == v, k
    assert got["global_profiler.save_path"] == str(s.parent / "profiler_output")
    assert argv[-1] == "user.extra=1"                  # "$@" still comes last
    assert (s.parent / "profiler_output").is_dir()    # the block created the output folder


def test_read_only_script_is_refused_before_any_change(tmp_path):
    s = _copy(tmp_path, "grpo_qwen3_megatron_vllm.sh")
    before = s.read_bytes()
    os.chmod(s, 0o444)
    with pytest.raises(TilakeError, match="read-only"):
        check_writable(s)
    assert s.read_bytes() == before


def test_read_only_filesystem_is_refused(tmp_path, monkeypatch):
    s = _copy(tmp_path, "grpo_qwen3_megatron_vllm.sh")
    monkeypatch.setattr(scan_inject, "fs_read_only", lambda p: True)
    with pytest.raises(TilakeError, match="read-only filesystem"):
        check_writable(s)


def test_block_marker_and_quoting_of_the_output_dir(tmp_path):
    s = _copy(tmp_path, "grpo_qwen3_megatron_vllm.sh")
    plan = plan_injection(parse_script(s, env={}), stamp="2026-01-01 00:00", backup_name="b")
    assert plan.block.startswith(BLOCK_BEGIN + " (added 2026-01-01 00:00; original kept as b) >>>\n")
    assert f'PROFILER_OUTPUT_DIR=${{PROFILER_OUTPUT_DIR:-"{s.parent}/profiler_output"}}' in plan.block


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")
def test_launch_inside_an_if_block(tmp_path):
    from tilake.pipeline.scan import _output_dir

    s = tmp_path / "s.sh"
    s.write_text('MODEL=/m\nif [ -n "$RUN" ]; then\n    python3 -m verl.trainer.main_ppo \\\n'
                 '        actor_rollout_ref.model.path=$MODEL \\\n'
                 '        actor_rollout_ref.rollout.name=vllm 2>&1 | tee log.txt\nfi\n')
    plan = plan_injection(parse_script(s, env={}))
    assert plan.changed and "\n    PROFILER=(\n        global_profiler.tool=npu\n" in plan.new_text
    assert 'rollout.name=vllm "${PROFILER[@]}" 2>&1 | tee log.txt' in plan.new_text
    write_script(s, plan.new_text)
    again = parse_script(s, env={})
    assert not plan_injection(again).changed
    # the block sits in the if-block (the parser cannot follow it), yet a re-scan finds its output folder
    assert again.profiler["save_path"] == "unknown"
    assert _output_dir(again, False, {}) == tmp_path / "profiler_output"
    out = tmp_path / "argv.bin"
    env = shim_env(tmp_path, STANDIN_MODE="args", STANDIN_ARGS_OUT=str(out), RUN="1")
    r = subprocess.run(["bash", str(s)], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert r.returncode == 0
    got = dict(a.split("=", 1) for a in read_args(out)[1:] if "=" in a)
    assert got["global_profiler.save_path"] == str(tmp_path / "profiler_output")
    assert got["actor_rollout_ref.rollout.profiler.tool_config.npu.discrete"] == "True"
