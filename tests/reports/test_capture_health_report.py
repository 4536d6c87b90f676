"""Profiler steps counted per side and invalid source rows, as the reports word them (issue 12 items 3, 5).

Unit part: ``fct_capture_health``-shaped dicts. End-to-end part: ``tilake run --allow-missing`` on
``tilake.synth`` DBs (CANN DB schema of the real msinsight fixtures) with the training side's device
tables empty and the inference capture cut while recording (BR-24's edit: 2 kernels with end < start,
1 with end NULL): the console names the lake, the chart and the steps; the reports show the steps and
the invalid rows; the chart labels the side without evidence.
"""
from __future__ import annotations

import sqlite3

from profiler_helpers import mart, pt_db
from rich.console import Console

from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile
from tilake.reports.captures import invalid_text, steps_counted
from tilake.reports.run_console import print_run_summary
from tilake.synth.db import write_profiler_db
from tilake.synth.population import JobConfig, infer_population, train_population


def _cap(rank, **kw):
    return {"side": "train", "rank": rank, "status": "ok", "step_source": None, "steps_kept": None, **kw}


def test_steps_counted_words():
    caps = [_cap(0, step_source="STEP_TIME", steps_kept="[50]"), _cap(1, step_source="STEP_TIME", steps_kept="[50]"),
            _cap(2), _cap(3, status="evidence_missing")]
    assert steps_counted(caps, "train", "en") == ("step 50 (STEP_TIME; ranks 0, 1); no step markers: every "
                                                  "captured kernel counted (ranks 2)")
    assert steps_counted(caps, "train", "zh") == "step 50（STEP_TIME；rank 0, 1）; 无 step 标记：计入全部 kernel（rank 2）"
    assert steps_counted(caps, "infer", "en") == "no evidence"
    disjoint = [_cap(0, step_source="STEP_TIME"), _cap(1, step_source="STEP_TIME", steps_kept=None)]
    assert steps_counted(disjoint, "train", "en") == ("every captured step (no step is covered by every rank; "
                                                      "ranks 0, 1)")
    assert steps_counted([_cap(0, step_source="STEP_TIME", steps_kept="[1, 2]")], "train", "en") == \
        "steps 1, 2 (STEP_TIME; rank 0)"


def test_invalid_text():
    assert invalid_text('{"TASK.endNs NULL":1,"TASK.endNs < startNs":2}') == "TASK.endNs < startNs=2, TASK.endNs NULL=1"
    assert invalid_text(None) == "" and invalid_text("not json") == "not json"


def test_run_with_one_side_missing_names_lake_chart_steps_and_invalid_rows(tmp_path):
    small = JobConfig(layers=2)
    write_profiler_db(pt_db(tmp_path / "train", "t"), train_population(small), device_tables="empty")
    infer_db = pt_db(tmp_path / "infer", "i")
    write_profiler_db(infer_db, infer_population(small))
    c = sqlite3.connect(infer_db)
    last = [r[0] for r in c.execute("SELECT t.rowid FROM TASK t JOIN COMPUTE_TASK_INFO k USING (globalTaskId) "
                                    "ORDER BY t.startNs DESC LIMIT 3")]
    c.execute("UPDATE TASK SET endNs = startNs - 1 WHERE rowid IN (?, ?)", last[:2])
    c.execute("UPDATE TASK SET endNs = NULL WHERE rowid = ?", (last[2],))
    c.commit()
    c.close()
    lake = Lake(tmp_path / "lake")
    res = run_profile(None, lake, "half", tmp_path / "out", lang="en", train=[tmp_path / "train"],
                      infer=[tmp_path / "infer"], allow_missing=True, progress=False)
    assert res.evidence == {"train": "evidence_missing", "infer": "device"}
    con = Console(record=True, width=80)
    print_run_summary(res, con, lake.root)
    lines = con.export_text().splitlines()
    assert f"lake:   {lake.root}" in lines and f"chart:  {res.chart_path}" in lines
    assert res.chart_path.name == "op_diff_overview.png" and res.chart_path.stat().st_size > 10_000
    assert "train: evidence = evidence_missing; profiler steps counted: no evidence" in lines
    assert "infer: evidence = device; profiler steps counted: step 1 (STEP_TIME; rank 0)" in lines
    health = mart(lake.root, "SELECT side, step_source, steps_kept, invalid_rows FROM fct_capture_health "
                             "WHERE run_id = 'half' ORDER BY side")
    assert health == [("infer", "STEP_TIME", "[1]", '{"TASK.endNs < startNs":2,"TASK.endNs NULL":1}'),
                      ("train", "STEP_TIME", None, None)]  # markers read; no kernels, nothing counted
    md = res.report_path.read_text(encoding="utf-8")
    assert "| Profiler steps counted | training: no evidence<br>inference: step 1 (STEP_TIME; rank 0) |" in md
    assert "steps are selected at ingest (tilake ingest/run --profiler-step N)" in md
    assert "| TASK.endNs &lt; startNs=2, TASK.endNs NULL=1 |" in md  # "<" escaped as in the reason column
    html = res.outputs["html"].read_text(encoding="utf-8")
    assert "<td>TASK.endNs &lt; startNs=2, TASK.endNs NULL=1</td>" in html
    assert "<tr><th>Profiler steps counted</th><td>training: no evidence<br>inference: step 1 (STEP_TIME; rank 0)</td>" in html
