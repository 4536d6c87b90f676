"""``tilake.open_lake``: the marts and raw tables from Python, read-only, with the same numbers as ``tilake sql``."""
from __future__ import annotations

import duckdb
import pytest

import tilake
from tilake.errors import TilakeError
from tilake.lake import schema
from tilake.lake.sql import query
from tilake.lake.store import Lake
from tilake.pipeline.example import EXAMPLE_RUN_ID


@pytest.fixture(scope="module")
def lake_dir(example_run):
    out, res = example_run   # the session's example (tests/conftest.py): read only here
    return out / "lake", res


def test_open_lake_is_the_documented_entry_point():
    from tilake.api import open_lake

    assert tilake.open_lake is open_lake and "open_lake" in tilake.__all__
    assert "Returns:" in open_lake.__doc__ and "read-only" in open_lake.__doc__


def test_marts_and_raw_views_match_tilake_sql(lake_dir):
    lake, res = lake_dir
    tables = ("runs", "captures", "kernels", "host_ops", "call_stacks")
    # what `tilake sql` says, asked before the connection below shares the DuckDB instance
    cols, rows = query(Lake(lake), "SELECT " + ", ".join(f"(SELECT count(*) FROM raw_{t}) AS {t}" for t in tables))
    expected = dict(zip(cols, rows[0]))
    with tilake.open_lake(lake) as con:
        names = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
        assert {"fct_op_comparison", "fct_side_ops", "dim_runs"} <= names
        assert {f"raw_{t}" for t in schema.TABLES} <= names
        grades = dict(con.execute("SELECT grade, count(*) FROM fct_op_comparison WHERE run_id = ? GROUP BY grade",
                                  [EXAMPLE_RUN_ID]).fetchall())
        assert grades == res.grade_counts == {"red": 1, "orange": 2, "yellow": 2, "green": 4}
        got = {t: con.execute(f"SELECT count(*) FROM raw_{t}").fetchone()[0] for t in tables}
        assert got == expected and got["runs"] == 1 and got["kernels"] > 10000
        assert con.execute("SELECT count(*) FROM raw_kernels").fetchone()[0] == res.ingest.kernels
        # results go straight to pandas (what a notebook does next)
        df = con.sql("SELECT side, sum(calls) AS calls FROM fct_side_ops GROUP BY side ORDER BY side").df()
        compared = con.execute("SELECT sum(compared_calls) FROM fct_phase_scope WHERE run_id = ?",
                               [EXAMPLE_RUN_ID]).fetchone()[0]
        # the default phases: the log-prob forward and the prefill, a part of the step's kernels
        assert list(df["side"]) == ["infer", "train"] and int(df["calls"].sum()) == compared < res.ingest.kernels


def test_read_only(lake_dir):
    lake, _ = lake_dir
    before = (lake / "warehouse.duckdb").stat().st_mtime_ns
    con = tilake.open_lake(lake)
    try:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("DELETE FROM fct_op_comparison")
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("CREATE TABLE x AS SELECT 1")
    finally:
        con.close()
    assert (lake / "warehouse.duckdb").stat().st_mtime_ns == before


def test_open_lake_and_tilake_sql_in_one_process_do_not_share_settings(lake_dir):
    """Known bug: DuckDB shared one instance per file, so `tilake sql`'s lock_configuration reached the
    notebook's connection and the next query failed ("the configuration has been locked")."""
    lake, res = lake_dir
    with tilake.open_lake(lake) as con:
        for _ in range(2):   # the second query() used to fail
            assert query(Lake(lake), "SELECT count(*) FROM raw_kernels")[1] == [(res.ingest.kernels,)]
        # the notebook connection kept its own, unlocked configuration and its external file access
        con.execute("SET enable_progress_bar = false")
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone()[0] is True
        assert con.execute("SELECT count(*) FROM raw_kernels").fetchone()[0] == res.ingest.kernels
    con2 = tilake.open_lake(lake)
    try:
        con2.execute("SET threads = 1")
        assert query(Lake(lake), "SELECT count(*) FROM dim_runs")[1] == [(1,)]
    finally:
        con2.close()


def test_default_lake_from_environment(lake_dir, monkeypatch, tmp_path):
    lake, _ = lake_dir
    monkeypatch.setenv("TILAKE_LAKE", str(lake))
    monkeypatch.chdir(tmp_path)
    with tilake.open_lake() as con:
        assert con.execute("SELECT run_id FROM dim_runs").fetchall() == [(EXAMPLE_RUN_ID,)]


def test_missing_lake_and_missing_warehouse_are_one_line(tmp_path):
    with pytest.raises(TilakeError, match="no lake here") as e:
        tilake.open_lake(tmp_path / "nope")
    assert "\n" not in str(e.value)
    (tmp_path / "lake" / "raw").mkdir(parents=True)
    with pytest.raises(TilakeError, match="no warehouse yet.*tilake build"):
        tilake.open_lake(tmp_path / "lake")
