"""A side without device evidence: the HTML and the numeric outputs say evidence_missing, never "none", and
``tilake run`` exits 3 (outputs written, nothing comparable; README "Exit status")."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner
from profiler_helpers import pt_db

from tilake.cli import main
from tilake.synth.db import write_profiler_db
from tilake.synth.population import JobConfig, infer_population, train_population


def test_html_and_tables_without_training_evidence(tmp_path):
    small = JobConfig(layers=2)
    write_profiler_db(pt_db(tmp_path / "train", "t"), train_population(small), device_tables="empty")
    write_profiler_db(pt_db(tmp_path / "infer", "i"), infer_population(small))
    r = CliRunner().invoke(main, ["run", "--train", str(tmp_path / "train"), "--infer", str(tmp_path / "infer"),
                                  "--run-id", "nodev", "--lake", str(tmp_path / "lake"), "--out", str(tmp_path / "out"),
                                  "--allow-missing", "--json"])
    assert r.exit_code == 3, r.output
    res = json.loads(r.stdout)
    assert res["status"] == "evidence_missing" and res["exit_status"] == 3
    counts = {g: n for g, n in res["grade_counts"].items() if n}
    assert set(counts) == {"evidence_missing"} and res["one_side_only"] == {"train": 0, "infer": 0}
    assert res["profiler_steps"] == {"train": "no evidence", "infer": "step 1 (STEP_TIME; rank 0)"}
    html = Path(res["outputs"]["html"]).read_text(encoding="utf-8")
    assert '<p class="banner"><b>evidence_missing</b>' in html
    rows = html.split('<tbody>')[1].split('</tbody>')[0]
    assert rows.count('data-grade="evidence_missing"') == sum(counts.values()) > 0
    assert "g-green" not in rows and "无差异" not in rows and "独有" not in rows
    assert Path(res["outputs"]["chart"]).stat().st_size > 10_000
    numeric = list(csv.DictReader(Path(res["outputs"]["numeric_csv"]).read_text(encoding="utf-8-sig").splitlines()))
    assert {r["grade"] for r in numeric} == {"evidence_missing"}
    assert all(r["train_device_us"] == "" and r["device_ratio_infer_over_train"] == "" for r in numeric)
    assert any(float(r["infer_device_us"] or 0) > 0 for r in numeric)
