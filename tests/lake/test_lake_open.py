"""The lake is open: every raw table reads as a Hive dataset in DuckDB (``hive_partitioning=true``),
pyarrow (``pq.read_table``, ``pyarrow.dataset``), pandas and polars (when installed) with no other
option, and each engine counts the rows ``tilake sql`` counts. The profiler tables come from
``tilake example`` (synthetic torch_npu DBs); the dump tables from :class:`RunWriter` rows, partitioned
by side and rank as ``diagnosis/lake_rows.py`` writes them."""
from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tilake.lake import schema
from tilake.lake.sql import query
from tilake.lake.store import Lake
from tilake.pipeline.example import EXAMPLE_RUN_ID, run_example


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    out = tmp_path_factory.mktemp("open_lake")
    res = run_example(out)
    lake = Lake(out / "lake")
    with lake.write_run("d1", ["tensor_stats", "boundary_results"]) as w:
        for side, rank, n in (("train", 0, 3), ("infer", 1, 2)):
            w.write_rows("tensor_stats", [{"round": 0, "entry": f"layers.{i}.mlp", "dtype": "bfloat16",
                                           "numel": 4096, "max": 1.5} for i in range(n)], {"side": side, "rank": rank})
        w.write_rows("boundary_results", [{"round": 0, "boundary": "layers.0.b0", "numel": 4096,
                                           "mismatch_count": 7}])
    return lake, res


def _polars():
    try:
        import polars
    except ImportError:
        return None
    return polars


def test_every_engine_reads_every_raw_table_with_tilake_sql_counts(lake):
    lake, res = lake
    cols, rows = query(lake, "SELECT " + ", ".join(f'(SELECT count(*) FROM raw_{t}) AS "{t}"' for t in schema.TABLES))
    counts = dict(zip(cols, rows[0]))
    assert counts["kernels"] == res.ingest.kernels > 10000 and counts["runs"] == 1
    assert counts["tensor_stats"] == 5 and counts["boundary_results"] == 1 and counts["dump_runs"] == 0
    pl = _polars()
    for t, n in counts.items():
        d = lake.raw / t
        got = {
            "duckdb": duckdb.sql(f"SELECT count(*) FROM read_parquet('{d}/**/*.parquet', hive_partitioning=true)").fetchone()[0],
            "pyarrow.parquet": pq.read_table(d).num_rows,
            "pyarrow.dataset": ds.dataset(d, partitioning="hive").count_rows(),
            "pandas": len(pd.read_parquet(d)),
        }
        if pl is not None:
            got["polars"] = pl.scan_parquet(f"{d}/**/*.parquet", hive_partitioning=True).select(pl.len()).collect().item()
        assert got == {k: n for k in got}, t


def test_partition_columns_come_from_the_path_with_one_type(lake):
    lake, res = lake
    k = pd.read_parquet(lake.raw / "kernels")
    assert sorted(k["run_id"].unique()) == [EXAMPLE_RUN_ID] and sorted(k["side"].unique()) == ["infer", "train"]
    assert sorted(k["rank"].unique()) == [0] and int(k["dur_ns"].sum()) > 0
    # the same sums as tilake sql, per side
    sql = dict(query(lake, "SELECT side, sum(dur_ns) FROM raw_kernels GROUP BY side")[1])
    assert {s: int(v) for s, v in k.groupby("side", observed=True)["dur_ns"].sum().items()} == sql
    t = pq.read_table(lake.raw / "tensor_stats")
    assert sorted(zip(t.column("side").to_pylist(), t.column("rank").to_pylist())) == \
        [("infer", 1)] * 2 + [("train", 0)] * 3
    # DuckDB: typed partition columns with the documented hive_types; a run filter opens only that run
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{lake.table_glob('tensor_stats')}', hive_partitioning=true, "
                     f"hive_types={schema.hive_types_sql('tensor_stats')}) WHERE run_id = 'd1'")
    types = dict(zip(rel.columns, map(str, rel.types)))
    assert types["run_id"] == "VARCHAR" and types["rank"] == "INTEGER" and rel.shape[0] == 5
    # the schema file is outside the partition tree: pyarrow/pandas/Spark skip the _schema folder
    assert lake.schema_file("kernels").parent.parent.parent.parent.name == "_schema"
    assert all("_schema" not in f for f in ds.dataset(lake.raw / "kernels", partitioning="hive").files)


def test_no_raw_or_mart_column_is_hugeint(lake):
    """HUGEINT (DuckDB's sum() of BIGINT) becomes float64 in pandas and exports; marts ALTER it to BIGINT."""
    lake, _ = lake
    huge = query(lake, "SELECT table_name, column_name FROM information_schema.columns WHERE data_type LIKE '%HUGEINT%' "
                       "AND table_name NOT LIKE 'int\\_%' ESCAPE '\\'")[1]
    assert huge == []
    import tilake

    with tilake.open_lake(lake.root) as con:
        df = con.sql("SELECT train_calls, infer_calls, train_op_calls FROM fct_op_comparison").df()
    assert str(df["train_calls"].dtype) == "int64" and int(df["train_calls"].sum()) > 0
    for t in schema.TABLES:
        cols, rows = query(lake, f"SELECT column_name, column_type FROM (DESCRIBE raw_{t})")
        types = dict(rows)
        assert list(types) == [c for c, _ in schema.TABLES[t]], t
        assert not [c for c, ty in types.items() if "HUGEINT" in ty], t
