"""Invalid rows in a profiler DB (issue #12 item 5): each kind refused with one line, or kept and counted.

Inputs: a DB written by :mod:`tilake.synth` in the real torch_npu schema (2025-01 layout of
``../shared/fixtures/profiler/msinsight`` level-1 DBs), then edited the way the reproducers
``../shared/fixtures/reliability/{db-silent-bad-keys,db-cryptic-errors}`` and ``bugs/BR-24`` edit it.
"""
from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from profiler_helpers import lake_state, llm_pair
from profiler_helpers import raw as _raw

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.synth.population import JobConfig, infer_population, train_population


def raw(root, table, where="true"):
    """Rows of a raw table as dicts."""
    rel = _raw(root, table, where)
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]

ONE = JobConfig(layers=1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("rows")
    info = llm_pair(root / "cap", train_population(ONE), infer_population(ONE))
    return root, info


def _copy(pair, tmp_path, edit):
    root, info = pair
    shutil.copytree(root / "cap", tmp_path / "cap")
    db = next((tmp_path / "cap" / "train").rglob("*.db"))
    c = sqlite3.connect(db)
    edit(c)
    c.commit()
    c.close()
    return db, explicit(tmp_path / "cap" / "train", "train") + explicit(tmp_path / "cap" / "infer", "infer")


def _recreate(c, table, drop=None):
    cols = [(r[1], r[2]) for r in c.execute(f"pragma table_info({table})") if r[1] != drop]
    c.execute(f"ALTER TABLE {table} RENAME TO _o")
    c.execute(f"CREATE TABLE {table} ({', '.join(n + ' ' + t for n, t in cols)})")
    c.execute(f"INSERT INTO {table} SELECT {', '.join(n for n, _ in cols)} FROM _o")
    c.execute("DROP TABLE _o")


def _refused(tmp_path, caps, db, expect):
    lake = Lake(tmp_path / "lake")
    before = lake_state(lake.root)
    with pytest.raises(TilakeError) as ei:
        ingest_profile(lake, "bad", caps, progress=False)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith(str(db)) and expect in msg, msg
    assert lake_state(lake.root) == before
    return msg


def test_no_string_ids_table(pair, tmp_path):
    db, caps = _copy(pair, tmp_path, lambda c: c.execute("DROP TABLE STRING_IDS"))
    _refused(tmp_path, caps, db, "no STRING_IDS table: kernel names and op types")


def test_no_kernel_name_column(pair, tmp_path):
    db, caps = _copy(pair, tmp_path, lambda c: _recreate(c, "COMPUTE_TASK_INFO", "name"))
    _refused(tmp_path, caps, db, "COMPUTE_TASK_INFO has no name column")


def test_string_ids_with_two_values(pair, tmp_path):
    def edit(c):
        _recreate(c, "STRING_IDS")
        c.execute("INSERT INTO STRING_IDS SELECT id, value || '_dup' FROM STRING_IDS")
    db, caps = _copy(pair, tmp_path, edit)
    n = pair[1]["train"]["table_rows"]["STRING_IDS"]
    msg = _refused(tmp_path, caps, db, f"STRING_IDS: {n} ids have more than one value (id 0:")
    assert "names cannot be decoded unambiguously" in msg


def test_string_ids_repeated_same_value_kept_once(pair, tmp_path):
    def edit(c):
        _recreate(c, "STRING_IDS")
        c.execute("INSERT INTO STRING_IDS SELECT id, value FROM STRING_IDS WHERE id < 10")
    _db, caps = _copy(pair, tmp_path, edit)
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "r", caps, progress=False)
    assert res.captures[0].kernels == pair[1]["train"]["kernels"]
    row = raw(lake.root, "captures", "side = 'train'")[0]
    assert json.loads(row["invalid_rows"]) == {"STRING_IDS repeated ids (same value, kept once)": 10}


def test_compute_task_info_rows_repeated(pair, tmp_path):
    def edit(c):
        _recreate(c, "COMPUTE_TASK_INFO")
        c.execute("INSERT INTO COMPUTE_TASK_INFO SELECT * FROM COMPUTE_TASK_INFO")
    _db, caps = _copy(pair, tmp_path, edit)
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "r", caps, progress=False)
    info = pair[1]["train"]
    assert res.captures[0].kernels == info["kernels"]  # not doubled
    assert json.loads(raw(lake.root, "captures", "side = 'train'")[0]["invalid_rows"]) == {
        "COMPUTE_TASK_INFO repeated rows (kept once)": info["compute_kernels"]}


def test_compute_task_info_two_rows_for_one_task(pair, tmp_path):
    def edit(c):
        _recreate(c, "COMPUTE_TASK_INFO")
        gid = c.execute("SELECT min(globalTaskId) FROM COMPUTE_TASK_INFO").fetchone()[0]
        cols = [r[1] for r in c.execute("pragma table_info(COMPUTE_TASK_INFO)")]
        sel = ", ".join("blockDim + 1" if x == "blockDim" else x for x in cols)
        c.execute(f"INSERT INTO COMPUTE_TASK_INFO SELECT {sel} FROM COMPUTE_TASK_INFO WHERE globalTaskId = ?", (gid,))
    db, caps = _copy(pair, tmp_path, edit)
    _refused(tmp_path, caps, db, "COMPUTE_TASK_INFO: 1 globalTaskIds have two different rows (e.g. globalTaskId")


def test_cut_capture_br24(pair, tmp_path):
    """BR-24's edit: session end NULL, the last 3 compute kernels with end < start (2) and end NULL (1)."""
    state = {}

    def edit(c):
        c.execute("UPDATE SESSION_TIME_INFO SET endTimeNs = NULL")
        last = [r[0] for r in c.execute("SELECT t.rowid FROM TASK t JOIN COMPUTE_TASK_INFO k USING (globalTaskId) "
                                        "ORDER BY t.startNs DESC LIMIT 3")]
        c.execute("UPDATE TASK SET endNs = startNs - 500000 WHERE rowid = ?", (last[0],))
        c.execute("UPDATE TASK SET endNs = startNs - 1 WHERE rowid = ?", (last[1],))
        c.execute("UPDATE TASK SET endNs = NULL WHERE rowid = ?", (last[2],))
        state["end"] = c.execute("SELECT max(endNs) FROM TASK WHERE endNs >= startNs").fetchone()[0]
    _db, caps = _copy(pair, tmp_path, edit)
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "r", caps, progress=False)
    info = pair[1]["train"]
    assert res.captures[0].status == "ok" and res.captures[0].kernels == info["kernels"]
    # the invalid-rows note comes first; the step note (synthetic DBs carry STEP_TIME step 1) follows it
    assert res.captures[0].reason == ("3 kernels with invalid times kept for the kernel set, excluded from timings "
                                      "(TASK.endNs < startNs: 2, TASK.endNs NULL: 1); step(s) [1] counted (STEP_TIME)")
    cap = raw(lake.root, "captures", "side = 'train'")[0]
    assert cap["truncated"] is True and cap["session_end_ns"] == state["end"]
    ks = raw(lake.root, "kernels", "side = 'train'")
    assert sum(k["dur_ns"] is None for k in ks) == 3 and min(k["dur_ns"] for k in ks if k["dur_ns"] is not None) > 0
    assert sum(k["end_ns"] is None for k in ks) == 3 and all(k["start_ns"] for k in ks)


def test_int64_extreme_times_counted_not_overflowing(pair, tmp_path):
    """db-cryptic-errors ``timestamps_overflow``: DuckDB said "Overflow in subtraction of INT64"."""
    _db, caps = _copy(pair, tmp_path, lambda c: c.execute(
        "UPDATE TASK SET startNs = 9223372036854775807, endNs = -9223372036854775808 WHERE rowid % 2 = 0"))
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "r", caps, progress=False)
    bad = json.loads(raw(lake.root, "captures", "side = 'train'")[0]["invalid_rows"])
    ks = raw(lake.root, "kernels", "side = 'train' AND global_task_id IS NOT NULL")
    assert bad == {"TASK.endNs < startNs": sum(k["dur_ns"] is None for k in ks)} and 0 < bad["TASK.endNs < startNs"] < len(ks)
    assert res.captures[0].kernels == pair[1]["train"]["kernels"]


def test_non_utf8_string_named(pair, tmp_path):
    """db-cryptic-errors ``non_utf8_kernel_name``: DuckDB said "Cannot create a string of size …"."""
    state = {}

    def edit(c):
        i = c.execute("SELECT name FROM COMPUTE_TASK_INFO GROUP BY name ORDER BY name LIMIT 1").fetchone()[0]
        c.execute("UPDATE STRING_IDS SET value = CAST(x'fffec328' AS TEXT) || value WHERE id = ?", (i,))
        state["id"] = i
    db, caps = _copy(pair, tmp_path, edit)
    _refused(tmp_path, caps, db, f"STRING_IDS.value for id {state['id']} is not valid UTF-8 text")
