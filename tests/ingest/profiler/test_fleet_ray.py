"""``--ray`` ingest (issue 24): one Ray task per capture on a local Ray started and stopped here.

Inputs: synthetic verl ``profiler_output/`` trees of the real torch_npu DB schema (``tilake.synth``:
DDL copied from the real fixture DBs; 3 training ranks + 2 rollout replicas that both say rank 0, as
vllm-ascend workers do). Checks: the lake rows of a Ray ingest equal those of the threaded ingest
(every profile table, every column but ``runs.created_at``); a worker killed mid-ingest (its task
wrote its Parquet files, then ``os._exit``) fails the ingest naming the capture and leaves the lake
byte-for-byte as it was; the completeness check refuses a staged file no task reported. Skipped
when ray is not importable. Without ray, ``--ray`` gives one error line with the install command.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.lake import schema
from tilake.lake.duck import connect
from tilake.lake.store import Lake, raw_source


def _lake_files(lake: Lake) -> dict:
    """Every file under the lake (path → sha256), the lock file aside."""
    return {str(p.relative_to(lake.root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(lake.root.rglob("*")) if p.is_file() and p.name != ".lock"}


def _rows_equal(a: Lake, b: Lake) -> dict:
    """Rows per profile table, after checking both lakes hold the same multiset of rows."""
    con = connect()
    counts = {}
    try:
        for t in schema.PROFILE_TABLES:
            cols = ", ".join(f'"{c}"' for c, _ in schema.TABLES[t] if c != "created_at")
            qa, qb = f"SELECT {cols} FROM {raw_source(a, t)}", f"SELECT {cols} FROM {raw_source(b, t)}"
            for x, y in ((qa, qb), (qb, qa)):
                diff = con.execute(f"SELECT count(*) FROM ({x} EXCEPT ALL {y})").fetchone()[0]
                assert diff == 0, f"{t}: {diff} rows differ between the threaded and the Ray ingest"
            counts[t] = con.execute(f"SELECT count(*) FROM ({qa})").fetchone()[0]
    finally:
        con.close()
    return counts


@pytest.fixture(autouse=True)
def _no_ray_env(monkeypatch):
    """``--ray`` sets ``$TILAKE_RAY`` for the process; restore it after each test."""
    monkeypatch.setenv("TILAKE_RAY", "")


def test_ray_missing_gives_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)   # import ray → ImportError
    po = tmp_path / "po"
    po.mkdir()
    r = CliRunner().invoke(main, ["ingest", str(po), "--lake", str(tmp_path / "lake"), "--ray"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --ray needs the ray package"), r.output
    assert "pip install '.[ray]'" in lines[0]
    assert not (tmp_path / "lake").exists()


def test_ray_value_that_is_a_folder_is_refused(tmp_path):
    r = CliRunner().invoke(main, ["ingest", "--ray", str(tmp_path), "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 2 and "give auto, local or HOST:PORT" in r.output, r.output


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def profiler_output(tmp_path_factory):
    from tilake.synth import JobConfig, make_profiler_output

    root = tmp_path_factory.mktemp("fleet") / "profiler_output"
    make_profiler_output(root, train_ranks=3, infer_replicas=2, job=JobConfig(layers=2))
    return root


def test_ray_rows_equal_threaded(local_ray, profiler_output, tmp_path):
    from tilake.ingest.profiler.fleet import ray_fleet
    from tilake.ingest.profiler.load import ingest_profile
    from tilake.pipeline.profile import find_captures, ingest_command, reduce_captures

    threaded, on_ray = Lake(tmp_path / "threaded"), Lake(tmp_path / "ray")
    a = ingest_command(profiler_output, threaded, "fleet-run", progress=False)
    b = ingest_command(profiler_output, on_ray, "fleet-run", progress=False, ray="auto")
    assert b.kernels == a.kernels > 0
    assert [c.status for c in b.captures] == [c.status for c in a.captures]
    counts = _rows_equal(threaded, on_ray)
    assert counts["captures"] == 5 and counts["kernels"] == a.kernels
    assert not (on_ray.root / ".staging").exists() or not any((on_ray.root / ".staging").iterdir())
    # the tasks ran in Ray worker processes, on the one node, with the threaded path's memory share
    with ray_fleet("auto") as fleet:
        caps = reduce_captures(fleet.probe(lambda present_only: find_captures(profiler_output,
                                                                            present_only=present_only)))
        ingest_profile(Lake(tmp_path / "ray2"), "fleet-run", caps, progress=False, fleet=fleet)
    assert len(fleet.stats) == 5 and all(s["pid"] != os.getpid() for s in fleet.stats)
    plan = next(iter(fleet.nodes.values()))
    assert plan.cpus == 2 and {s["memory"] for s in fleet.stats} == {plan.memory}
    assert all(fleet.placement(c)[0] == plan.node_id for c in caps)   # hard affinity: only node that sees it


def test_killed_worker_leaves_lake_unchanged(local_ray, profiler_output, tmp_path):
    from tilake.ingest.profiler.fleet import _ingest_task, ray_fleet
    from tilake.ingest.profiler.load import ingest_profile
    from tilake.pipeline.profile import find_captures, ingest_command, reduce_captures

    lake = Lake(tmp_path / "lake")
    ingest_command(profiler_output, lake, "fleet-run", progress=False)   # the run as it was
    before = _lake_files(lake)

    def killer(*args):
        out = _ingest_task(*args)        # its Parquet files are written into staging ...
        if args[4] == 1:                 # ... then the worker of capture 1 dies
            os._exit(1)
        return out

    with ray_fleet("auto") as fleet:
        fleet.task_fn = killer
        caps = reduce_captures(fleet.probe(lambda present_only: find_captures(profiler_output,
                                                                            present_only=present_only)))
        with pytest.raises(TilakeError) as err:
            ingest_profile(lake, "fleet-run", caps, progress=False, fleet=fleet)
    msg = str(err.value)
    assert f"{caps[1].side} rank {caps[1].rank} ({caps[1].path})" in msg and "lost" in msg, msg
    assert _lake_files(lake) == before


def test_unreported_staged_file_fails(local_ray, profiler_output, tmp_path):
    from tilake.ingest.profiler.fleet import _ingest_task, ray_fleet
    from tilake.ingest.profiler.load import ingest_profile
    from tilake.pipeline.profile import find_captures, reduce_captures

    def stray(*args):
        out = _ingest_task(*args)
        if args[4] == 0 and out["files"]:   # a second copy of a file no task reports
            src = Path(out["files"][0][0])
            (src.parent / "part-zombie.parquet").write_bytes(src.read_bytes())
        return out

    lake = Lake(tmp_path / "lake")
    with ray_fleet("auto") as fleet:
        fleet.task_fn = stray
        caps = reduce_captures(fleet.probe(lambda present_only: find_captures(profiler_output,
                                                                            present_only=present_only)))
        with pytest.raises(TilakeError, match="written by no finished Ray task"):
            ingest_profile(lake, "fleet-run", caps, progress=False, fleet=fleet)
    assert not (lake.raw / "kernels" / "run_id=fleet-run").exists()


def test_named_path_on_no_node(local_ray, tmp_path):
    from tilake.pipeline.profile import ingest_command

    with pytest.raises(TilakeError, match=r"does not exist on any of the 1 Ray node\(s\)"):
        ingest_command(tmp_path / "nope", Lake(tmp_path / "lake"), "r", progress=False, ray="auto")
    assert not (tmp_path / "lake").exists()


def test_placement_rules():
    """Hard affinity where one node sees the file, soft to the named host on shared storage, Ray's
    default where every node sees it and no host is named (pure: no Ray needed)."""
    from tilake.ingest.profiler.discover import Capture
    from tilake.ingest.profiler.fleet import NodePlan, RayFleet, host_of

    nodes = {n: NodePlan(n, h, ip, 8, "2GiB", 8, "256MiB", 1)
             for n, h, ip in (("n1", "node-1.cluster", "10.0.0.1"), ("n2", "node-2", "10.0.0.2"))}
    f = RayFleet(nodes=nodes)
    local = Capture("train", 0, "db", Path("/local/a.db"))
    shared_named = Capture("train", 1, "db", Path("/nfs/b.db"))
    shared_anon = Capture("train", 2, "db", Path("/nfs/c.db"))
    f.seen = {"/local/a.db": ["n2"], "/nfs/b.db": ["n1", "n2"], "/nfs/c.db": ["n1", "n2"]}
    f.hosts = {"/local/a.db": "elsewhere", "/nfs/b.db": "node-1", "/nfs/c.db": None}
    assert f.placement(local)[:2] == ("n2", False)
    assert f.placement(shared_named)[:2] == ("n1", True)      # short name matches node-1.cluster
    assert f.placement(shared_anon)[:2] == (None, True)
    pt = Path("/x/e2e/worker-7.dc_3217657_20251129080000000_ascend_pt")
    assert host_of(Capture("train", 0, "db", pt / "ASCEND_PROFILER_OUTPUT" / "a.db", pt_dir=pt)) == "worker-7.dc"
