"""A side without device evidence: the HTML and the numeric outputs say evidence_missing, never "none"."""
from __future__ import annotations

import csv

from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile
from tilake.synth.db import write_profiler_db
from tilake.synth.population import JobConfig, infer_population, train_population

from profiler_helpers import pt_db


def test_html_and_tables_without_training_evidence(tmp_path):
    small = JobConfig(layers=2)
    write_profiler_db(pt_db(tmp_path / "train", "t"), train_population(small), device_tables="empty")
    write_profiler_db(pt_db(tmp_path / "infer", "i"), infer_population(small))
    res = run_profile(None, Lake(tmp_path / "lake"), "nodev", tmp_path / "out", train=[tmp_path / "train"],
                      infer=[tmp_path / "infer"], allow_missing=True, progress=False)
    assert res.status == "evidence_missing" and set(res.grade_counts) == {"evidence_missing"}
    html = res.outputs["html"].read_text(encoding="utf-8")
    assert '<p class="banner"><b>evidence_missing</b>' in html
    rows = html.split('<tbody>')[1].split('</tbody>')[0]
    assert rows.count('data-grade="evidence_missing"') == sum(res.grade_counts.values()) > 0
    assert "g-green" not in rows and "无差异" not in rows
    numeric = list(csv.DictReader(res.outputs["numeric_csv"].read_text(encoding="utf-8-sig").splitlines()))
    assert {r["grade"] for r in numeric} == {"evidence_missing"}
    assert all(r["train_device_us"] == "" and r["device_ratio_infer_over_train"] == "" for r in numeric)
    assert any(float(r["infer_device_us"] or 0) > 0 for r in numeric)
