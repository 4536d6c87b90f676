"""Duplicate captures of one (side, rank) and rollout workers without rank ids (issue 12 items 1, 2).

Inputs: the real torch_npu fixture DBs/text exports of ``fixtures/profiler/msinsight/test/data/pytorch``
(level-0/1/2 DB and text runs of the same 2-rank CNN job side by side), and a worker layout built by
copying those real DBs into the vllm-ascend form (``ascend_pytorch_profiler.db`` without rank suffix,
``profiler_info.json`` with ``rank_id: -1``, one ``<host>_<pid>_<ts>_ascend_pt`` folder per worker beside
``analysis.db`` and ``analyse.done``).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from profiler_helpers import FIXTURE_DB, raw, sqlite_count

from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.pipeline.profile import collect_captures

PYTORCH = "fixtures/profiler/msinsight/test/data/pytorch"
TRANSDATA = ("SELECT count(*) FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId) "
             "JOIN STRING_IDS s ON s.id = c.opType WHERE s.value = 'TransData'")
KERNELS = ("SELECT (SELECT count(*) FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId)) "
           "+ (SELECT count(*) FROM COMMUNICATION_OP)")


def _db(shared_dir: Path, level: str, rank: int) -> Path:
    return (shared_dir / FIXTURE_DB / level / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
            / f"ascend_pytorch_profiler_{rank}.db")


def test_duplicates_of_one_rank_keep_the_level2_db_and_list_the_others(shared_dir):
    caps = collect_captures(shared_dir / PYTORCH)
    assert [(c.side, c.rank, c.kind, c.level) for c in caps] == [
        ("train", 0, "db", "Level2"), ("train", 1, "db", "Level2")]
    r0 = caps[0]
    assert r0.path == _db(shared_dir, "level2", 0)
    # DB over text, then highest level: db L1, db L0, then text L2, L1, L0
    assert [(d.kind, d.level) for d in r0.duplicates] == [
        ("db", "Level1"), ("db", "Level0"), ("text", "Level2"), ("text", "Level1"), ("text", "Level0")]
    assert [(d.kind, d.level) for d in caps[1].duplicates] == [("db", "Level1"), ("db", "Level0")]


def test_duplicates_are_never_summed_counts_equal_one_db(shared_dir, tmp_path):
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "dup", collect_captures(shared_dir / PYTORCH), allow_missing=True, progress=False)
    for rank in (0, 1):
        db = _db(shared_dir, "level2", rank)
        got = raw(lake.root, "kernels", f"rank = {rank}").aggregate(
            "count(*), count(*) FILTER (WHERE op_type = 'TransData')").fetchone()
        assert got == (sqlite_count(db, KERNELS), sqlite_count(db, TRANSDATA)) == (191, 57)
    assert res.kernels == 382  # was 57 × 9 TransData when all nine captures were summed
    cap = dict(zip(raw(lake.root, "captures", "false").columns, raw(lake.root, "captures", "rank = 0").fetchone()))
    ignored = json.loads(cap["duplicates_ignored"])
    assert len(ignored) == 5 and str(_db(shared_dir, "level1", 0)) == ignored[0]
    assert "kept over 5 duplicate capture(s) of train rank 0" in cap["reason"]
    assert "DB over text export, then highest profiler level" in cap["reason"]
    assert raw(lake.root, "captures", "true").aggregate("count(*)").fetchone()[0] == 2


def _worker(root: Path, src: Path, pid: int, ts: str) -> Path:
    """One vllm-ascend worker folder holding a copy of a real fixture DB, as workers write it."""
    pt = root / "agent_loop_rollout_replica_0" / f"node-7_{pid}_{ts}_ascend_pt"
    out = pt / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copyfile(src, out / "ascend_pytorch_profiler.db")
    shutil.copyfile(src.parent / "analysis.db", out / "analysis.db")
    info = json.loads((src.parent.parent / f"profiler_info_{src.stem.rsplit('_', 1)[1]}.json").read_text())
    info["rank_id"] = -1
    (pt / "profiler_info.json").write_text(json.dumps(info))
    (pt / "analyse.done").write_text("")
    return pt


@pytest.fixture()
def workers(shared_dir, tmp_path):
    po = tmp_path / "profiler_output"
    a = _worker(po, _db(shared_dir, "level2", 0), 1111, "20250109102350123")
    b = _worker(po, _db(shared_dir, "level2", 1), 2222, "20250109102350456")
    return po, a, b


def test_rankless_workers_get_their_own_identity(workers):
    po, a, b = workers
    caps = collect_captures(po)
    assert [(c.side, c.rank, c.rank_source, c.worker, c.pid, c.device_id, c.workers) for c in caps] == [
        ("infer", 0, "worker", a.name, 1111, 0, 2), ("infer", 1, "worker", b.name, 2222, 1, 2)]
    assert all(not c.duplicates for c in caps)


def test_rankless_workers_are_counted_per_capture_and_merged(workers, shared_dir, tmp_path):
    po, a, b = workers
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "w", collect_captures(po), allow_missing=True, progress=False)
    per = dict(raw(lake.root, "kernels", "side = 'infer'").aggregate("rank, count(*)").fetchall())
    assert per == {0: sqlite_count(_db(shared_dir, "level2", 0), KERNELS),
                   1: sqlite_count(_db(shared_dir, "level2", 1), KERNELS)} == {0: 191, 1: 191}
    assert "infer: 2 workers merged into the side total (no rank ids; one rank slot each)" in res.notes
    rows = raw(lake.root, "captures", "side = 'infer'").aggregate(
        "rank, worker, pid, device_id, rank_source, reason").order("rank").fetchall()
    assert [r[:5] for r in rows] == [(0, a.name, 1111, 0, "worker"), (1, b.name, 2222, 1, "worker")]
    assert f"folder {a.name}, pid 1111, device 0; rank slot 0, 2 worker(s) merged into the infer total" in rows[0][5]
