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
    assert counts == {"rows": 19, "replaced": 1, "added": 1}
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
    assert res.rules["files"] == {"grading_rules.csv": {"rows": 18, "replaced": 1, "added": 0}}
    after, (sha2, recorded) = _grades(lake, "same_ops")
    assert after == {"yellow": before["green"]} and sha2 != sha
    rec = json.loads(recorded)
    assert rec["dir"] == str(lake.root / "rules") and rec["files"] == {
        "grading_rules.csv": {"rows": 18, "replaced": 1, "added": 0}} and len(rec["sha256"]) == 64
    # the packaged project was not touched; without the rules the next build refreshes back
    assert "same_ops,10,green" in SHIPPED.read_text(encoding="utf-8")
    (lake.root / "rules" / "grading_rules.csv").unlink()
    (lake.root / "rules").rmdir()
    res = build_swapped(lake, progress=False)
    assert res.full_refresh and res.rules is None and _grades(lake, "same_ops")[0] == before


def test_ingest_records_the_rules_in_force_in_the_runs_row(tmp_path, monkeypatch):
    """``runs.rules``: the folder, the same sha256 the build records, and the files; NULL without rules."""
    from profiler_helpers import pt_db, raw

    from tilake.ingest.profiler.discover import explicit
    from tilake.ingest.profiler.load import ingest_profile
    from tilake.synth.db import write_profiler_db
    from tilake.synth.population import JobConfig, infer_population

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


def _rules_text(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


GRADING_HEADER = "rule_id,priority,grade,diff_type_zh,diff_type_en,rule_zh,rule_en\n"


@pytest.mark.parametrize("body, problem", [
    # a quote opened on line 3 and never closed: csv would swallow the rest of the file into one field
    ('same_ops,10,green,相同,identical,a,b\nmy_rule,5,red,"x,y,z,w\n',
     'line 3: not valid CSV (unexpected end of data; a quote opened on this line is never closed?)'),
    ("same_ops,10,green,相同,identical\n",
     "line 2: 5 columns where the header has 7 (write every column, an empty one as nothing between two commas)"),
    ("same_ops,10,green,a,b,c,d,e\n", "line 2: 8 columns where the header has 7 (a comma inside a text must be quoted)"),
    ("same_ops,10,green,a,b,c,d\nmy_rule,5,purple,a,b,c,d\n",
     "line 3, column grade: unknown grade 'purple' (grades: evidence_missing, green, orange, red, yellow; "
     "a new grade needs a row in grades.csv)"),
    ("same_ops,high,green,a,b,c,d\n", "line 2, column priority: 'high' is not an integer"),
    ("same_ops,,green,a,b,c,d\n", "line 2, column priority: empty, a value is required"),
])
def test_bad_rows_are_one_line_naming_file_and_line(tmp_path, body, problem):
    f = _rules_text(tmp_path / "r" / "grading_rules.csv", GRADING_HEADER + body)
    with pytest.raises(TilakeError) as e:
        rules.project_with_rules(PROJECT_DIR, tmp_path / "r", tmp_path / "work")
    assert str(e.value) == f"{f}: {problem}"
    assert not (tmp_path / "work").exists()   # nothing written before the check


def test_bool_column_and_user_grades(tmp_path):
    # op_catalog.fused is true/false in every shipped row (dbt infers a boolean column)
    cols = (PROJECT_DIR / "seeds" / "op_catalog.csv").read_text(encoding="utf-8").splitlines()[0]
    f = _rules_text(tmp_path / "r" / "op_catalog.csv", cols + "\nop_type,MyOp,10,attention,attention,yes,,,,,,,x\n")
    with pytest.raises(TilakeError, match=r"op_catalog.csv: line 2, column fused: 'yes' is not true or false$"):
        rules.project_with_rules(PROJECT_DIR, tmp_path / "r", tmp_path / "work")
    f.unlink()
    # a grade the folder's grades.csv adds is known to the other rules files
    _rules_text(tmp_path / "r" / "grades.csv", "grade,emoji,label_zh,label_en,color,severity_rank\n"
                "purple,🟣,紫,purple,purple,2\n")
    _rules_text(tmp_path / "r" / "grading_rules.csv", GRADING_HEADER + "same_ops,10,purple,a,b,c,d\n")
    _, rec = rules.project_with_rules(PROJECT_DIR, tmp_path / "r", tmp_path / "work")
    assert rec["files"] == {"grades.csv": {"rows": 6, "replaced": 0, "added": 1},
                            "grading_rules.csv": {"rows": 18, "replaced": 1, "added": 0}}
    assert "same_ops,10,purple,a,b,c,d" in (tmp_path / "work" / "seeds" / "grading_rules.csv").read_text("utf-8")


def _md5(p):
    import hashlib
    return hashlib.md5(p.read_bytes()).hexdigest()


def test_a_failed_build_leaves_the_lake_as_it_was(tmp_path, monkeypatch):
    """The break-test repro: rules that make dbt fail (a grade outside the marts' accepted_values) must not
    swap the warehouse in nor record their state; the next plain build is green without --full-refresh."""
    from click.testing import CliRunner

    from tilake.cli import main

    monkeypatch.delenv(settings.RULES, raising=False)
    run_example(tmp_path / "ex")
    lake = Lake(tmp_path / "ex" / "lake")
    md5, (sha, recorded) = _md5(lake.warehouse), _grades(lake, "same_ops")[1]
    q3 = tmp_path / "q3"
    _rules_text(q3 / "grades.csv", "grade,emoji,label_zh,label_en,color,severity_rank\npurple,🟣,紫,purple,purple,2\n")
    row = dict(_shipped_row("same_ops"), grade="purple")
    _write(q3 / "grading_rules.csv", list(row), [list(row.values())])
    monkeypatch.setenv(settings.RULES, str(q3))
    res = build_swapped(lake, progress=False)
    assert not res.success and res.full_refresh
    assert [n[0] for n in res.failures] == [
        "accepted_values_fct_op_comparison_grade__red__orange__yellow__green__evidence_missing"]
    assert _md5(lake.warehouse) == md5 and not (lake.root / ".build").exists()
    # an unknown grade without a grades.csv row: stopped before dbt, one line, exit 2
    (q3 / "grades.csv").unlink()
    r = CliRunner().invoke(main, ["build", "--quiet", "--lake", str(lake.root)])
    assert r.exit_code == 2 and r.output.splitlines()[-1] == (
        f"error: {q3 / 'grading_rules.csv'}: line 2, column grade: unknown grade 'purple' (grades: "
        "evidence_missing, green, orange, red, yellow; a new grade needs a row in grades.csv)"), r.output
    assert _md5(lake.warehouse) == md5
    monkeypatch.delenv(settings.RULES)
    res = build_swapped(lake, progress=False)
    assert res.success and not res.full_refresh   # the recorded state is still the shipped project's
    assert _grades(lake, "same_ops")[1] == (sha, recorded)
