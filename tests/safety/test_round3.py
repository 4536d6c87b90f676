"""Reliability round 3 (issue #19): each kind the break test found, reproduced with its own values.

Kinds: spreadsheet formulas in every xlsx sheet; special files (FIFO, device node) as output
targets; implausible durations and overflow-proof sums; paths with ``? # %``; silent wrong data;
tracebacks that must be one ``error:`` line; Ctrl-C during a build; small things.
"""
from __future__ import annotations

import errno
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
    from dumps_mini import write_dump
    import torch
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
    r = _invoke("build", "--lake", lake_copy)
    line = next(x for x in r.output.splitlines() if x.startswith("error: "))
    assert r.exit_code == 2 and "accepted_values" in line and "`tilake runs rm odd`" in line, r.output
    assert "run r1" not in line


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


# ------------------------------------------------------------------ 5. silent wrong data is counted and said

@pytest.mark.parametrize("column", ["opType", "name", "both"])
def test_dangling_string_ids_are_counted_invalid(built, tmp_path, column):
    po = tmp_path / "po"
    shutil.copytree(built["po"], po)
    c = sqlite3.connect(_train_db(po))
    cols = ["opType", "name"] if column == "both" else [column]
    ids = set()
    for col in cols:
        ids |= {r[0] for r in c.execute(f"SELECT {col} FROM COMPUTE_TASK_INFO GROUP BY {col} ORDER BY count(*) DESC LIMIT 2")}
    want = {col: c.execute(f"SELECT count(*) FROM COMPUTE_TASK_INFO WHERE {col} IN ({','.join(map(str, ids))})")
            .fetchone()[0] for col in cols}
    c.executemany("DELETE FROM STRING_IDS WHERE id = ?", [(i,) for i in ids])
    c.commit()
    c.close()
    lake = tmp_path / "lake"
    r = _invoke("ingest", po, "--run-id", "d", "--lake", lake)
    assert r.exit_code == 0, r.output
    assert "name a STRING_IDS id that does not exist" in r.output, r.output
    inv = [json.loads(v) for (v,) in _parquet(lake, "captures", "d", "invalid_rows") if v]
    assert inv, "dangling ids not counted in captures.invalid_rows"
    for col, n in want.items():
        assert inv[0][f"COMPUTE_TASK_INFO.{col} id not in STRING_IDS"] == n


def _mini_pair(tmp_path):
    import torch
    from msprobe_mini import write_dump, write_map

    x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    ents = [("Module.m.A.Lin.forward.0", None, {"output": [x]}), ("Module.m.B.Lin.forward.0", None, {"output": [x * 2]})]
    train, infer = write_dump(tmp_path / "train", ents), write_dump(tmp_path / "infer", ents)
    sel = lambda m: {"module": m, "io": "output", "index": 0}  # noqa: E731
    mp = write_map(tmp_path / "mini.yaml", [{"name": n, "op": "matmul", "inputs": [], "train": sel(m), "infer": sel(m)}
                                            for n, m in (("a", "m.A.Lin"), ("b", "m.B.Lin"))])
    return train, infer, mp


@pytest.mark.parametrize("declared", ["torch.float16", "torch.bfloat16", "torch.int8"])
def test_pt_dtype_other_than_dump_json_is_said(tmp_path, declared):
    train, infer, mp = _mini_pair(tmp_path)
    p = train / "dump.json"
    d = json.loads(p.read_text())
    d["data"]["Module.m.B.Lin.forward.0"]["output"][0]["dtype"] = declared
    p.write_text(json.dumps(d))
    out = tmp_path / "out"
    r = _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                "--out", out, "--no-charts")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "warning: train: 1 .pt file(s) hold another dtype than dump.json declares" in flat, r.output
    assert f"dump.json {declared}, file torch.float32" in flat
    assert "than dump.json declares" in (out / "alignment_report.md").read_text(encoding="utf-8")


def test_dumps_analyze_build_leaves_runs_and_trends_current(lake_copy, tmp_path):
    train, infer, mp = _mini_pair(tmp_path)
    r = _invoke("runs", "--json", "--lake", lake_copy)   # the warehouse is current and read
    assert r.exit_code == 0 and [x["run_id"] for x in json.loads(r.output)["runs"]] == ["r1"], r.output
    r = _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                "--out", tmp_path / "out", "--no-charts", "--run-id", "d2", "--lake", lake_copy, "--build")
    assert r.exit_code == 0, r.output
    from tilake.lake.registry import warehouse_is_current
    from tilake.lake.store import Lake
    assert warehouse_is_current(Lake(lake_copy))
    r = _invoke("runs", "--json", "--lake", lake_copy)
    assert r.exit_code == 0 and [x["run_id"] for x in json.loads(r.output)["runs"]] == ["r1", "d2"], r.output
    r = _invoke("trend", "-m", "difference_points", "--by", "none", "--no-chart", "--json", "--lake", lake_copy)
    assert r.exit_code == 0 and [p["last_run_id"] for s in json.loads(r.output)["series"] for p in s["points"]] == ["d2"], r.output


# ------------------------------------------------------------------ 6. one error line, naming the file and where

def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("command", ["ingest", "build", "rm"])
def test_disk_full_while_taking_the_lock(built, lake_copy, monkeypatch, command):
    before = tree_digest(lake_copy, skip=(".lock",))
    monkeypatch.setattr(os, "pwrite", _enospc)
    args = {"ingest": ["ingest", built["po"], "--run-id", "r2"], "build": ["build"], "rm": ["runs", "rm", "r1"]}[command]
    r = _invoke(*args, "--lake", lake_copy)
    line = one_error_line(r.output)
    assert r.exit_code == 2 and "writer lock" in line and "no space left on device" in line and str(lake_copy) in line
    monkeypatch.undo()
    assert tree_digest(lake_copy, skip=(".lock",)) == before
    r = _invoke("runs", "--lake", lake_copy)   # the lock was released: the lake still works
    assert r.exit_code == 0 and "r1" in r.output


def test_disk_full_in_atomic_write_bytes(built, tmp_path, monkeypatch):
    from pathlib import Path as P
    from tilake.files import atomic_write_bytes

    real = P.write_bytes

    def full(self, data):
        if ".tmp" in self.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, data)

    monkeypatch.setattr(P, "write_bytes", full)
    target = tmp_path / "keep.json"
    target.write_text("old")
    with pytest.raises(TilakeError, match="No space left on device") as e:
        atomic_write_bytes(target, b"new")
    assert str(target) in str(e.value) and target.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["keep.json"]
    out = tmp_path / "out"
    r = _invoke("report", "r1", "--out", out, "--lang", "en", "--lake", built["lake"])
    line = one_error_line(r.output)
    assert r.exit_code == 2 and "No space left on device" in line and str(out) in line, line


def _one_rank_dump(tmp_path: Path, data: bytes) -> Path:
    d = tmp_path / "bad" / "step0" / "rank0"
    d.mkdir(parents=True)
    (d / "dump.json").write_bytes(data)
    return d.parents[1]


@pytest.mark.parametrize("kind", ["random", "bad_utf8_line", "deep_list", "deep_object"])
def test_dump_json_of_random_bytes_or_deep_nesting_ends_in_one_line(tmp_path, kind):
    train, infer, mp = _mini_pair(tmp_path)
    data = {"random": bytes(range(128, 256)) * 40,
            "bad_utf8_line": b'{"task": "tensor",\n "level": "L0",\n "data": {"x\xff": {}}}',
            "deep_list": b'{"data": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            "deep_object": b'{"data": ' + b'{"a":' * 200_000 + b"1" + b"}" * 200_000 + b"}"}[kind]
    bad = _one_rank_dump(tmp_path, data)
    r = _invoke("dumps", "analyze", "--train", bad, "--infer", infer.parents[1], "--map", mp,
                "--out", tmp_path / "out", "--no-charts")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and str(bad / "step0" / "rank0" / "dump.json") in line, line
    if kind == "bad_utf8_line":
        assert "not UTF-8" in line and "line 3" in line, line
    elif kind.startswith("deep"):
        assert "nests too deeply" in line, line
    r = _invoke("dumps", "probe", "--train", bad)
    assert r.exit_code == 2 and one_error_line(r.output)


@pytest.mark.parametrize("value", ["1e300", "-1e300", "4.7e15", "\"abc\""])
def test_torch_trace_with_an_impossible_time_names_the_event(tmp_path, value):
    import gzip
    src = Path(__file__).resolve().parents[1] / "data" / "torch_cpu_trace" / "prof_rank-0.json.gz"
    text = gzip.open(src).read().decode("utf-8")
    d = json.loads(text)
    ev = [i for i, e in enumerate(d["traceEvents"]) if e.get("ph") == "X"]
    k = ev[len(ev) // 2]
    name = d["traceEvents"][k]["name"]
    d["traceEvents"][k]["dur"] = "@@DUR@@"
    p = tmp_path / "prof_rank-0.json"
    p.write_text(json.dumps(d).replace('"@@DUR@@"', value))
    r = _invoke("ingest", "--train", p, "--infer", p, "--run-id", "t", "--lake", tmp_path / "lake")
    line = one_error_line(r.output)
    assert r.exit_code == 2 and str(p) in line and f"traceEvents[{k}]" in line and repr(name)[:40] in line, line
    assert "temp" not in line and "line 3" not in line
    assert not (tmp_path / "lake" / "raw").exists() or not list((tmp_path / "lake" / "raw").rglob("run_id=t"))


# ------------------------------------------------------------------ 7. Ctrl-C during tilake build: a real SIGINT

_CHILD = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"   # own handler: the
          "from tilake.cli import main; sys.argv = ['tilake'] + sys.argv[1:]; main()\n")      # suite may run under nohup


def _wh_digest(lake: Path) -> str:
    import hashlib
    return hashlib.sha256((lake / "warehouse.duckdb").read_bytes()).hexdigest()


@pytest.mark.parametrize("at", ["start", "1", "third", "two_thirds", "last_but_one", "last"])
def test_real_sigint_during_build_never_swaps_a_half_build(lake_copy, at):
    import re
    import signal
    import subprocess
    import sys
    import time

    before = _wh_digest(lake_copy)
    env = {**os.environ, "TILAKE_DBT_PROGRESS": "verbose"}
    p = subprocess.Popen([sys.executable, "-c", _CHILD, "build", "--full-refresh", "--lake", str(lake_copy)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out, sent_at = [], None
    if at == "start":   # while the warehouse is copied / dbt loads the project: before any node
        deadline = time.monotonic() + 120
        while not (lake_copy / ".build").exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        sent_at = (0, 0)
    for line in p.stdout:
        out.append(line)
        m = re.match(r"dbt build: (\d+) of (\d+) nodes", line)
        if m and sent_at is None:
            n, total = int(m.group(1)), int(m.group(2))
            goal = {"1": 1, "third": total // 3, "two_thirds": 2 * total // 3, "last_but_one": total - 1,
                    "last": total}[at]
            if n >= goal:
                p.send_signal(signal.SIGINT)
                sent_at = (n, total)
    rc = p.wait(timeout=300)
    text = "".join(out)
    assert sent_at is not None, text
    swapped = _wh_digest(lake_copy) != before
    assert "Traceback" not in text
    if rc == 0:   # only a signal after dbt's last node may miss the build: then it is whole and swapped
        assert at == "last" and swapped, (sent_at, text[-2000:])
    else:
        assert rc == 2 and not swapped, (sent_at, text[-2000:])
        assert text.strip().splitlines()[-1] == f"error: {lake_copy}: interrupted during dbt build; the lake is unchanged"
        assert not (lake_copy / ".build").exists()
    r = _invoke("build", "--lake", lake_copy)   # the lake builds again afterwards
    assert r.exit_code == 0, r.output


def test_interrupt_guard_records_what_dbt_swallows(tmp_path, monkeypatch):
    """The guard's flag, not the exception, decides: a Ctrl-C that dbt or DuckDB turned into a
    success (or into another error) still stops the swap."""
    import signal
    from dbt.cli.main import dbtRunner, dbtRunnerResult
    from tilake.lake.store import Lake
    from tilake.lake.warehouse import DbtInterrupted, build_swapped

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        monkeypatch.setattr(signal, "getsignal", lambda s: signal.default_int_handler)   # nohup: test the guard anyway

    def swallowing(self, args):
        try:
            os.kill(os.getpid(), signal.SIGINT)   # a real signal, delivered to this (main) thread
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            pass                                  # what a broad except in a library does
        return dbtRunnerResult(success=True, result=None)

    monkeypatch.setattr(dbtRunner, "invoke", swallowing)
    lake = Lake(tmp_path / "lake")
    with pytest.raises(DbtInterrupted):
        build_swapped(lake)
    assert not lake.warehouse.exists() and not (lake.root / ".build").exists()
    assert signal.getsignal(signal.SIGINT) is not None


# ------------------------------------------------------------------ 8. small things a user hits

@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("q", ["DESCRIBE fct_side_ops", "SHOW TABLES", "-- saved query\nSUMMARIZE dim_runs", "desc dim_runs"])
def test_describe_and_show_export_in_every_format(lake_copy, tmp_path, fmt, q):
    out = tmp_path / f"x.{fmt}"
    r = _invoke("sql", q, "--format", fmt, "-o", out, "--lake", lake_copy)
    assert r.exit_code == 0 and out.stat().st_size > 0, r.output
    if fmt != "parquet":
        r = _invoke("sql", q, "--format", fmt, "--lake", lake_copy)
        assert r.exit_code == 0 and r.output.strip(), r.output


def test_report_out_is_not_created_for_an_unknown_run(built, tmp_path):
    out = tmp_path / "new" / "out"
    r = _invoke("report", "no_such_run", "--out", out, "--lake", built["lake"])
    assert r.exit_code == 2 and "no_such_run" in one_error_line(r.output)
    assert not (tmp_path / "new").exists()


def test_dumps_analyze_says_read_only_lake_before_analysing(tmp_path, monkeypatch):
    import tilake.diagnosis.analyze as A
    from tilake.lake.store import Lake

    train, infer, mp = _mini_pair(tmp_path)
    called = []
    monkeypatch.setattr(A, "analyze_pair", lambda *a, **k: called.append(1) or (_ for _ in ()).throw(AssertionError))
    lake = Lake(tmp_path / "lake")

    def refuse(self):
        raise TilakeError("lake is read-only (cannot take the writer lock)", path=self.root)

    monkeypatch.setattr(Lake, "locked", refuse)
    r = _invoke("dumps", "analyze", "--train", train.parents[1], "--infer", infer.parents[1], "--map", mp,
                "--out", tmp_path / "out", "--no-charts", "--run-id", "d", "--lake", lake.root)
    assert r.exit_code == 2 and "read-only" in one_error_line(r.output)
    assert called == []   # refused before the analysis ran


def test_count_cells_are_numbers_and_footnote_only_for_the_example(built, tmp_path):
    import csv
    from tilake.reports.op_diff import load_facts, render_markdown

    out = tmp_path / "out"
    r = _invoke("report", "r1", "--out", out, "--lang", "en", "--lake", built["lake"])
    assert r.exit_code == 0, r.output
    rows = list(csv.reader(open(out / "operator_diff_table.csv", encoding="utf-8-sig")))
    for row in rows[1:]:
        assert row[3].isdigit() and row[4].isdigit(), row   # train / infer call counts: one number each
    facts = load_facts(built["lake"] / "warehouse.duckdb", "r1")
    facts["comparison"][0]["differs_from_seed_table"] = True
    facts["comparison"][0]["seed_table_grade"] = "green"
    assert "‡" not in render_markdown(facts, "en")   # a user's own run
    facts["run"]["collection_method"] = "bundled synthetic example generated by tilake.synth"
    assert "‡" in render_markdown(facts, "en")


def test_source_notes_only_for_a_known_backend(built, monkeypatch):
    import tilake.reports.op_diff as od

    wh = built["lake"] / "warehouse.duckdb"
    facts = od.load_facts(wh, "r1")   # the synthetic capture is detected as Megatron + vLLM
    assert any(r["train_code_path"] or r["infer_code_path"] for r in facts["comparison"])
    real = od.run_query

    def unknown(con, name, run_id):
        rows = real(con, name, run_id)
        if name == "op_diff_run":
            rows = [{**x, "train_backend": "unknown", "infer_backend": "unknown", "train_backend_detected": None,
                     "infer_backend_detected": "unknown"} for x in rows]
        return rows

    monkeypatch.setattr(od, "run_query", unknown)
    facts = od.load_facts(wh, "r1")   # a plain job (a CNN) whose framework nobody named or detected
    assert not any(r["train_code_path"] or r["infer_code_path"] or r["train_code_function"] for r in facts["comparison"])
    assert "(source note)" not in " ".join(" ".join(x) for x in od.csv_rows(facts, "en"))


def test_disk_full_build_leaves_no_dbt_target(lake_copy, monkeypatch):
    import tilake.lake.warehouse as wh

    monkeypatch.setattr(wh, "_disk_failure", lambda lake, res: TilakeError(
        "cannot write to the lake: no space left on device; the lake was left as it was", path=lake.root))
    before = (lake_copy / "warehouse.duckdb").read_bytes()
    r = _invoke("build", "--lake", lake_copy)
    lines = [x for x in r.output.splitlines() if x.strip() and not x.startswith("dbt build: ")]   # progress is fine
    assert r.exit_code == 2 and len(lines) == 1 and "no space left on device" in lines[0], r.output
    assert not (lake_copy / ".dbt" / "target").exists() and not (lake_copy / ".build").exists()
    assert (lake_copy / "warehouse.duckdb").read_bytes() == before


def test_scan_from_output_lists_every_output_without_a_python_dict(built, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["scan", "--from-output", str(built["po"]), "--run-id", "s1", "--lake",
                                  str(tmp_path / "lake"), "--out", str(out), "--lang", "en"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "{'" not in r.output and "evidence: infer device, train device" in r.output, r.output
    for name in ("train_infer_op_diff_report.md", "operator_diff_table.csv", "train_infer_op_diff_report.html",
                 "operator_diff_table_numeric.csv", "operator_diff.xlsx", "op_diff_overview.png"):
        assert name in r.output and (out / name).exists(), (name, r.output)
