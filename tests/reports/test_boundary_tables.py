"""``boundary_results.csv``/``.xlsx`` written by the dump analysis beside ``boundary_results.json``."""
from __future__ import annotations

import csv
import json

import msprobe_writer as G
import pytest

from tilake.pipeline.dumps import run_analyze
from tilake.reports.tables import BOUNDARY_COLUMNS, GRADE_FILL


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("boundary_tables")
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp / "train", w)
    G.dump_infer(cfg, tmp / "infer", "attn_scale", w=w)
    res = run_analyze(tmp / "train", tmp / "infer", tmp / "out", charts=False, show_progress=False)
    return tmp / "out", res


def test_csv_rows_match_the_json(analysed):
    out, res = analysed
    assert res.outputs["boundary_results_csv"] == str(out / "boundary_results.csv")
    rows = list(csv.DictReader((out / "boundary_results.csv").read_text(encoding="utf-8-sig").splitlines()))
    src = json.loads((out / "report_source.json").read_text(encoding="utf-8"))["boundaries"]
    assert list(rows[0]) == list(BOUNDARY_COLUMNS)
    assert [(int(r["round"]), r["boundary"], r["status"]) for r in rows] == \
           [(b["round"], b["boundary"], b["status"]) for b in src]
    first = next(r for r in rows if r["boundary"] == "L0.attn_core.out")
    b = next(b for b in src if b["boundary"] == "L0.attn_core.out")
    assert first["status"] == "NOT_EXACT" and float(first["max_abs_diff"]) == pytest.approx(b["max_abs_diff"])
    assert first["train_shape"] == "×".join(str(d) for d in b["train_shape"])


def test_xlsx_status_fills_and_points(analysed):
    from openpyxl import load_workbook

    out, res = analysed
    wb = load_workbook(out / "boundary_results.xlsx")
    assert wb.sheetnames == ["boundaries", "difference points"]
    ws = wb["boundaries"]
    assert ws.freeze_panes == "A2" and [c.value for c in ws[1]] == list(BOUNDARY_COLUMNS)
    st = BOUNDARY_COLUMNS.index("status")
    cells = {(r[2].value, r[0].value): r for r in ws.iter_rows(min_row=2)}
    bad = cells[("L0.attn_core.out", 0)]
    assert bad[st].value == "NOT_EXACT" and bad[st].fill.start_color.rgb.endswith(GRADE_FILL["red"])
    assert isinstance(bad[BOUNDARY_COLUMNS.index("max_abs_diff")].value, float)
    exact = next(r for r in cells.values() if r[st].value == "EXACT")
    assert exact[st].fill.start_color.rgb.endswith(GRADE_FILL["green"])
    pts = list(wb["difference points"].iter_rows(min_row=2, values_only=True))
    assert [(p[0], p[1], p[2]) for p in pts] == [tuple(p) for p in res.points]
