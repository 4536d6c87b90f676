"""Fault injection: every write command, killed at each named step of its commit (SIGKILL) or interrupted
there (SIGINT, SIGTERM), leaves the lake exactly in its old state or exactly in its new one.

The writer runs in a subprocess with ``TILAKE_FAULT_AT=<step>[:<signal>]`` (:data:`tilake.settings.FAULT_AT`):
it sends itself the signal when its commit reaches that step (:data:`tilake.lake.commit.STEPS`). Then the lake
is opened again (a reader first, which completes a sealed commit, or a writer's door) and its rows for the run,
per raw table, must equal the old or the new state's, with nothing missing for ``tilake check``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.lake import schema
from tilake.lake.check import check_lake
from tilake.lake.duck import connect, sql_str
from tilake.lake.registry import list_runs
from tilake.lake.store import Lake
from tilake.synth import JobConfig, make_profiler_output

RUN = "r1"


def _state(root: Path) -> dict:
    """``{table: rows of RUN}`` (tables with rows only) plus the runs the registry lists (read first: the
    registry is a reader of the lake and completes a commit a killed writer sealed)."""
    registry = tuple(sorted(r["run_id"] for r in list_runs(Lake(root), source="raw")))
    con = connect()
    out = {}
    try:
        for t in schema.TABLES:
            part = root / "raw" / t / f"run_id={RUN}"
            files = sorted(str(f) for f in part.rglob("*.parquet")) if part.is_dir() else []
            if files:
                src = "[" + ", ".join(sql_str(f) for f in files) + "]"
                out[t] = con.execute(f"SELECT count(*) FROM read_parquet({src}, hive_partitioning=false)").fetchone()[0]
    finally:
        con.close()
    out["registry"] = registry
    return out


def _cli(*args) -> None:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """Run ``r1`` ingested from a 1-layer capture; a 2-layer capture (``po2``) to re-ingest it from."""
    d = tmp_path_factory.mktemp("faults")
    make_profiler_output(d / "po1", job=JobConfig(layers=1), train_ranks=1)
    make_profiler_output(d / "po2", job=JobConfig(layers=2), train_ranks=1)
    _cli("ingest", d / "po1", "--run-id", RUN, "--lake", d / "lake")
    _cli("ingest", d / "po1", "--run-id", "r0", "--lake", d / "lake")   # a neighbour that must never change
    return {"dir": d, "lake": d / "lake"}


def _copy(base: dict, tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(base["lake"], dst, symlinks=True)
    return dst


def _kill_run(args, lake: Path, fault: str) -> int:
    env = dict(os.environ, TILAKE_FAULT_AT=fault, TILAKE_LOCK_WAIT="0")
    p = subprocess.run([sys.executable, "-m", "tilake.cli", *[str(a) for a in args], "--lake", str(lake)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode


COMMANDS = {
    "reingest": lambda b: ["ingest", b["dir"] / "po2", "--run-id", RUN],
    "rm": lambda b: ["runs", "rm", RUN, "--no-build"],
    "compact": lambda b: ["runs", "compact", RUN],
}
# commit steps: before the journal, sealed, after renames 0/1/5 (asides and ins interleave), all made, removed
FAULTS = ["staged", "sealed", "op0", "op1", "op5", "applied", "done", "sealed:INT", "op1:TERM"]
SHORT = ["staged", "sealed", "op1", "done", "op0:INT"]     # rm and compact: fewer steps (< 60 s in all)
CASES = [(n, f) for n in COMMANDS for f in (FAULTS if n == "reingest" else SHORT)]


@pytest.fixture(scope="module")
def expected(base, tmp_path_factory) -> dict:
    """Old and new state of each command (run in-process without a fault)."""
    tmp = tmp_path_factory.mktemp("expected")
    old = _state(base["lake"])
    out = {}
    for name, args in COMMANDS.items():
        lake = _copy(base, tmp, name)
        _cli(*args(base), "--lake", lake)
        out[name] = (old, _state(lake))
    assert out["reingest"][1] != old and out["rm"][1] != old       # the states differ: the test can tell them apart
    assert "kernels" not in out["rm"][1] and RUN not in out["rm"][1]["registry"]
    return out


@pytest.mark.parametrize("name,fault", CASES)
def test_killed_commit_leaves_old_or_new(base, expected, tmp_path, name, fault):
    lake = _copy(base, tmp_path, "lake")
    rc = _kill_run(COMMANDS[name](base), lake, fault)
    killed = rc == -signal.SIGKILL
    assert killed or ":" in fault or rc == 0, rc
    old, new = expected[name]
    got = _state(lake)              # a reader first: it completes a sealed commit (settle)
    assert got in (old, new), (fault, got)
    if fault in ("op0", "op1", "op5", "applied", "done", "sealed") or ":" in fault:
        assert got == new, fault    # sealed before the kill: rolled forward; a signal waits for the commit
    if ":" in fault:
        assert rc != 0              # interrupted: the command still says so, after committing
    with Lake(lake).writing():      # the next writer's door: nothing left to complete or sweep
        pass
    assert not (lake / ".commit.json").exists() and not any((lake / ".staging").glob("*"))
    assert check_lake(Lake(lake)).problems == []
    assert _state(lake) == got


def test_killed_dump_analysis_leaves_old_or_new(base, pair, tmp_path):
    """``dumps analyze --run-id`` adds the dump tables of the run in one commit (the registry's dump_runs too)."""
    train, infer, mp = pair
    args = ["dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
            "--run-id", RUN]
    ref = _copy(base, tmp_path, "ref")
    old = _state(ref)
    _cli(*args, "--out", tmp_path / "o-ref", "--lake", ref)
    new = _state(ref)
    assert new != old and "tensor_stats" in new and "tensor_stats" not in old
    for fault in ("staged", "op0", "op3", "sealed:TERM"):
        lake = _copy(base, tmp_path, f"lake-{fault.replace(':', '-')}")
        _kill_run([*args, "--out", tmp_path / f"o-{fault.replace(':', '-')}"], lake, fault)
        got = _state(lake)
        assert got in (old, new), (fault, got)
        assert got == (old if fault == "staged" else new), fault
        assert check_lake(Lake(lake)).problems == []


def test_concurrent_ingests_all_land(base, tmp_path):
    """Four ingests started at once into one new lake: each waits for the lock in turn, all four runs land."""
    lake = tmp_path / "lake"
    env = dict(os.environ, TILAKE_LOCK_WAIT="120")
    env.pop("TILAKE_FAULT_AT", None)
    procs = [subprocess.Popen([sys.executable, "-m", "tilake.cli", "ingest", str(base["dir"] / "po1"),
                               "--run-id", f"c{i}", "--lake", str(lake)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    errs = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    assert any("waiting for the lake lock held by pid" in e for e in errs)   # the wait is shown
    assert sorted(r["run_id"] for r in list_runs(Lake(lake), source="raw")) == ["c0", "c1", "c2", "c3"]
    assert check_lake(Lake(lake)).problems == []


def test_a_second_writer_waits_then_gives_up_with_one_line(base, tmp_path):
    lake = _copy(base, tmp_path, "lake")
    with Lake(lake).locked(wait=0):
        p = subprocess.run([sys.executable, "-m", "tilake.cli", "runs", "rm", RUN, "--no-build", "--wait", "0.5",
                            "--lake", str(lake)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith(f"waiting for the lake lock held by pid {os.getpid()}")
    assert lines[-1].startswith("error:") and f"pid {os.getpid()}" in lines[-1] and "waited 0.5 s" in lines[-1]
    assert RUN in _state(lake)["registry"]


@pytest.mark.parametrize("delay", [0.8, 1.6, 2.4])
def test_reingest_killed_after_a_delay_leaves_old_or_new(base, expected, tmp_path, delay):
    """The same without the hook: SIGKILL after ``delay`` seconds, wherever the ingest is then."""
    lake = _copy(base, tmp_path, "lake")
    env = dict(os.environ, TILAKE_LOCK_WAIT="0")
    env.pop("TILAKE_FAULT_AT", None)
    p = subprocess.Popen([sys.executable, "-m", "tilake.cli", *map(str, COMMANDS["reingest"](base)), "--lake", str(lake)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    old, new = expected["reingest"]
    assert _state(lake) in (old, new)
    with Lake(lake).writing():
        pass
    assert check_lake(Lake(lake)).problems == []
