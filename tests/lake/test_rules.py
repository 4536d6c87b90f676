"""User rules (``--rules DIR`` / ``$TILAKE_RULES`` / ``<lake>/rules/``): seed CSVs that extend or override the
shipped ones, recorded with the build, and a change of rules refreshes the marts fully."""
from __future__ import annotations

import csv
import json

import duckdb
import pytest

from tilake import settings
from tilake.errors import TilakeError
from tilake.lake import rules
from tilake.lake.store import Lake
from tilake.lake.warehouse import PROJECT_DIR, build_swapped, project_fingerprint
from tilake.pipeline.example import EXAMPLE_RUN_ID, run_example

SHIPPED = PROJECT_DIR / "seeds" / "grading_rules.csv"


def _write(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _shipped_row(rule_id):
    with open(SHIPPED, newline="", encoding="utf-8") as f:
        return next(r for r in csv.DictReader(f) if r["rule_id"] == rule_id)


def test_merge_replaces_by_key_and_adds_new_rows(tmp_path):
    row = dict(_shipped_row("same_ops"), grade="yellow")
    cols = list(row)
    new = dict(row, rule_id="my_rule", priority="5")
    # the user's columns may come in another order
    _write(tmp_path / "grading_rules.csv", cols[::-1], [[r[c] for c in cols[::-1]] for r in (row, new)])
    text, counts = rules.merge_seed(SHIPPED, tmp_path / "grading_rules.csv")
    merged = list(csv.DictReader(text.splitlines()))
    assert counts == {"rows": 13, "replaced": 1, "added": 1}
    assert [r["grade"] for r in merged if r["rule_id"] == "same_ops"] == ["yellow"]
    assert merged[-1]["rule_id"] == "my_rule" and list(merged[0]) == cols


def test_bad_rules_files_are_one_line(tmp_path):
    _write(tmp_path / "grading_rules.csv", ["rule_id", "grade"], [["same_ops", "red"]])
    with pytest.raises(TilakeError, match=r"header differs .*missing: priority, diff_type_zh"):
        rules.project_with_rules(PROJECT_DIR, tmp_path, tmp_path / "work")
    (tmp_path / "grading_rules.csv").unlink()
    _write(tmp_path / "my_catalog.csv", ["a"], [["b"]])
    with pytest.raises(TilakeError, match="not a tilake rules file: use one of op_catalog.csv"):
        rules.project_with_rules(PROJECT_DIR, tmp_path, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_rules_dir_precedence(tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    monkeypatch.delenv(settings.RULES, raising=False)
    assert rules.rules_dir(lake) is None
    (lake / "rules").mkdir(parents=True)
    assert rules.rules_dir(lake) == lake / "rules"
    (tmp_path / "env").mkdir()
    monkeypatch.setenv(settings.RULES, str(tmp_path / "env"))
    assert rules.rules_dir(lake) == tmp_path / "env"
    assert rules.rules_dir(lake, tmp_path / "lake" / "rules") == (lake / "rules").resolve()
    monkeypatch.setenv(settings.RULES, str(tmp_path / "nope"))
    with pytest.raises(TilakeError, match="rules folder not found"):
        rules.rules_dir(lake)


def _grades(lake, rule_id):
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    try:
        g = con.execute("select grade, count(*) from fct_op_comparison where run_id = ? and rule_id = ? group by 1",
                        [EXAMPLE_RUN_ID, rule_id]).fetchall()
        state = con.execute("select project_sha256, rules from tilake_project_state").fetchone()
    finally:
        con.close()
    return dict(g), state


def test_a_rules_dir_changes_a_grade_and_is_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.RULES, raising=False)
    run_example(tmp_path / "ex")
    lake = Lake(tmp_path / "ex" / "lake")
    before, (sha, recorded) = _grades(lake, "same_ops")
    assert set(before) == {"green"} and before["green"] >= 1 and recorded == "" and sha == project_fingerprint()
    # <lake>/rules/ is found without any option; same_ops now grades yellow
    (lake.root / "rules").mkdir()
    row = dict(_shipped_row("same_ops"), grade="yellow")
    _write(lake.root / "rules" / "grading_rules.csv", list(row), [list(row.values())])
    res = build_swapped(lake, progress=False)
    assert res.success and res.full_refresh   # the project fingerprint changed with the rules
    assert res.rules["files"] == {"grading_rules.csv": {"rows": 12, "replaced": 1, "added": 0}}
    after, (sha2, recorded) = _grades(lake, "same_ops")
    assert after == {"yellow": before["green"]} and sha2 != sha
    rec = json.loads(recorded)
    assert rec["dir"] == str(lake.root / "rules") and rec["files"] == {
        "grading_rules.csv": {"rows": 12, "replaced": 1, "added": 0}} and len(rec["sha256"]) == 64
    # the packaged project was not touched; without the rules the next build refreshes back
    assert "same_ops,10,green" in SHIPPED.read_text(encoding="utf-8")
    (lake.root / "rules" / "grading_rules.csv").unlink()
    (lake.root / "rules").rmdir()
    res = build_swapped(lake, progress=False)
    assert res.full_refresh and res.rules is None and _grades(lake, "same_ops")[0] == before


def test_ingest_records_the_rules_in_force_in_the_runs_row(tmp_path, monkeypatch):
    """``runs.rules``: the folder, the same sha256 the build records, and the files; NULL without rules."""
    from tilake.ingest.profiler.discover import explicit
    from tilake.ingest.profiler.load import ingest_profile
    from tilake.synth.db import write_profiler_db
    from tilake.synth.population import JobConfig, infer_population
    from profiler_helpers import pt_db, raw

    monkeypatch.delenv(settings.RULES, raising=False)
    write_profiler_db(pt_db(tmp_path / "cap", "i"), infer_population(JobConfig(layers=1)))
    lake = Lake(tmp_path / "lake")
    ingest_profile(lake, "plain", explicit(tmp_path / "cap", "infer"), allow_missing=True, progress=False)
    ours = tmp_path / "my_rules"
    ours.mkdir()
    row = dict(_shipped_row("same_ops"), grade="yellow")
    _write(ours / "grading_rules.csv", list(row), [list(row.values())])
    monkeypatch.setenv(settings.RULES, str(ours))
    ingest_profile(lake, "ruled", explicit(tmp_path / "cap", "infer"), allow_missing=True, progress=False)
    got = dict(raw(lake.root, "runs", "true").aggregate("run_id, rules").fetchall())
    assert got["plain"] is None
    rec = json.loads(got["ruled"])
    _proj, built = rules.project_with_rules(PROJECT_DIR, ours, tmp_path / "work")
    assert rec == {"dir": str(ours.resolve()), "sha256": built["sha256"], "files": ["grading_rules.csv"]}
    assert len(rec["sha256"]) == 64 and rules.run_record(lake.root) == got["ruled"]
