"""Lake.ensure() migrates old lakes: files that stored the partition columns (run_id, side, rank; the
layout before the Hive-readable one, with a root ``_empty.parquet``) and partitions written before a
table gained columns (the dbt sources read with union_by_name=false, which needs every file to carry
every column)."""
from __future__ import annotations

import duckdb

from tilake.lake import schema
from tilake.lake.store import Lake, raw_source


def _cols(f):
    return [r[0] for r in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{f}', hive_partitioning=false)").fetchall()]


def _old_lake(tmp_path):
    """A lake as tilake wrote it before the Hive-readable layout: partition columns inside the files,
    a zero-row ``raw/<table>/_empty.parquet`` beside the ``run_id=`` folders (which made DuckDB's
    ``hive_partitioning=true`` fail with "Hive partition mismatch")."""
    lake = Lake(tmp_path / "lake")
    for t in ("runs", "kernels"):
        (lake.raw / t).mkdir(parents=True)
        duckdb.sql(f"COPY (SELECT {schema.null_list(schema.TABLES[t])} WHERE false) "
                   f"TO '{lake.raw / t / '_empty.parquet'}' (FORMAT parquet)")
    runs = lake.raw / "runs" / "run_id=old" / "part-00001.parquet"
    runs.parent.mkdir(parents=True)
    # an older tilake also wrote fewer columns: only three here
    duckdb.sql(f"COPY (SELECT 'old' AS run_id, 'Qwen/Qwen3-0.6B' AS model_id, TIMESTAMP '2026-01-02' AS created_at) "
               f"TO '{runs}' (FORMAT parquet)")
    kern = lake.raw / "kernels" / "run_id=old" / "side=train" / "rank=1" / "part-00002.parquet"
    kern.parent.mkdir(parents=True)
    names = [c for c, _ in schema.TABLES["kernels"]]
    vals = {"run_id": "'old'", "side": "'train'", "rank": "1::INTEGER", "dur_ns": "range::BIGINT",
            "op_type": "'MatMul'", "kernel_name": "'MatMulV2'", "call_count": "1::BIGINT"}
    sel = ", ".join(f"{vals.get(c, f'NULL::{t}')} AS \"{c}\"" for c, t in schema.TABLES["kernels"])
    duckdb.sql(f"COPY (SELECT {sel} FROM range(3)) TO '{kern}' (FORMAT parquet)")
    assert _cols(kern) == names
    return lake, runs, kern


def test_old_layout_moves_partition_columns_to_the_path_and_keeps_rows(tmp_path, monkeypatch):
    lake, runs, kern = _old_lake(tmp_path)
    # an old lake is readable before the migration too (tilake sql opens lakes read-only)
    before = duckdb.sql(f"SELECT run_id, side, rank, sum(dur_ns) FROM {raw_source(lake, 'kernels')} GROUP BY ALL").fetchall()
    assert before == [("old", "train", 1, 3)]
    # the current schema gains a column too: both migrations in one pass
    monkeypatch.setitem(schema.TABLES, "runs", schema.TABLES["runs"] + [("new_col", "DOUBLE")])
    lake.ensure()
    assert not (lake.raw / "runs" / "_empty.parquet").exists() and not (lake.raw / "kernels" / "_empty.parquet").exists()
    file_runs = [c for c, _ in schema.file_columns("runs")]
    assert "run_id" not in file_runs and file_runs[-1] == "new_col"
    assert set(_cols(runs)) == set(file_runs)
    assert _cols(kern) == [c for c, _ in schema.file_columns("kernels")] and "side" not in _cols(kern)
    assert _cols(lake.schema_file("runs")) == file_runs
    assert lake.schema_file("kernels").relative_to(lake.root).as_posix() == \
        "raw/kernels/_schema/run_id=_/side=_/rank=0/schema.parquet"
    # the dbt sources' reader: schema file first, union_by_name=false, partition columns from the path
    glob = lake.table_glob("runs")
    rows = duckdb.sql(f"SELECT run_id, model_id, created_at::VARCHAR, new_col, step FROM read_parquet('{glob}', "
                      f"hive_partitioning=true, hive_types={schema.hive_types_sql('runs')}, union_by_name=false)").fetchall()
    assert rows == [("old", "Qwen/Qwen3-0.6B", "2026-01-02 00:00:00", None, None)]
    after = duckdb.sql(f"SELECT run_id, side, rank, sum(dur_ns) FROM {raw_source(lake, 'kernels')} GROUP BY ALL").fetchall()
    assert after == before
    assert not list(lake.raw.rglob(".tmp-*"))
    # idempotent: nothing left to migrate
    assert lake._migrate_table(duckdb.connect(), "runs") == 0 and lake._migrate_table(duckdb.connect(), "kernels") == 0


def test_killed_migration_leaves_nothing_readers_would_count(tmp_path, monkeypatch):
    """A migration killed between COPY and os.replace leaves a hidden temp file; the next ensure()
    deletes it (it would otherwise be read as a second copy of the partition, or fail as truncated)."""
    lake = Lake(tmp_path / "lake")
    lake.ensure()
    part = lake.raw / "runs" / "run_id=old" / "part-0.parquet"
    part.parent.mkdir(parents=True)
    duckdb.sql(f"COPY (SELECT TIMESTAMP '2026-01-02' AS created_at) TO '{part}' (FORMAT parquet)")
    complete = part.with_name(".tmp-0123.parquet")          # complete copy (name used before the fix)
    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{part}', hive_partitioning=false)) TO '{complete}' (FORMAT parquet)")
    truncated = part.with_name(".tmp-4567.parquet-partial")  # half-written file
    truncated.write_bytes(b"PAR1" + b"\0" * 100)
    monkeypatch.setitem(schema.TABLES, "runs", schema.TABLES["runs"] + [("new_col", "DOUBLE")])
    lake.ensure()
    assert sorted(p.name for p in part.parent.iterdir()) == ["part-0.parquet"]
    glob = lake.raw / "runs" / "**" / "*.parquet"
    assert duckdb.sql(f"SELECT count(*), min(run_id) FROM read_parquet('{glob}', hive_partitioning=true, "
                      "union_by_name=false)").fetchone() == (1, "old")
