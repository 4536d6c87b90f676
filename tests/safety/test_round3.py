"""Reliability round 3 (issue #19): each kind the break test found, reproduced with its own values.

Kinds: spreadsheet formulas in every xlsx sheet; special files (FIFO, device node) as output
targets; implausible durations and overflow-proof sums; paths with ``? # %``; silent wrong data;
tracebacks that must be one ``error:`` line; Ctrl-C during a build; small things.
"""
from __future__ import annotations

import errno
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
