"""Bad values and output targets (issue 19): each kind a break test found, reproduced with its own values.

Kinds: spreadsheet formulas in every xlsx sheet; special files (FIFO, device node) as output
targets; implausible durations and overflow-proof sums; paths with ``? # %``; silent wrong data;
tracebacks that must be one ``error:`` line; Ctrl-C during a build; small things.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile import one_error_line, tree_digest

from tilake.cli import main
from tilake.errors import TilakeError


def _invoke(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


# ------------------------------------------------------------------ 1. spreadsheet formulas stay text

FORMULAS = ['=HYPERLINK("http://example.invalid/x","clickme")', "+1+1", "-2+3", "@SUM(A1:A2)", "=1/0"]


def _formula_cells(path: Path):
    """(sheet, cell, value) of every cell an Excel would evaluate: openpyxl reads a formula cell as type 'f'."""
    from openpyxl import load_workbook

    wb = load_workbook(path)
    return [(ws.title, c.coordinate, c.value) for ws in wb.worksheets for row in ws.iter_rows() for c in row
            if c.data_type == "f"]


def test_write_xlsx_stores_formula_like_text_as_text(tmp_path):
    from openpyxl import load_workbook

    from tilake.reports.tables import write_xlsx

    p = write_xlsx(tmp_path / "t.xlsx", [{"title": "a", "header": ["name", "n"], "rows": [[f, i] for i, f in
                                                                                           enumerate(FORMULAS)]},
                                         {"title": "b", "header": FORMULAS[:2], "rows": [[-1.5, "-x"]]}])
    assert _formula_cells(p) == []
    wb = load_workbook(p)
    assert [r[0].value for r in wb["a"].iter_rows(min_row=2)] == FORMULAS   # the text is kept as is
    assert wb["b"]["A2"].value == -1.5 and wb["b"]["A2"].data_type == "n"   # numbers stay numbers


def test_boundary_results_xlsx_and_csv_hold_no_formula(tmp_path):
    import csv

    from tilake.reports.tables import write_boundary_tables

    bounds = [{"boundary": f, "status": "NOT_EXACT", "train_source": f, "max_abs_diff": 0.5} for f in FORMULAS]
    points = [{"round": 0, "boundary": f, "class": "logic-level", "evidence": [f]} for f in FORMULAS]
    out = write_boundary_tables({"boundaries": bounds, "points": points}, tmp_path)
    assert _formula_cells(out["boundary_results_xlsx"]) == []
    cells = [c for row in csv.reader(open(out["boundary_results_csv"], encoding="utf-8-sig")) for c in row]
    assert not [c for c in cells if c[:1] in "=+-@" and c not in ("",)], cells


def test_operator_diff_xlsx_from_a_db_with_formula_names(built, tmp_path):
    po = tmp_path / "po"
    shutil.copytree(built["po"], po)
    db = next(po.glob("e2e/*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"))
    c = sqlite3.connect(db)
    ids = [r[0] for r in c.execute("SELECT opType FROM COMPUTE_TASK_INFO GROUP BY opType ORDER BY count(*) DESC LIMIT 2")]
    ids += [r[0] for r in c.execute("SELECT name FROM COMPUTE_TASK_INFO GROUP BY name ORDER BY count(*) DESC LIMIT 2")]
    for n, i in enumerate(ids):
        c.execute("UPDATE STRING_IDS SET value = ? WHERE id = ?", (FORMULAS[n % 2] + str(n), i))
    c.commit()
    c.close()
    out = tmp_path / "out"
    r = _invoke("run", po, "--run-id", "xl", "--lake", tmp_path / "lake", "--out", out, "--lang", "en")
    assert r.exit_code == 0, r.output
    from openpyxl import load_workbook
    wb = load_workbook(out / "operator_diff.xlsx")
    assert len(wb.worksheets) == 4
    texts = [c.value for ws in wb.worksheets for row in ws.iter_rows() for c in row if isinstance(c.value, str)]
    assert any(t.startswith("=HYPERLINK") for t in texts)   # the name arrived, as text
    assert _formula_cells(out / "operator_diff.xlsx") == []
    import csv
    cells = [c for row in csv.reader(open(out / "operator_diff_table_numeric.csv", encoding="utf-8-sig")) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "@")], cells


# ------------------------------------------------------------------ 2. special files are never replaced

@pytest.fixture()
def fifo(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


def _still_fifo(p: Path) -> bool:
    return stat.S_ISFIFO(os.stat(p).st_mode)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_sql_output_onto_a_fifo_or_device_is_refused(lake_copy, fifo, fmt):
    r = _invoke("sql", "select 1 as x", "--format", fmt, "-o", fifo, "--lake", lake_copy)
    assert r.exit_code == 2 and "named pipe" in one_error_line(r.output), r.output
    assert _still_fifo(fifo)
    if os.path.exists("/dev/full"):
        st = os.stat("/dev/full")
        r = _invoke("sql", "select 1 as x", "--format", fmt, "-o", "/dev/full", "--lake", lake_copy)
        assert r.exit_code == 2 and "character device" in one_error_line(r.output), r.output
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and os.stat("/dev/full").st_rdev == st.st_rdev


def test_trend_and_probe_outputs_onto_a_fifo_are_refused(lake_copy, fifo, tmp_path):
    r = _invoke("trend", "-m", "infer_kernels", "--by", "none", "-o", fifo, "--lake", lake_copy)
    assert r.exit_code == 2 and "named pipe" in r.output, r.output
    assert _still_fifo(fifo)
    import torch
    from dumps_mini import write_dump
    d = write_dump(tmp_path / "d", [("Module.m.A.Lin.forward.0", None, {"output": [torch.ones(2)]})])
    r = _invoke("dumps", "probe", "--train", d.parents[1], "--json", fifo)
    assert r.exit_code == 2 and "named pipe" in r.output, r.output
    assert _still_fifo(fifo)


def test_files_in_an_out_folder_that_are_fifos_are_not_replaced(built, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    p = out / "operator_diff_table.csv"
    os.mkfifo(p)
    r = _invoke("report", "r1", "--out", out, "--lang", "en", "--lake", built["lake"])
    assert r.exit_code == 2 and "named pipe" in one_error_line(r.output), r.output
    assert _still_fifo(p)


def test_atomic_writers_refuse_special_files(fifo):
    from tilake.files import atomic_write_bytes, atomic_write_json, check_regular_target

    for write in (lambda: atomic_write_bytes(fifo, b"x"), lambda: atomic_write_json(fifo, {})):
        with pytest.raises(TilakeError, match="named pipe"):
            write()
    assert _still_fifo(fifo)
    assert check_regular_target(fifo.parent / "new.csv") == fifo.parent / "new.csv"
    with pytest.raises(TilakeError, match="folder"):
        check_regular_target(fifo.parent)


# ------------------------------------------------------------------ 3. implausible durations, overflow-proof sums

INT64_MAX = 2**63 - 1


def _parquet(lake: Path, table: str, run: str, sql: str = "*"):
    import duckdb
    return duckdb.sql(f"SELECT {sql} FROM read_parquet('{lake}/raw/{table}/run_id={run}/**/*.parquet')").fetchall()


def _train_db(po: Path) -> Path:
    return next(po.glob("e2e/*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"))


@pytest.mark.parametrize("case", ["int64_max", "two_hours_after_session", "no_session_long"])
def test_implausible_task_ends_are_invalid_rows_at_ingest(built, tmp_path, case):
    po = tmp_path / "po"
    shutil.copytree(built["po"], po)
    c = sqlite3.connect(_train_db(po))
    if case == "int64_max":
        c.execute(f"UPDATE TASK SET endNs = {INT64_MAX} WHERE rowid % 7 = 0")
        want = "TASK.endNs past the session end"
    elif case == "two_hours_after_session":
        c.execute("UPDATE TASK SET endNs = (SELECT endTimeNs FROM SESSION_TIME_INFO) + 7200000000000 "
                  "WHERE rowid % 11 = 0")
        want = "TASK.endNs past the session end"
    else:   # no session to bound by: a kernel longer than an hour is still no kernel
        c.execute("DROP TABLE SESSION_TIME_INFO")
        c.execute("UPDATE TASK SET endNs = startNs + 5000000000000 WHERE rowid % 11 = 0")
        want = "TASK duration over 1 h"
    bad = c.execute("SELECT count(*) FROM TASK t JOIN COMPUTE_TASK_INFO USING (globalTaskId) "
                    "WHERE t.endNs - t.startNs > 3600000000000").fetchone()[0]
    c.commit()
    c.close()
    lake = tmp_path / "lake"
    r = _invoke("ingest", po, "--run-id", "big", "--lake", lake)
    assert r.exit_code == 0, r.output
    assert want in r.output
    inv = [json.loads(v) for (v,) in _parquet(lake, "captures", "big", "invalid_rows") if v]
    assert inv and inv[0][want] == bad > 0, inv
    (mx,) = _parquet(lake, "kernels", "big", "max(dur_ns)")[0]
    assert mx <= 3600 * 10**9
    if case == "int64_max":   # the build that failed with an INT64 overflow in fct_side_ops
        r = _invoke("build", "--lake", lake)
        assert r.exit_code == 0, r.output


def _text_po(tmp_path: Path) -> Path:
    from tilake.synth import JobConfig, make_profiler_output
    po = tmp_path / "po"
    make_profiler_output(po, job=JobConfig(layers=1), train_ranks=1, infer_form="text")
    return po


def _edit_kernel_details(po: Path, **cells):
    """Set ``{row index: {column: value}}`` cells of the inference kernel_details.csv (the synth export's quirks kept)."""
    import csv
    k = next(po.glob("agent_loop_rollout_replica_0/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    rows = list(csv.reader(open(k, encoding="utf-8-sig", newline="")))
    head = [h.strip() for h in rows[0]]
    for idx, change in cells.items():
        for col, val in change.items():
            rows[int(idx[1:])][head.index(col)] = val
    with open(k, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return k


@pytest.mark.parametrize("dur", ["9000000000000", "1e19", "4e12"])
def test_kernel_details_durations_over_an_hour_are_counted(tmp_path, dur):
    po = _text_po(tmp_path)
    _edit_kernel_details(po, r5={"Duration(us)": dur}, r9={"Duration(us)": "3600000000.001"})
    lake = tmp_path / "lake"
    r = _invoke("ingest", po, "--run-id", "t", "--lake", lake)
    assert r.exit_code == 0, r.output
    assert "kernel_details.csv Duration(us) over 1 h: 2" in r.output, r.output
    (mx,) = _parquet(lake, "kernels", "t", "max(dur_ns)")[0]
    assert mx <= 3600 * 10**9
    assert "step(s) [1] counted" in r.output   # one damaged row does not drop the step markers


@pytest.mark.parametrize("col,val", [("Start Time(us)", "9e18"), ("Start Time(us)", "-1"), ("Duration(us)", "1e30")])
def test_kernel_details_times_out_of_range_name_the_line(tmp_path, col, val):
    po = _text_po(tmp_path)
    k = _edit_kernel_details(po, r3={col: val})
    r = _invoke("ingest", po, "--run-id", "t", "--lake", tmp_path / "lake")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and str(k) in line and f"line 4 {col}" in line, line


def test_invalid_utf8_in_a_csv_names_the_line(tmp_path):
    po = _text_po(tmp_path)
    k = next(po.glob("agent_loop_rollout_replica_0/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
    lines = k.read_bytes().split(b"\n")
    n = 97   # 0-based: file line 98, far past the decoder's first buffer position
    lines[n] = lines[n][:7] + b"\xff\xfe" + lines[n][7:]
    k.write_bytes(b"\n".join(lines))
    r = _invoke("ingest", po, "--run-id", "t", "--lake", tmp_path / "lake")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and "not UTF-8" in line and "line 98, column 8" in line, line


def _clone_run(lake: Path, src: str, dst: str, kernels_replace: str = "", captures_replace: str = ""):
    """Copy run ``src``'s raw partitions to run ``dst`` with REPLACE expressions: what an older
    tilake (or a hand-made file) left in the lake."""
    import duckdb
    for t, extra in (("kernels", kernels_replace), ("runs", ""), ("captures", captures_replace)):
        for g in (lake / "raw" / t).glob(f"run_id={src}/**/*.parquet"):
            out = Path(str(g).replace(f"run_id={src}", f"run_id={dst}"))
            out.parent.mkdir(parents=True, exist_ok=True)
            cols = [r[0] for r in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{g}', hive_partitioning=false)").fetchall()]
            rep = ([f"'{dst}' AS run_id"] if "run_id" in cols else []) + ([extra] if extra else [])
            sel = f"SELECT * REPLACE ({', '.join(rep)})" if rep else "SELECT *"
            duckdb.sql(f"COPY ({sel} FROM read_parquet('{g}', hive_partitioning=false)) TO '{out}' (FORMAT parquet)")


def test_sums_of_damaged_durations_cannot_overflow(lake_copy):
    _clone_run(lake_copy, "r1", "old", f"CASE WHEN global_task_id % 3 = 0 THEN {INT64_MAX} ELSE dur_ns END AS dur_ns")
    r = _invoke("build", "--lake", lake_copy)
    assert r.exit_code == 0, r.output
    r = _invoke("sql", "select max(total_dur_ns) from fct_side_ops where run_id = 'old'", "--format", "csv",
                "--lake", lake_copy)
    assert r.exit_code == 0 and int(r.output.split()[-1]) < 2**62, r.output


@pytest.mark.parametrize("replace,why", [
    (f"CASE WHEN global_task_id % 3 = 0 THEN {INT64_MAX} ELSE call_count END AS call_count", "impossible values"),
])
def test_a_build_failing_on_one_runs_data_names_the_run(lake_copy, replace, why):
    _clone_run(lake_copy, "r1", "poison", replace)
    before = (lake_copy / "warehouse.duckdb").read_bytes()
    r = _invoke("build", "--lake", lake_copy)
    line = next(x for x in r.output.splitlines() if x.startswith("error: "))
    assert r.exit_code == 2 and "run poison" in line and why in line and "`tilake runs rm poison`" in line, r.output
    assert "Traceback" not in r.output
    assert (lake_copy / "warehouse.duckdb").read_bytes() == before
    r = _invoke("runs", "rm", "poison", "--lake", lake_copy)
    assert r.exit_code == 0, r.output


def test_a_failing_test_on_new_data_names_the_new_run(lake_copy):
    _clone_run(lake_copy, "r1", "odd", captures_replace="'weird' AS status")
    r = _invoke("build", "--check", "--lake", lake_copy)   # the data tests run under --check
    line = next(x for x in r.output.splitlines() if x.startswith("error: "))
    assert r.exit_code == 2 and "accepted_values" in line and "`tilake runs rm odd`" in line, r.output
    assert "run r1" not in line
    r = _invoke("build", "--lake", lake_copy)   # without --check no data test runs: the build goes through
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------ 4. input paths with ? # % are opened as paths

@pytest.mark.parametrize("name", ["run#3_ascend_pt", "a?b_ascend_pt", "100%41_ascend_pt", "x%3Fy#z?mode=rwc_ascend_pt"])
def test_db_under_a_folder_with_uri_characters(built, tmp_path, name):
    po = tmp_path / "po"
    shutil.copytree(built["po"], po)
    cap = next((po / "e2e").iterdir())
    cap.rename(cap.parent / name)
    db = _train_db(po)
    c = sqlite3.connect(db)   # plus a damaged name, so the error path (sqlite3 on the input) runs too
    (i,) = c.execute("SELECT name FROM COMPUTE_TASK_INFO LIMIT 1").fetchone()
    c.commit()
    c.close()
    before = tree_digest(po)
    r = _invoke("ingest", po, "--run-id", "q", "--lake", tmp_path / "lake")
    assert r.exit_code == 0 and "train rank 0: ok kernels=783" in r.output, r.output
    assert tree_digest(po) == before   # nothing created or changed beside the input
    c = sqlite3.connect(db)
    c.execute("UPDATE STRING_IDS SET value = CAST(x'fffec328' AS TEXT) || value WHERE id = ?", (i,))
    c.commit()
    c.close()
    before = tree_digest(po)
    r = _invoke("ingest", po, "--run-id", "q2", "--lake", tmp_path / "lake")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and f"STRING_IDS.value for id {i} is not valid UTF-8" in line and name in line, line
    assert tree_digest(po) == before


def test_sqlite_uri_quotes_every_uri_character(tmp_path):
    from tilake.lake.duck import sqlite_ro, sqlite_uri

    d = tmp_path / "a?b#c%41d&e=f"
    d.mkdir()
    p = d / "x.db"
    sqlite3.connect(p).execute("CREATE TABLE t (v)").connection.commit()
    assert "?" not in sqlite_uri(p).split("?mode=")[0] and "#" not in sqlite_uri(p)
    con = sqlite_ro(p)
    assert con.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
    con.close()
    assert sorted(x.name for x in d.iterdir()) == ["x.db"]
    with pytest.raises(sqlite3.Error):
        sqlite_ro(d / "missing.db")
    assert sorted(x.name for x in d.iterdir()) == ["x.db"]   # read-only open creates nothing


def test_a_copied_lake_builds_views_over_its_own_files(lake_copy, built):
    """The staging views hold the lake's absolute path: a copied lake must not take the fast plans (they
    keep the views), or its marts would read the original lake's files."""
    import duckdb
    r = _invoke("build", "--lake", lake_copy)
    assert r.exit_code == 0, r.output
    con = duckdb.connect(str(lake_copy / "warehouse.duckdb"), read_only=True)
    views = [v for (v,) in con.execute("select sql from duckdb_views() where view_name like 'stg_profiler__%'").fetchall()]
    con.close()
    assert views and all(f"'{lake_copy}/raw/" in v for v in views), views[:1]
    assert not any(f"'{built['lake']}/raw/" in v for v in views)
    assert json.loads((lake_copy / ".dbt" / "marts_replay.json").read_text(encoding="utf-8"))["lake"] == str(lake_copy)
