"""Lake.ensure() migrates partitions written before a table gained columns (the dbt sources read
with union_by_name=false, which needs every file to carry every column)."""
from __future__ import annotations

import duckdb

from tilake.lake import schema
from tilake.lake.store import Lake


def _cols(f):
    return [r[0] for r in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{f}')").fetchall()]


def test_old_partition_gains_missing_columns_and_keeps_rows(tmp_path, monkeypatch):
    lake = Lake(tmp_path / "lake")
    lake.ensure()
    # an "old" runs partition: only three columns, as an older tilake might have written
    part = lake.raw / "runs" / "run_id=old" / "part-0.parquet"
    part.parent.mkdir(parents=True)
    duckdb.sql(f"COPY (SELECT 'old' AS run_id, 'Qwen/Qwen3-0.6B' AS model_id, TIMESTAMP '2026-01-02' AS created_at) "
               f"TO '{part}' (FORMAT parquet)")
    # the current schema gains a column: the schema file is now stale
    monkeypatch.setitem(schema.TABLES, "runs", schema.TABLES["runs"] + [("new_col", "DOUBLE")])
    lake.ensure()
    want = [c for c, _ in schema.TABLES["runs"]]
    assert set(_cols(part)) == set(want)
    assert _cols(lake.raw / "runs" / "_empty.parquet") == want
    glob = lake.raw / "runs" / "**" / "*.parquet"
    rows = duckdb.sql(f"SELECT run_id, model_id, created_at::VARCHAR, new_col, step FROM read_parquet('{glob}', "
                      "hive_partitioning=false, union_by_name=false)").fetchall()
    assert rows == [("old", "Qwen/Qwen3-0.6B", "2026-01-02 00:00:00", None, None)]
    assert not list(part.parent.glob(".tmp-*"))
    # idempotent: nothing left to migrate
    assert lake._migrate_table(duckdb.connect(), "runs") == 0



def test_killed_migration_leaves_nothing_readers_would_count(tmp_path, monkeypatch):
    """A migration killed between COPY and os.replace leaves a hidden temp file; the next ensure()
    deletes it (it would otherwise be read as a second copy of the partition, or fail as truncated)."""
    lake = Lake(tmp_path / "lake")
    lake.ensure()
    part = lake.raw / "runs" / "run_id=old" / "part-0.parquet"
    part.parent.mkdir(parents=True)
    duckdb.sql(f"COPY (SELECT 'old' AS run_id, TIMESTAMP '2026-01-02' AS created_at) TO '{part}' (FORMAT parquet)")
    complete = part.with_name(".tmp-0123.parquet")          # complete copy (name used before the fix)
    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{part}')) TO '{complete}' (FORMAT parquet)")
    truncated = part.with_name(".tmp-4567.parquet-partial")  # half-written file
    truncated.write_bytes(b"PAR1" + b"\0" * 100)
    monkeypatch.setitem(schema.TABLES, "runs", schema.TABLES["runs"] + [("new_col", "DOUBLE")])
    lake.ensure()
    assert sorted(p.name for p in part.parent.iterdir()) == ["part-0.parquet"]
    glob = lake.raw / "runs" / "**" / "*.parquet"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=false, "
                      "union_by_name=false)").fetchone()[0] == 1
