"""`tilake sql` is read-only for real: every statement type DuckDB's parser knows, bare and nested in
EXPLAIN / EXPLAIN ANALYZE / PREPARE / CTEs, is judged by the statement DuckDB would execute
(reproducer: shared/fixtures/reliability/sql-explain-analyze-writes)."""
from __future__ import annotations

from datetime import datetime

import duckdb
import pytest
from click.testing import CliRunner
from hostile import one_error_line, tree_digest

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.lake import sql as runs_sql
from tilake.lake.store import Lake
from tilake.reports import sql_console

# one statement per DuckDB StatementType reachable from SQL text; OUT is a path outside the lake,
# PART a raw Parquet file of the lake (the reproducer overwrote raw/.../_empty.parquet this way)
STATEMENTS = {
    "SELECT": "select count(*) from fct_run_registry",
    "INSERT": "insert into fct_run_registry values ('x', 'y', 1)",
    "UPDATE": "update fct_run_registry set n = 0",
    "DELETE": "delete from fct_run_registry",
    "CREATE": "create table t2 as select 1",
    "DROP": "drop table fct_run_registry",
    "ALTER": "alter table fct_run_registry add column z int",
    "COPY": "copy (select 42 as x) to 'OUT'",
    "COPY_DATABASE": "copy from database warehouse to memory",
    "PREPARE": "prepare p as select 1",
    "EXECUTE": "execute p",
    "CALL": "call checkpoint()",
    "PRAGMA": "pragma enable_profiling",
    "SET": "set threads = 1",
    "TRANSACTION": "begin transaction",
    "ATTACH": "attach 'OUT' as other",
    "DETACH": "detach warehouse",
    "LOAD": "install httpfs",
    "EXPORT": "export database 'OUT'",
    "VACUUM": "vacuum",
    "MERGE_INTO": ("merge into fct_run_registry using (select 'r1' as run_id) s on (s.run_id = "
                   "fct_run_registry.run_id) when matched then delete"),
    "UPDATE EXTENSIONS": "update extensions",   # StatementType 29, unnamed in the Python enum ("???")
}
# StatementType members the SQL parser does not produce from text (parser-extension, relation
# API, logical-plan, multi-statement wrappers; ANALYZE parses as VACUUM, SET VARIABLE as SET):
# they are refused like any other non-SELECT type if DuckDB ever returns them
NOT_FROM_TEXT = {"ANALYZE", "CREATE_FUNC", "EXTENSION", "INVALID", "LOGICAL_PLAN", "MULTI", "RELATION",
                 "VARIABLE_SET", "EXPLAIN"}
WRAPPERS = {
    "bare": "{}",
    "explain": "EXPLAIN {}",
    "explain_analyze": "EXPLAIN ANALYZE {}",
    "explain_analyse_lower": "explain analyse {}",
    "explain_options": "EXPLAIN (ANALYZE, FORMAT json) {}",
    "explain_options_comment": "EXPLAIN /* ( */ (ANALYZE) -- )\n {}",
    "prepare": "PREPARE q AS {}",
    "cte": "WITH c AS (SELECT 1) {}",
    "second_statement": "SELECT 1; {}",
}


@pytest.fixture()
def lake(tmp_path):
    lk = Lake(tmp_path / "lake")
    with lk.write_run("r1", ["runs", "kernels"]) as w:
        w.write_rows("runs", [{"run_id": "r1", "model_id": "m", "created_at": datetime(2026, 1, 1)}])
        w.write_rows("kernels", [{"kernel_name": "k", "op_type": "MatMulV2", "dur_ns": 5}] * 3,
                     partition={"side": "train", "rank": 0})
    con = duckdb.connect(str(lk.warehouse))
    con.execute("create table fct_run_registry as select 'r1' as run_id, 'qwen3' as model_family, 3 as n "
                "union all select 'r2', 'llama', 4")
    con.close()
    return lk


def test_every_parser_statement_type_has_a_case():
    names = {m for m in dir(duckdb.StatementType) if m.isupper()}
    assert names - NOT_FROM_TEXT <= set(STATEMENTS), "a new DuckDB statement type needs a test case"
    con = duckdb.connect()
    con.execute("create table fct_run_registry (run_id varchar, model_family varchar, n int)")
    for kind, sql in STATEMENTS.items():
        if kind == "EXECUTE":
            continue
        got = {runs_sql._kind(st) for st in con.extract_statements(sql.replace("OUT", "/nonexistent/x"))}
        assert kind in got, (kind, got)


def _refused(lake, sql):
    with pytest.raises(TilakeError) as ei:
        runs_sql.query(lake, sql)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_non_select_refused_bare_and_nested(lake, tmp_path, wrapper):
    out = tmp_path / "leak"
    part = next(lake.raw.glob("kernels/run_id=r1/**/*.parquet"))
    before = tree_digest(lake.root)
    for kind in [k for k in STATEMENTS if k != "SELECT"]:
        sql = WRAPPERS[wrapper].format(STATEMENTS[kind].replace("OUT", str(out)))
        msg = _refused(lake, sql)
        # refused by the type check (named), or a parse error for forms DuckDB's grammar rejects
        assert ("is read-only" in msg and "statements are refused" in msg) or "Parser Error" in msg, msg
        if wrapper != "prepare" and "Parser Error" not in msg and kind != "COPY_DATABASE":  # (BEGIN; COPY …)
            assert kind.replace("_", " ") in msg.replace("_", " "), msg
        assert not out.exists() and tree_digest(lake.root) == before, kind
    # the reproducer's write into the lake's own Parquet
    _refused(lake, WRAPPERS[wrapper].format(f"COPY (SELECT 1 AS x) TO '{part}' (FORMAT parquet)"))
    assert tree_digest(lake.root) == before


@pytest.mark.parametrize("wrapper", [w for w in WRAPPERS if w not in ("prepare",)])
def test_select_runs_bare_and_nested(lake, wrapper):
    cols, rows = runs_sql.query(lake, WRAPPERS[wrapper].format("SELECT count(*) AS c FROM raw_kernels"))
    assert cols and rows
    if wrapper in ("bare", "cte", "second_statement"):
        assert rows == [(3,)]


@pytest.mark.parametrize("sql", ["EXPLAIN (SELECT 1)", "EXPLAIN ((SELECT 1))", "EXPLAIN (FORMAT json) (SELECT 1)",
                                 "SHOW TABLES", "DESCRIBE fct_run_registry", "SUMMARIZE fct_run_registry",
                                 "PRAGMA table_info('fct_run_registry')", "FROM fct_run_registry SELECT n",
                                 "VALUES (1)", "PIVOT fct_run_registry ON model_family IN ('qwen3') USING sum(n)"])
def test_select_type_forms_run(lake, sql):
    assert runs_sql.query(lake, sql)[0]


def test_prepared_select_is_refused_too(lake):
    assert "PREPARE statements are refused" in _refused(lake, "PREPARE p AS SELECT 1; EXECUTE p")


def test_reproducer_explain_analyze_copy_through_the_cli(lake, tmp_path):
    written = tmp_path / "written.csv"
    part = next(lake.raw.glob("runs/run_id=r1/*.parquet"))
    before, part_bytes = tree_digest(lake.root), part.read_bytes()
    for sql in (f"EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO '{written}'",
                f"EXPLAIN ANALYZE COPY (SELECT * REPLACE ('EVIL' AS model_id) FROM raw_runs) TO '{part}' "
                "(FORMAT parquet)",
                "EXPLAIN ANALYZE INSTALL httpfs"):
        r = CliRunner().invoke(main, ["sql", sql, "--lake", str(lake.root)])
        assert r.exit_code == 2
        line = one_error_line(r.output)
        assert "statements are refused (inside EXPLAIN)" in line, line
    assert not written.exists() and part.read_bytes() == part_bytes and tree_digest(lake.root) == before
    # the fallback shell takes the same decision
    assert sql_console.open_shell(lake, input_text=f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{written}';\n",
                               cli=None) == 0
    assert not written.exists()


def test_files_outside_the_lake_need_the_flag(lake, tmp_path):
    csv = tmp_path / "secret.csv"
    csv.write_text("a\n1\n2\n")
    r = CliRunner().invoke(main, ["sql", f"select count(*) from read_csv('{csv}')", "--lake", str(lake.root)])
    assert r.exit_code == 2 and "file system operations are disabled" in one_error_line(r.output)
    r = CliRunner().invoke(main, ["sql", f"select count(*) as c from read_csv('{csv}')", "--format", "csv",
                                  "-o", str(tmp_path / "o.csv"), "--allow-external-access", "--lake", str(lake.root)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o.csv").read_text().splitlines() == ["c", "2"]
    # the flag opens reading, not writing: statement types are checked the same
    r = CliRunner().invoke(main, ["sql", f"copy (select 1) to '{tmp_path / 'w.csv'}'", "--allow-external-access",
                                  "--lake", str(lake.root)])
    assert r.exit_code == 2 and not (tmp_path / "w.csv").exists()


def test_configuration_is_locked_and_access_limited(lake, tmp_path):
    con = runs_sql.open_readonly(lake)
    try:
        with pytest.raises(duckdb.Error, match="lock"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
        assert con.execute("select count(*) from raw_kernels").fetchone() == (3,)
    finally:
        con.close()
    assert not (tmp_path / "x.csv").exists()


def test_trend_definitions_run_without_file_access(lake, tmp_path, monkeypatch):
    from tilake.reports import trends

    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    q = tmp_path / "queries"
    q.mkdir()
    (q / "trend_evil.sql").write_text(f"-- title: evil\nselect run_id, (select count(*) from read_csv('{secret}')) "
                                      "as value from fct_run_registry\n")
    monkeypatch.setattr(trends, "QUERIES", q)
    with pytest.raises(TilakeError, match="file system operations are disabled"):
        trends.compute_trend(lake, "evil", "none")


def test_shell_init_locks_down(lake):
    init = runs_sql.shell_init_sql(lake)
    assert init.index("enable_external_access = false") < init.index("lock_configuration = true")
    assert f"allowed_directories = ['{lake.root}/']" in init
    assert "enable_external_access" not in runs_sql.shell_init_sql(lake, allow_external_access=True)
