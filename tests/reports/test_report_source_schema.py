"""``report_source.json`` has a versioned JSON Schema (``reports/templates/report_source.schema.json``),
shipped as package data; every file the suite writes is validated against it (tests/conftest.py)."""
from __future__ import annotations

import copy
import fnmatch
import json
from pathlib import Path

import msprobe_writer as G
import pytest
import report_schema
import tomllib

from tilake.diagnosis import outputs
from tilake.pipeline.dumps import run_analyze

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report_schema")
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp / "train", w)
    G.dump_infer(cfg, tmp / "infer", "attn_scale", w=w)
    run_analyze(tmp / "train", tmp / "infer", tmp / "out", charts=False, show_progress=False)
    return tmp / "out" / "report_source.json"


def test_written_file_matches_and_names_its_version(written):
    src = json.loads(written.read_text(encoding="utf-8"))
    schema = json.loads(report_schema.SCHEMA_PATH.read_text(encoding="utf-8"))
    assert report_schema.problems(src) == []
    assert src["schema"] == schema["properties"]["schema"]["const"] == "tilake.report_source/1"
    assert schema["$id"].endswith("/report_source/1")
    assert written in report_schema.SEEN   # the session hook validated it when it was written


def test_schema_rejects_what_the_reports_would_misread(written):
    src = json.loads(written.read_text(encoding="utf-8"))
    for breaks in (lambda s: s.pop("boundaries"), lambda s: s["boundaries"][0].pop("status"),
                   lambda s: s["boundaries"][0].update(status_text="EXACT"), lambda s: s.update(schema="tilake.report_source/2"),
                   lambda s: s["summary"].update(boundaries="12"), lambda s: s.update(extra=1),
                   lambda s: s["rounds"][0].update(amplification_chain=[])):
        bad = copy.deepcopy(src)
        breaks(bad)
        assert report_schema.problems(bad), breaks


def test_the_session_hook_fails_a_bad_write(tmp_path):
    with pytest.raises(AssertionError, match="does not match report_source.schema.json"):
        outputs._write_json(tmp_path / "report_source.json", {"schema": "tilake.report_source/1"})


def test_schema_ships_as_package_data():
    globs = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["tilake"]
    rel = report_schema.SCHEMA_PATH.relative_to(REPO).as_posix()
    assert any(fnmatch.fnmatch(rel, g) for g in globs), (rel, globs)


def test_the_record_types_name_the_schema_keys():
    # tilake.lake.dump_records.ReportSource / BoundaryRow (the typed records of the seam) and the JSON
    # Schema state the same keys, and report_source() writes exactly the slim boundary keys
    from tilake.lake.dump_records import BoundaryRow, ReportSource

    schema = json.loads(report_schema.SCHEMA_PATH.read_text(encoding="utf-8"))
    assert list(ReportSource.__annotations__) == schema["required"]
    assert list(BoundaryRow.__annotations__) == schema["$defs"]["boundary"]["required"] \
        == schema["$defs"]["boundary_key"]["enum"]


def test_written_boundaries_have_the_record_keys(written):
    from tilake.lake.dump_records import BoundaryRow

    src = json.loads(written.read_text(encoding="utf-8"))
    assert src["boundaries"] and all(list(b) == list(BoundaryRow.__annotations__) for b in src["boundaries"])
