"""`tilake sql`: read-only, DuckDB errors on one line, exports, shell; plus small registry helpers.

The warehouse here is a hand-made DuckDB file (no dbt build needed): the SQL layer only cares
that ``<lake>/warehouse.duckdb`` exists, and raw tables come from the Lake writer.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.lake import sql as runs_sql
from tilake.lake.registry import list_runs, model_family_for, tool_versions_of
from tilake.lake.store import Lake
from tilake.reports import sql_console
from tilake.reports.trends import by_expression, sparkline


@pytest.fixture()
def lake(tmp_path):
    lk = Lake(tmp_path / "lake")
    with lk.write_run("r1", ["runs", "kernels"]) as w:
        w.write_rows("runs", [{"run_id": "r1", "model_id": "Qwen/Qwen3-0.6B", "model_family": "qwen3",
                               "tags": {"tool.cann": "8.1.RC1", "team": "rl"}, "created_at": datetime(2026, 1, 1)}])
        w.write_rows("kernels", [{"kernel_name": "k", "op_type": "MatMulV2", "dur_ns": 5}] * 3,
                     partition={"side": "train", "rank": 0})
    con = duckdb.connect(str(lk.warehouse))
    con.execute("create table fct_run_registry as select 'r1' as run_id, 'qwen3' as model_family, 3 as n "
                "union all select 'r2', 'llama', 4")
    con.close()
    return lk


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_query_returns_rows_and_raw_views(lake):
    assert runs_sql.query(lake, "select model_family, n from fct_run_registry order by n") == (
        ["model_family", "n"], [("qwen3", 3), ("llama", 4)])
    assert runs_sql.query(lake, "select count(*), sum(dur_ns) from raw_kernels")[1] == [(3, 15)]


@pytest.mark.parametrize("sql, expected", [
    ("SELEC * FROM fct_run_registry", 'Parser Error: syntax error at or near "SELEC"'),
    ("select nope from fct_run_registry", 'Binder Error: Referenced column "nope" not found in FROM clause!'),
    ("select * from no_such_table", "Catalog Error: Table with name no_such_table does not exist!"),
])
def test_malformed_query_prints_duckdb_message_on_one_line(lake, sql, expected):
    r = CliRunner().invoke(main, ["sql", sql, "--lake", str(lake.root)])
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: " + expected), r.output


@pytest.mark.parametrize("sql, kind", [
    ("insert into fct_run_registry values ('x', 'y', 1)", "INSERT"),
    ("drop table fct_run_registry", "DROP"),
    ("copy fct_run_registry to 'OUT' (format csv)", "COPY"),
    ("select 1; delete from fct_run_registry", "DELETE"),
    ("attach 'OUT' as other", "ATTACH"),
    ("set lock_configuration = false", "SET"),
    ("create table t2 as select 1", "CREATE"),
])
def test_read_only_connection_cannot_modify_the_lake(lake, tmp_path, sql, kind):
    out = tmp_path / "leak.csv"
    before = _digest(lake.warehouse)
    r = CliRunner().invoke(main, ["sql", sql.replace("OUT", str(out)), "--lake", str(lake.root)])
    assert r.exit_code == 2 and f"{kind} statements are refused" in r.output, r.output
    assert _digest(lake.warehouse) == before and not out.exists()
    assert runs_sql.query(lake, "select count(*) from fct_run_registry")[1] == [(2,)]


def test_the_connection_itself_is_read_only(lake):
    # second wall: even a statement that slipped past the parser check fails inside DuckDB
    con = runs_sql.open_readonly(lake)
    try:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("insert into fct_run_registry values ('x', 'y', 1)")
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("drop table fct_run_registry")
        with pytest.raises(duckdb.Error, match="lock"):
            con.execute("set enable_external_access = true")
    finally:
        con.close()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_export_formats(lake, tmp_path, fmt):
    out = tmp_path / f"o.{fmt}"
    r = CliRunner().invoke(main, ["sql", "select * from fct_run_registry order by n", "--format", fmt,
                                  "-o", str(out), "--lake", str(lake.root)])
    assert r.exit_code == 0, r.output
    assert "wrote 2 row(s)" in r.output
    if fmt == "csv":
        assert out.read_text().splitlines() == ["run_id,model_family,n", "r1,qwen3,3", "r2,llama,4"]
    elif fmt == "json":
        assert json.loads(out.read_text()) == [{"run_id": "r1", "model_family": "qwen3", "n": 3},
                                               {"run_id": "r2", "model_family": "llama", "n": 4}]
    else:
        assert duckdb.sql(f"select n from read_parquet('{out}') order by n").fetchall() == [(3,), (4,)]


def test_export_refuses_the_lake_folder_and_missing_output(lake):
    r = CliRunner().invoke(main, ["sql", "select 1", "--format", "csv", "-o", str(lake.raw / "x.csv"),
                                  "--lake", str(lake.root)])
    assert r.exit_code == 2 and "inside the lake folder" in r.output
    assert not (lake.raw / "x.csv").exists()
    r = CliRunner().invoke(main, ["sql", "select 1", "--format", "parquet", "--lake", str(lake.root)])
    assert r.exit_code == 2 and "--format parquet is binary: give --output FILE" in r.output


@pytest.mark.parametrize("dash", [[], ["-o", "-"], ["--output", "-"]])
def test_csv_and_json_go_to_stdout_without_output_and_never_to_a_file_named_dash(lake, tmp_path, monkeypatch, dash):
    monkeypatch.chdir(tmp_path)
    q = "select * from fct_run_registry order by n"
    r = CliRunner().invoke(main, ["sql", q, "--format", "csv", *dash, "--lake", str(lake.root)])
    assert r.exit_code == 0, r.output
    # exactly the bytes -o FILE writes (no "wrote …" line mixed into the data)
    assert r.output == "run_id,model_family,n\nr1,qwen3,3\nr2,llama,4\n"
    r = CliRunner().invoke(main, ["sql", q, "--format", "json", *dash, "--lake", str(lake.root)])
    assert r.exit_code == 0 and json.loads(r.output) == [{"run_id": "r1", "model_family": "qwen3", "n": 3},
                                                         {"run_id": "r2", "model_family": "llama", "n": 4}]
    assert not (tmp_path / "-").exists() and [p.name for p in tmp_path.iterdir()] == ["lake"]
    with pytest.raises(TilakeError, match="named '-'"):
        runs_sql.export(lake, q, "csv", tmp_path / "-")


def test_line_mode_prints_one_column_per_line(lake):
    r = CliRunner().invoke(main, ["sql", "select run_id, model_id, tags from raw_runs", "--format", "line",
                                  "--lake", str(lake.root)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == ["-- row 1 --", "  run_id = r1", "model_id = Qwen/Qwen3-0.6B",
                                     '    tags = {"team": "rl", "tool.cann": "8.1.RC1"}', "1 row(s)"]
    r = CliRunner().invoke(main, ["sql", "select * from fct_run_registry order by n", "--format", "line",
                                  "--max-rows", "1", "--lake", str(lake.root)])
    assert r.output.splitlines()[-1] == "2 row(s) — 1 not shown (use --max-rows or --format csv)"
    assert "r2" not in r.output and "model_family = qwen3" in r.output


def test_table_output_and_missing_warehouse(lake, tmp_path):
    r = CliRunner().invoke(main, ["sql", "select * from fct_run_registry order by n", "--lake", str(lake.root)],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "qwen3" in r.output and "2 row(s)" in r.output
    r = CliRunner().invoke(main, ["sql", "select 1", "--lake", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no warehouse yet" in r.output


def test_shell_duckdb_cli_and_fallback(lake, capfd):
    if runs_sql.duckdb_cli():
        rc = sql_console.open_shell(lake, input_text="select sum(n) as total from fct_run_registry;\n"
                                                  "select count(*) as k from raw_kernels;\n"
                                                  "insert into fct_run_registry values ('x','y',1);\n")
        out, err = capfd.readouterr()
        assert "7" in out and "3" in out and "read-only" in (out + err)
    rc = sql_console.open_shell(lake, input_text="select sum(n) as total\nfrom fct_run_registry;\n"
                                              "drop table fct_run_registry;\n.quit\n", cli=None)
    out, _ = capfd.readouterr()
    assert rc == 0 and "7" in out and "DROP statements are refused" in out
    assert runs_sql.query(lake, "select count(*) from fct_run_registry")[1] == [(2,)]


def test_runs_list_reads_raw_tables(lake):
    runs = list_runs(lake)
    assert [r["run_id"] for r in runs] == ["r1"]
    assert runs[0]["tool_versions"] == {"cann": "8.1.RC1"} and runs[0]["tags"] == {"team": "rl"}
    assert runs[0]["train_kernels"] is None   # no captures rows: unknown, not 0
    assert list_runs(Lake(lake.root.parent / "nothing")) == []


def test_model_family_from_config_json_then_model_id(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    assert model_family_for(tmp_path / "m", "whatever/Llama-3") == ("qwen3", f"model_type in {tmp_path / 'm' / 'config.json'}")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert model_family_for(tmp_path / "bad", "meta-llama/Llama-3.2-1B") == ("llama", "model id")
    assert model_family_for(None, "Qwen/Qwen2.5-7B-Instruct") == ("qwen2.5", "model id")
    assert model_family_for(None, None) == ("unknown", "model unknown")


def test_tool_versions_tags_win_and_private_keys_skip():
    tv = tool_versions_of(json.dumps({"torch_npu": "2.5.1", "vllm_ascend": "0.9.0", "npu_seam_real": False,
                                      "_x": "1", "packages": {"a": 1}}),
                          json.dumps({"tool.vllm-ascend": "0.9.1", "team": "rl"}))
    assert tv == {"torch-npu": "2.5.1", "vllm-ascend": "0.9.1"}


def test_sparkline_and_by_whitelist():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3, 3, 3]) == "▄▄▄"
    assert sparkline([]) == ""
    assert by_expression("model_family") == ("coalesce(r.model_family, 'unknown')", [])
    expr, params = by_expression("tag:team")
    assert params == ["team", '$."team"']
    for bad in ("model_family; drop table x", "tag:a'b", "tool:gcc", "nope"):
        with pytest.raises(TilakeError):
            by_expression(bad)



def test_saved_query_starting_with_a_comment_runs_through_the_cli(lake, tmp_path):
    """README recipe tilake sql "$(cat reports/queries/<file>)": every saved query opens with '-- '."""
    q = "-- saved query: runs per family\nselect model_family, n from fct_run_registry order by n"
    out = tmp_path / "q.csv"
    r = CliRunner().invoke(main, ["sql", q, "--lake", str(lake.root), "--format", "csv", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text(encoding="utf-8").splitlines() == ["model_family,n", "qwen3,3", "llama,4"]
