"""Lake.ensure() migrates partitions written before a table gained columns (the dbt sources read
with union_by_name=false, which needs every file to carry every column)."""
from __future__ import annotations

import duckdb

from tilake.ingest import schema
from tilake.ingest.lake import Lake


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

