"""Profiler steps (issue 12 item 3): markers, kernel → step, common steps across ranks, open tails.

Inputs: the real torch_npu fixture DBs (``fixtures/profiler/msinsight/test/data/pytorch/db/level2``,
``STEP_TIME = (50, …)`` on both ranks) and copies of them whose ``STEP_TIME`` is rewritten to model ranks
that stopped at different points (rank 0 covers steps 50 and 51, rank 1 only step 50 and then keeps
launching: an open tail). Expected counts use msprof-analyze's rule directly on SQLite: a kernel belongs
to the step whose range holds its launching ``CANN_API.startNs``.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from profiler_helpers import FIXTURE_DB, FIXTURE_TEXT, raw

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.ingest.profiler.steps import common_steps, db_step_marks, text_step_marks
from tilake.lake.store import Lake

LAUNCH = """SELECT coalesce(ca.startNs, k.startNs) FROM (
    SELECT t.startNs, t.connectionId FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId)
    UNION ALL SELECT startNs, connectionId FROM COMMUNICATION_OP) k
    LEFT JOIN CANN_API ca ON ca.connectionId = k.connectionId"""


def _src(shared_dir: Path, rank: int) -> Path:
    return (shared_dir / FIXTURE_DB / "level2" / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
            / f"ascend_pytorch_profiler_{rank}.db")


def _launches(db: Path):
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return sorted(r[0] for r in con.execute(LAUNCH)), con.execute("SELECT * FROM STEP_TIME").fetchone()
    finally:
        con.close()


def _copy(shared_dir: Path, root: Path, rank: int, steps) -> Path:
    dst = root / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
    dst.parent.mkdir(parents=True)
    shutil.copyfile(_src(shared_dir, rank), dst)
    con = sqlite3.connect(dst)
    con.execute("DELETE FROM STEP_TIME")
    con.executemany("INSERT INTO STEP_TIME VALUES (?, ?, ?)", steps)
    con.commit()
    con.close()
    return dst


@pytest.fixture()
def split(shared_dir, tmp_path):
    """Rank 0: steps 50 | 51 split at its median launch; rank 1: step 50 ends at its median launch."""
    (l0, (_, s0, e0)), (l1, (_, s1, _e1)) = _launches(_src(shared_dir, 0)), _launches(_src(shared_dir, 1))
    t0, t1 = (l0[95] + l0[96]) // 2, (l1[95] + l1[96]) // 2
    root = tmp_path / "cap"
    _copy(shared_dir, root, 0, [(50, s0, t0), (51, t0 + 1, e0)])
    _copy(shared_dir, root, 1, [(50, s1, t1)])
    n0 = sum(1 for x in l0 if s0 <= x <= t0)
    n1 = sum(1 for x in l1 if s1 <= x <= t1)
    assert all(s0 <= x <= e0 for x in l0) and len(l0) == len(l1) == 191
    return root, n0, n1


def _caps(lake: Lake, run: str):
    cols = raw(lake.root, "captures", "false").columns
    return {r[cols.index("rank")]: dict(zip(cols, r)) for r in raw(lake.root, "captures", f"run_id = '{run}'").fetchall()}


def test_real_db_kernels_all_fall_in_step_50(shared_dir, tmp_path):
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "r", explicit(shared_dir / FIXTURE_DB / "level2", "train"), allow_missing=True,
                         progress=False)
    assert raw(lake.root, "kernels", "true").aggregate("step, count(*)").fetchall() == [(50, 382)]
    caps = _caps(lake, "r")
    assert [(c["step_source"], c["steps"], c["steps_kept"], c["open_tail_kernels"]) for c in caps.values()] == [
        ("STEP_TIME", '{"50": 191}', "[50]", 0)] * 2
    assert res.notes == ["train: steps counted [50] (covered by every rank with step markers: ranks 0, 1)"]
    assert [c["reason"] for c in caps.values()] == ["step(s) [50] counted (STEP_TIME)"] * 2
    assert all(not c.notes for c in res.captures)  # nothing to warn about on the console


def test_profiler_step_rows_stand_in_for_a_missing_step_time(shared_dir, tmp_path):
    db = tmp_path / "a.db"
    shutil.copyfile(_src(shared_dir, 0), db)
    con = sqlite3.connect(db)
    con.execute("DROP TABLE STEP_TIME")
    con.commit()
    con.close()
    marks = db_step_marks(db)
    assert marks.source == "PYTORCH_API ProfilerStep#N"
    assert marks.ranges == [(50, *db_step_marks(_src(shared_dir, 0)).ranges[0][1:])]
    assert marks.ranges[0][1:] == (1736414119633143240, 1736414119776885110)


def test_text_export_steps_from_kernel_details_step_id(shared_dir):
    marks = text_step_marks(shared_dir / FIXTURE_TEXT / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    assert marks.source == "kernel_details.csv Step Id" and marks.steps == [50]


def test_counts_keep_the_steps_every_rank_covers_and_flag_the_open_tail(split, tmp_path):
    root, n0, n1 = split
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "s", explicit(root, "train"), allow_missing=True, progress=False)
    per = dict(raw(lake.root, "kernels", "true").aggregate("rank, count(*)").fetchall())
    assert per == {0: n0, 1: 191}  # rank 0 loses step 51; rank 1 keeps its tail (flagged)
    assert 0 < n0 < 191 and 0 < n1 < 191
    c = _caps(lake, "s")
    assert json.loads(c[0]["steps"]) == {"50": n0, "51": 191 - n0} and c[0]["steps_kept"] == "[50]"
    assert f"step(s) [51] not covered by every rank: {191 - n0} kernel call(s) left out" in c[0]["reason"]
    assert c[0]["kernel_count"] == n0
    assert json.loads(c[1]["steps"]) == {"50": n1} and c[1]["open_tail_kernels"] == 191 - n1
    assert f"open tail: {191 - n1} kernel call(s) launched after step 50 ended" in c[1]["reason"]
    assert "train: steps counted [50] (covered by every rank with step markers: ranks 0, 1)" in res.notes
    by_step = dict(raw(lake.root, "kernels", "rank = 1").aggregate("coalesce(step, -1), count(*)").fetchall())
    assert by_step == {50: n1, -1: 191 - n1}


def test_profiler_step_selects_one_step_and_refuses_a_missing_one(split, tmp_path):
    root, n0, n1 = split
    lake = Lake(tmp_path / "lake")
    ingest_profile(lake, "p", explicit(root, "train"), allow_missing=True, progress=False, profiler_step=50)
    assert dict(raw(lake.root, "kernels", "true").aggregate("rank, count(*)").fetchall()) == {0: n0, 1: n1}
    with pytest.raises(TilakeError, match=r"--profiler-step 51: not captured by train rank 1 \(steps \[50\]\)"):
        ingest_profile(lake, "p2", explicit(root, "train"), allow_missing=True, progress=False, profiler_step=51)


def test_common_steps():
    assert common_steps([[1, 2, 3], [2, 3], []]) == [2, 3]
    assert common_steps([[1], [2]]) == [] and common_steps([]) == []


def test_disjoint_steps_are_all_counted_and_said(shared_dir, tmp_path):
    (_l0, (_, s0, e0)), (_l1, (_, s1, e1)) = _launches(_src(shared_dir, 0)), _launches(_src(shared_dir, 1))
    root = tmp_path / "cap"
    _copy(shared_dir, root, 0, [(50, s0, e0)])
    _copy(shared_dir, root, 1, [(51, s1, e1)])
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "d", explicit(root, "train"), allow_missing=True, progress=False)
    assert dict(raw(lake.root, "kernels", "true").aggregate("rank, count(*)").fetchall()) == {0: 191, 1: 191}
    assert res.notes == ["train: no step is covered by every rank (rank 0: [50]; rank 1: [51]): all steps "
                         "counted; --profiler-step N counts one step"]


def test_host_op_kernel_counts_leave_out_the_kernels_the_step_filter_dropped(split, tmp_path):
    """``host_ops.kernel_count`` counts only kernels still in the lake: rank 0 loses step 51 (its host
    ops launched in step 51 count 0), rank 1 keeps everything (its counts equal an unfiltered ingest)."""
    root, n0, _n1 = split
    lake = Lake(tmp_path / "lake")
    ingest_profile(lake, "h", explicit(root, "train"), allow_missing=True, progress=False)
    linked = dict(raw(lake.root, "kernels", "host_op_id IS NOT NULL").aggregate("rank, count(*)").fetchall())
    counted = dict(raw(lake.root, "host_ops", "true").aggregate("rank, sum(kernel_count)::BIGINT").fetchall())
    assert counted == linked
    assert linked[0] < linked[1]  # rank 0 lost the host-linked kernels of step 51
    per_op = raw(lake.root, "host_ops", "rank = 0").aggregate("host_op_id, kernel_count").fetchall()
    direct = dict(raw(lake.root, "kernels", "rank = 0 AND host_op_id IS NOT NULL")
                  .aggregate("host_op_id, count(*)").fetchall())
    assert {h: n for h, n in per_op if n} == direct
