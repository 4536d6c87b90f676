"""Captures as verl and msprof lay them out: two rollout replicas that both write rank 0 (nested
``agent_loop_rollout_replica_<r>/`` and relocated ``rollout-replica<r>_…``), msprof's ``PROF_*`` folder named
with ``--infer``, and a rank without step markers among step-windowed ranks.

Inputs copy real files: the torch_npu 2.x level-2 DB of ``fixtures/profiler/msinsight/test/data/pytorch/db/level2``
(``STEP_TIME`` step 50, ``profiler_info_0.json`` rank 0), and the real CANN ``msprof_0.db`` of
``fixtures/real_public_2/msinsight_gpt_train_trimmed_msprof_db/v2026-05`` (msprof's own export: CANN tables only,
no ``RANK_DEVICE_MAP``). The layouts are verl's (``verl/utils/profiler/config.py`` ``rollout_trace_dir`` and
``relocate_rollout_traces``: ``global_profiler.relocate_results=True`` moves each replica's files up into
``save_path`` as ``rollout-replica<r>_<name>``).
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest
from profiler_helpers import FIXTURE_DB

from tilake.ingest.profiler.discover import discover, explicit
from tilake.lake.store import Lake
from tilake.pipeline.profile import collect_captures, run_profile

PT = FIXTURE_DB + "/level2/rank0_ascend_pt"
MSPROF = "fixtures/real_public_2/msinsight_gpt_train_trimmed_msprof_db/v2026-05/msprof_0.db"


@pytest.fixture(scope="module")
def src(shared_dir):
    pt = shared_dir / PT
    if not pt.is_dir():
        pytest.skip(f"fixture not found: {pt}")
    return shared_dir


def _pt(src: Path, dst: Path, rank: int = 0) -> Path:
    """A copy of the real level-2 ``rank0_ascend_pt`` folder (DB and profiler_info) as ``dst``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / PT, dst)
    if rank:
        out = dst / "ASCEND_PROFILER_OUTPUT"
        (out / "ascend_pytorch_profiler_0.db").rename(out / f"ascend_pytorch_profiler_{rank}.db")
    return dst


def _health(lake: Lake, side: str):
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    try:
        return con.execute("select rank, rank_source, status, kernel_count, reason from fct_capture_health "
                           "where side = ? order by rank", [side]).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("layout", ["nested", "relocated"])
def test_two_replicas_writing_rank0_are_two_inference_replicas(src, tmp_path, layout):
    root = tmp_path / "po"
    _pt(src, root / "e2e" / "host_1_20250101000000000_ascend_pt")
    for r in (0, 1):
        name = f"host_{2 + r}_2025010100000000{r}_ascend_pt"
        _pt(src, root / (f"agent_loop_rollout_replica_{r}/{name}" if layout == "nested" else f"rollout-replica{r}_{name}"))
    caps = [c for c in collect_captures(root) if c.side == "infer"]
    # both kept (the relocated replica 1 used to be dropped as a duplicate of rank 0), one rank slot each
    assert sorted((c.replica, c.engine_rank, c.rank, c.rank_source) for c in caps) == [
        (0, 0, 0, "replica"), (1, 0, 1, "replica")]
    assert all(not c.duplicates for c in caps)
    lake = Lake(tmp_path / "lake")
    res = run_profile(root, lake, "reps", tmp_path / "out", lang="en", progress=False)
    rows = _health(lake, "infer")
    assert [(r, s, st) for r, s, st, _n, _why in rows] == [(0, "replica", "ok"), (1, "replica", "ok")]
    assert rows[0][3] == rows[1][3] > 0                       # counted per replica, nothing merged or dropped
    md = res.report_path.read_text(encoding="utf-8")
    assert "- inference: 2 inference replicas (each engine repeats rank 0: counted per replica); 2/2 ranks" in md
    assert any("2 inference replicas (0, 1)" in n for n in res.ingest.notes)


def test_relocated_global_rank_names_the_rank(src, tmp_path):
    # tp=2: verl adds -globalrank<g> (replica 1's tp rank 0 → global rank 2)
    root = tmp_path / "po"
    _pt(src, root / "rollout-replica1-globalrank2_host_3_20250101000000001_ascend_pt")
    [c] = discover(root)
    assert (c.side, c.replica, c.rank, c.rank_source, c.role) == ("infer", 1, 2, "global_rank", "rollout replica 1")


def _prof(src: Path, root: Path) -> Path:
    prof = root / "PROF_000001_20231025155331552_GJQPMHLQKHBKEAKB"
    (prof / "mindstudio_profiler_output").mkdir(parents=True)
    shutil.copyfile(src / MSPROF, prof / "mindstudio_profiler_output" / "msprof_20231025155331.db")
    return prof


def test_msprof_prof_folder_found_from_infer(src, tmp_path):
    if not (src / MSPROF).is_file():
        pytest.skip("real msprof_0.db not found")
    prof = _prof(src, tmp_path / "svc")
    for given in (prof, prof / "mindstudio_profiler_output", prof.parent):
        [c] = explicit(given, "infer")
        assert (c.kind, c.side, c.path.name, c.worker) == ("db", "infer", "msprof_20231025155331.db", prof.name)
    root = tmp_path / "po"
    _pt(src, root / "e2e" / "host_1_20250101000000000_ascend_pt")
    lake = Lake(tmp_path / "lake")
    res = run_profile(root, lake, "svc", tmp_path / "out", infer=[prof], lang="en", progress=False)
    assert res.evidence["infer"] == "device"
    [(rank, src_, status, kernels, why)] = _health(lake, "infer")
    assert status == "ok" and kernels > 0 and "msprof export" in why


def _drop_step_marks(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("DROP TABLE IF EXISTS STEP_TIME")
    for table, col in (("PYTORCH_API", "name"), ("MSTX_EVENTS", "message")):
        try:
            con.execute(f"DELETE FROM {table} WHERE {col} IN (SELECT id FROM STRING_IDS WHERE value LIKE 'ProfilerStep#%')")
        except sqlite3.OperationalError:
            pass
    con.commit()
    con.close()


def test_a_rank_without_step_markers_among_windowed_ranks_is_left_out_with_a_line(src, tmp_path):
    root = tmp_path / "po"
    _pt(src, root / "e2e" / "host_1_20250101000000000_ascend_pt")                 # rank 0: STEP_TIME step 50
    r1 = _pt(src, root / "e2e" / "host_2_20250101000000001_ascend_pt", rank=1)    # rank 1: no step markers
    _drop_step_marks(r1 / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_1.db")
    _pt(src, root / "agent_loop_rollout_replica_0" / "host_3_20250101000000002_ascend_pt")
    lake = Lake(tmp_path / "lake")
    res = run_profile(root, lake, "steps", tmp_path / "out", lang="en", progress=False)
    rows = _health(lake, "train")
    assert [(r, st) for r, _s, st, _n, _w in rows] == [(0, "ok"), (1, "evidence_missing")]
    assert rows[1][3] == 0 and "no step markers while train ranks 0 count steps [50]" in rows[1][4]
    assert "left out" in rows[1][4]
    assert any(n.startswith("train: rank 1 left out: no step markers") for n in res.ingest.notes)
    md = res.report_path.read_text(encoding="utf-8")
    assert "- training: 1/2 ranks have usable evidence" in md
