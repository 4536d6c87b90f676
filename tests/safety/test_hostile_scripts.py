"""Hostile launch scripts for ``tilake scan`` stage 1 (issue 33): bounded work and one line, never a traceback.
Every script is generated here; timings are not asserted (bench/bench_scan_parse.py prints them)."""
from __future__ import annotations

import pytest

from tilake.errors import TilakeError
from tilake.ingest.scan.inject import plan_injection, write_script
from tilake.ingest.scan.script import parse_script

LAUNCH = "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m/Qwen2-7B a.b=$A\n"


@pytest.mark.parametrize("body", [
    "if true; then\n" * 2000 + LAUNCH + "fi\n" * 2000,
    "(" * 2000 + LAUNCH.strip() + ")" * 2000 + "\n",
    "A=" + "$(" * 1500 + "echo" + ")" * 1500 + "\n" + LAUNCH,
    "A=" + "${X:-" * 1500 + "x" + "}" * 1500 + "\n" + LAUNCH,
    "A=$((" + "(" * 1500 + "1" + ")" * 1500 + "))\n" + LAUNCH,
], ids=["if", "subshell", "cmdsubst", "default", "arith"])
def test_deep_nesting_is_one_line(tmp_path, body):
    p = tmp_path / "run.sh"
    p.write_text(body)
    with pytest.raises(TilakeError) as ei:
        parse_script(p, env={})
    msg = str(ei.value)
    assert str(p) in msg and ("nesting deeper than" in msg or "syntax error" in msg), msg


def test_doubling_value_is_unknown_not_gigabytes(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text("A=xxxxxxxxxxxxxxxx\n" + 'A="$A$A"\n' * 40 + LAUNCH)
    got = parse_script(p, env={})
    assert "longer than 1048576 characters" in got.launch.overrides["a.b"].reason
    assert got.config["model_path"] == "/m/Qwen2-7B"


@pytest.mark.parametrize("word", ["$'\\x'", "$'\\N{nope}'"])
def test_bad_ansi_c_escape_is_unknown(tmp_path, word):
    p = tmp_path / "run.sh"
    p.write_text(f"A={word}\n" + LAUNCH)
    assert "not evaluated" in parse_script(p, env={}).launch.overrides["a.b"].reason


def test_many_assignments_parse(tmp_path):
    n = 20_000   # 200,000 in bench/bench_scan_parse.py
    p = tmp_path / "run.sh"
    p.write_text("".join(f"V{i}=value_{i}\n" for i in range(n)) + "A=$V19999\n" + LAUNCH)
    got = parse_script(p, env={})
    assert got.launch.overrides["a.b"] == "value_19999" and got.launch.line == n + 2


def test_gbk_comment_is_read_and_kept_byte_for_byte(tmp_path):
    p = tmp_path / "run.sh"
    comment = "# 训练脚本：Qwen2 模型\n".encode("gbk")
    p.write_bytes(b"#!/bin/bash\n" + comment + b"MODEL=/m/Qwen2-7B\n"
                  b"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL\n")
    got = parse_script(p, env={})
    assert got.config["model_path"] == "/m/Qwen2-7B"
    assert any("line(s) 2: bytes that are not UTF-8" in w for w in got.warnings), got.warnings
    plan = plan_injection(got, stamp="s", backup_name="b")
    write_script(p, plan.new_text)
    data = p.read_bytes()
    assert comment in data and b"PROFILER" in data
    assert parse_script(p, env={}).profiler["present"]
