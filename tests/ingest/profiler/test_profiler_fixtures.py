"""Ingest of the real torch_npu profiler fixtures (../shared/fixtures/profiler, a CNN job)."""
from __future__ import annotations

import csv

import pytest
from profiler_helpers import FIXTURE_DB, FIXTURE_TEXT, raw, sqlite_count, tree_digest

from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake

LEVELS = ["level0", "level1", "level2"]


@pytest.fixture(scope="module")
def fixture_lake(shared_dir, tmp_path_factory):
    """Every fixture DB (3 levels × 2 ranks) ingested as one run per level."""
    root = tmp_path_factory.mktemp("fxlake")
    lake = Lake(root / "lake")
    before = tree_digest(shared_dir / FIXTURE_DB)
    results = {}
    for level in LEVELS:
        caps = explicit(shared_dir / FIXTURE_DB / level, "train")
        results[level] = ingest_profile(lake, f"fx-{level}", caps, allow_missing=True, progress=False)
    return lake, results, before


def _dbs(shared_dir, level):
    return sorted((shared_dir / FIXTURE_DB / level).rglob("ascend_pytorch_profiler_*.db"))


@pytest.mark.parametrize("level", LEVELS)
def test_kernel_and_host_op_counts_equal_sqlite(fixture_lake, shared_dir, level):
    lake, _, _ = fixture_lake
    for db in _dbs(shared_dir, level):
        rank = int(db.stem.rsplit("_", 1)[1])
        expected_kernels = (sqlite_count(db, "SELECT count(*) FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId)")
                            + sqlite_count(db, "SELECT count(*) FROM COMMUNICATION_OP"))
        expected_ops = sqlite_count(db, "SELECT count(*) FROM PYTORCH_API WHERE type = 50001")
        got_k = raw(lake.root, "kernels", f"run_id = 'fx-{level}' AND rank = {rank}").fetchall()
        got_h = raw(lake.root, "host_ops", f"run_id = 'fx-{level}' AND rank = {rank}").fetchall()
        assert len(got_k) == expected_kernels == 191
        assert len(got_h) == expected_ops == 860


@pytest.mark.parametrize("level", LEVELS)
def test_every_name_resolves_and_every_kernel_has_a_host_op(fixture_lake, level):
    lake, _, _ = fixture_lake
    row = raw(lake.root, "kernels", f"run_id = 'fx-{level}'").aggregate(
        "count(*), count(kernel_name), count(op_type), count(host_op_id), count(cann_api_name), "
        "count(*) FILTER (WHERE op_type = 'N/A')").fetchone()
    n = row[0]
    assert n == 382
    assert row[1:5] == (n, n, n, n)  # names, op types, host ops, launching CANN API all resolved
    assert row[5] == 0


def test_level0_op_types_derived_from_names_match_level1(fixture_lake):
    lake, _, _ = fixture_lake
    l0 = dict(raw(lake.root, "kernels", "run_id = 'fx-level0'").aggregate(
        "kernel_name, any_value(op_type)").fetchall())
    l1 = dict(raw(lake.root, "kernels", "run_id = 'fx-level1' AND NOT op_type_derived").aggregate(
        "kernel_name, any_value(op_type)").fetchall())
    derived = raw(lake.root, "kernels", "run_id = 'fx-level0'").aggregate("bool_and(op_type_derived)").fetchone()[0]
    assert derived is True
    common = set(l0) & set(l1)
    assert len(common) >= 70
    assert {k: l0[k] for k in common} == {k: l1[k] for k in common}
    assert l0["aclnnMm_MatMulCommon_MatMulV2"] == "MatMulV2"
    assert l0["trans_TransData_17"] == "TransData"
    assert l0["ReduceSum7"] == "ReduceSum"


def test_insight_modified_wal_db_ingests_and_inputs_stay_untouched(fixture_lake, shared_dir):
    lake, results, before = fixture_lake
    caps = raw(lake.root, "captures", "run_id = 'fx-level1' AND rank = 0").fetchall()
    cols = raw(lake.root, "captures", "false").columns
    cap = dict(zip(cols, caps[0]))
    assert "insight" in cap["schema_variant"] and "wal" in cap["schema_variant"]
    assert cap["status"] == "ok" and cap["kernel_count"] == 191
    assert cap["profiler_level"] == "Level1"
    # byte-identical inputs and nothing new beside them (no -wal/-shm side files)
    assert tree_digest(shared_dir / FIXTURE_DB) == before
    assert not list((shared_dir / FIXTURE_DB).rglob("*-wal")) and not list((shared_dir / FIXTURE_DB).rglob("*-shm"))


def test_capture_health_records_rows_per_table(fixture_lake):
    import json
    lake, _, _ = fixture_lake
    cols = raw(lake.root, "captures", "false").columns
    rows = [dict(zip(cols, r)) for r in raw(lake.root, "captures", "run_id = 'fx-level2'").fetchall()]
    assert len(rows) == 2
    for r in rows:
        counts = json.loads(r["table_rows"])
        assert counts["COMPUTE_TASK_INFO"] == 187 and counts["COMMUNICATION_OP"] == 4
        assert r["schema_version"] == "1.0.0" and r["truncated"] is False


@pytest.mark.parametrize("level", LEVELS)
def test_text_exports_ingest(shared_dir, tmp_path, level):
    text = shared_dir / FIXTURE_TEXT / level
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, f"tx-{level}", explicit(text, "infer"), allow_missing=True, progress=False)
    kd = text / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(kd, newline="", encoding="utf-8") as f:
        expected = sum(1 for _ in csv.DictReader(f))
    assert res.captures[0].status == "ok"
    rows = raw(lake.root, "kernels", "true").aggregate(
        "count(*), bool_and(source_kind = 'text'), count(start_ns), min(start_ns)").fetchone()
    assert rows[0] == expected
    assert rows[1] is True and rows[2] == expected
    # the trailing TAB of 'Start Time(us)' is gone and µs became exact integer ns
    with open(kd, newline="", encoding="utf-8") as f:
        first = next(csv.DictReader(f))["Start Time(us)"]
    assert first.endswith("\t")
    from decimal import Decimal
    assert rows[3] <= int(Decimal(first.strip()) * 1000)
    if level == "level0":
        assert raw(lake.root, "kernels", "true").aggregate("bool_and(op_type_derived)").fetchone()[0] is True
    else:
        shapes = raw(lake.root, "kernels", "kernel_name = 'trans_TransData_0'").aggregate(
            "any_value(input_shapes)").fetchone()[0]
        assert shapes == "32,3,224,224"


def test_kernels_joined_in_ranges_equal_one_join(fixture_lake, shared_dir, tmp_path, monkeypatch):
    """Large DBs join TASK ⋈ COMPUTE_TASK_INFO in globalTaskId ranges (KERNEL_CHUNK_ROWS per range);
    forcing 40-row ranges on a real level-2 DB yields exactly the rows of the one-range ingest."""
    from tilake.ingest.profiler import kernels as profiler_kernels

    lake, _, _ = fixture_lake
    monkeypatch.setattr(profiler_kernels, "KERNEL_CHUNK_ROWS", 40)
    small = Lake(tmp_path / "lake")
    caps = explicit(shared_dir / FIXTURE_DB / "level2", "train")
    ingest_profile(small, "fx-level2", caps, allow_missing=True, progress=False)
    files = list((small.raw / "kernels" / "run_id=fx-level2").rglob("*.parquet"))
    assert len(files) >= 2 * 4            # two ranks, several ranges each (plus HCCL ops)
    cols = ("rank, global_task_id, kernel_name, op_type, start_ns, dur_ns, block_dim, input_shapes, "
            "connection_id, cann_api_name, host_op_id, host_op_name, callchain_id")
    got = sorted(raw(small.root, "kernels", "run_id = 'fx-level2'").project(cols).fetchall(), key=repr)
    want = sorted(raw(lake.root, "kernels", "run_id = 'fx-level2'").project(cols).fetchall(), key=repr)
    assert len(got) == 382 and got == want
