"""Capture identity in discovery: rank sources, pids, role folders, duplicates vs distinct processes.

Layouts follow torch_npu's ``<host>_<pid>_<timestamp>_ascend_pt`` naming (reference §3.1) and verl's
role/replica folders; DB files are copies of the real fixture DB
``fixtures/profiler/msinsight/test/data/pytorch/db/level2/rank0_ascend_pt/…/ascend_pytorch_profiler_0.db``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from profiler_helpers import FIXTURE_DB

from tilake.cli import main
from tilake.ingest.profiler.discover import Capture, assign_worker_ranks, dedupe, device_of, discover, pid_of, role_of

SRC = FIXTURE_DB + "/level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"


def _pt(root: Path, rel: str, src: Path, db_name: str = "ascend_pytorch_profiler_0.db", info=None) -> Path:
    pt = root / rel
    (pt / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    shutil.copyfile(src, pt / "ASCEND_PROFILER_OUTPUT" / db_name)
    if info is not None:
        (pt / "profiler_info.json").write_text(json.dumps(info))
    return pt


def test_pid_role_and_device():
    assert pid_of(Path("node-7_1111_20250109102350123_ascend_pt")) == 1111
    assert pid_of(Path("my_host_name_42_20250109102350123_ascend_pt")) == 42
    assert pid_of(Path("rank0_ascend_pt")) is None and pid_of(None) is None
    assert role_of(["agent_loop_rollout_replica_1", "x"]) == "agent_loop_rollout_replica_1"
    assert role_of(["e2e"]) == "" and role_of(["level2", "db"]) == ""  # e2e holds every training rank


def test_device_of_reads_rank_device_map(shared_dir):
    assert device_of(shared_dir / SRC) == 0
    assert device_of(shared_dir / SRC.replace("rank0", "rank1").replace("_0.db", "_1.db")) == 1


def test_replicas_and_roles_with_the_same_rank_are_not_duplicates(shared_dir, tmp_path):
    src = shared_dir / SRC
    _pt(tmp_path, "agent_loop_rollout_replica_0/h_1_20250101000000000_ascend_pt", src)
    _pt(tmp_path, "agent_loop_rollout_replica_1/h_2_20250101000000000_ascend_pt", src)
    _pt(tmp_path, "actor_update/h_3_20250101000000000_ascend_pt", src)
    _pt(tmp_path, "ref_compute_log_prob/h_4_20250101000000000_ascend_pt", src)
    caps = dedupe(discover(tmp_path))
    assert sorted((c.side, c.rank, c.role, c.pid, len(c.duplicates)) for c in caps) == [
        ("infer", 0, "agent_loop_rollout_replica_0", 1, 0), ("infer", 0, "agent_loop_rollout_replica_1", 2, 0),
        ("train", 0, "actor_update", 3, 0), ("train", 0, "ref_compute_log_prob", 4, 0)]


def test_same_rank_twice_in_one_role_keeps_the_latest_of_equal_level(shared_dir, tmp_path):
    src = shared_dir / SRC
    info = json.loads((src.parent.parent / "profiler_info_0.json").read_text())
    old = dict(info, end_info={"collectionTimeEnd": 1})
    new = dict(info, end_info={"collectionTimeEnd": 2})
    _pt(tmp_path, "e2e/h_1_20250101000000000_ascend_pt", src, info=old)
    b = _pt(tmp_path, "e2e/h_1_20250102000000000_ascend_pt", src, info=new)
    caps = dedupe(discover(tmp_path))
    assert len(caps) == 1 and caps[0].pt_dir == b and caps[0].level == "Level2"
    assert [d.pt_dir.name for d in caps[0].duplicates] == ["h_1_20250101000000000_ascend_pt"]


def test_rank_id_minus_one_has_no_rank_until_workers_are_numbered(shared_dir, tmp_path):
    src = shared_dir / SRC
    info = {"rank_id": -1, "config": {"experimental_config": {"_profiler_level": "Level1"}}}
    _pt(tmp_path, "agent_loop_rollout_replica_0/h_9_20250101000000000_ascend_pt", src,
        "ascend_pytorch_profiler.db", info)
    (c,) = discover(tmp_path)
    assert (c.rank_source, c.rankless, c.worker, c.pid, c.device_id) == (
        "none", True, "h_9_20250101000000000_ascend_pt", 9, 0)
    ranked = Capture("infer", 3, "db", src, rank_source="file_name")
    assign_worker_ranks([ranked, c])
    assert (c.rank, c.rank_source, c.workers) == (4, "worker", 1)  # slot after the side's real ranks


def test_cli_ingest_prints_the_kept_capture_and_steps(shared_dir, tmp_path):
    out = CliRunner().invoke(main, ["ingest", str(shared_dir / "fixtures/profiler/msinsight/test/data/pytorch"),
                                    "--lake", str(tmp_path / "lake"), "--allow-missing", "--profiler-step", "50"])
    assert out.exit_code == 0, out.output
    assert "train rank 0: ok kernels=191" in out.output and "kept over 5 duplicate capture(s)" in out.output
    assert "train: steps counted [50] (selected; ranks 0, 1)" in out.output
