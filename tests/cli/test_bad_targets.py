"""Bad output targets and bad option values are one ``error:`` line with exit 2, never a traceback or
click's usage block (found by a new-user break test: `sql -o` under a file, `example --out` that cannot
be created, `--out` naming a file, a bad `--format` choice)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main


def _one_error_line(args):
    r = CliRunner().invoke(main, args, prog_name="tilake")
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output and "Usage:" not in r.output
    return lines[0]


@pytest.fixture()
def a_file(tmp_path) -> Path:
    f = tmp_path / "afile"
    f.write_text("x")
    return f


def test_sql_export_below_a_file(tmp_path, a_file):
    line = _one_error_line(["sql", "--lake", str(tmp_path / "lake"), "select 1", "--format", "csv",
                            "-o", str(a_file / "x.csv")])
    assert str(a_file) in line or "no warehouse" in line
    assert a_file.read_text() == "x"


def test_out_naming_a_file_is_one_line(a_file):
    line = _one_error_line(["report", "r1", "--out", str(a_file)])
    assert "'--out'" in line and "is a file" in line and "(tilake report --help)" in line


def test_bad_choice_is_one_line():
    line = _one_error_line(["sql", "select 1", "--format", "xml"])
    assert "'--format'" in line and "'xml'" in line


def test_example_out_that_cannot_be_created(a_file):
    line = _one_error_line(["example", "--out", str(a_file / "ex")])
    assert str(a_file) in line


@pytest.mark.parametrize("args, says", [
    (["ingest", "--lake-dir", "x"], "no such option '--lake-dir'. Did you mean '--lake'? (tilake ingest --help)"),
    (["nosuchcmd"], "no such command 'nosuchcmd' (tilake --help)"),
    (["--bogus"], "no such option '--bogus' (tilake --help)"),
    (["ingest", "--train"], "option '--train' requires an argument (tilake ingest --help)"),
    (["dumps", "nosuch"], "no such command 'nosuch' (tilake dumps --help)"),
])
def test_unknown_option_or_command_is_one_line(args, says):
    """click's own answer is a usage block and a capitalised ``Error:`` (a break-test finding)."""
    assert _one_error_line(args) == f"error: {says}"
