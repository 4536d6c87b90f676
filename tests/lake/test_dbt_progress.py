"""dbt as a person runs it: "N of M nodes" from dbt's events (not a spinner, also in logs), --quiet /
--verbose, the dbt log named on failure, and ``tilake dbt -- <args>`` on the packaged project."""
from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tilake import settings
from tilake.cli import main
from tilake.errors import TilakeError
from tilake.lake.store import Lake
from tilake.lake.warehouse import BuildResult, DbtProgress, dbt_passthrough


def _events(total):
    """The dbt events DbtProgress reads, shaped as dbtRunner hands them to a callback (EventMsg)."""
    for i in range(1, total + 1):
        node = SimpleNamespace(node_name=f"m{i}", resource_type="model" if i % 2 else "test", node_status="success")
        yield SimpleNamespace(info=SimpleNamespace(name="LogStartLine"), data=SimpleNamespace(index=i, total=total))
        yield SimpleNamespace(info=SimpleNamespace(name="LogModelResult"), data=SimpleNamespace())
        yield SimpleNamespace(info=SimpleNamespace(name="NodeFinished"), data=SimpleNamespace(
            node_info=node, run_result=SimpleNamespace(status="pass" if i % 2 == 0 else "success", execution_time=0.25)))


def _feed(level, total=23, tty=False):
    out = io.StringIO()
    out.isatty = lambda: tty
    p = DbtProgress("build", level, out)
    for ev in _events(total):
        p(ev)
    p.close()
    return out.getvalue()


def test_plain_lines_in_logs_one_per_tenth():
    lines = _feed("normal").splitlines()
    assert lines[0] == "dbt build: 3 of 23 nodes" and lines[-1] == "dbt build: 23 of 23 nodes"
    assert len(lines) == 10 and all(line.startswith("dbt build: ") for line in lines)


def test_terminal_rewrites_one_line_and_ends_it():
    text = _feed("normal", total=5, tty=True)
    assert text == "".join(f"\rdbt build: {i} of 5 nodes" for i in range(1, 6)) + "\n"


def test_verbose_a_line_per_node_and_quiet_nothing():
    lines = _feed("verbose", total=4).splitlines()
    assert lines == ["dbt build: 1 of 4 nodes  model m1 success 0.25 s", "dbt build: 2 of 4 nodes  test m2 pass 0.25 s",
                     "dbt build: 3 of 4 nodes  model m3 success 0.25 s", "dbt build: 4 of 4 nodes  test m4 pass 0.25 s"]
    assert _feed("quiet") == ""
    assert settings.dbt_progress({}) == "normal" and settings.dbt_progress({"TILAKE_DBT_PROGRESS": "Quiet"}) == "quiet"
    assert settings.dbt_progress({"TILAKE_DBT_PROGRESS": "loud"}) == "normal"


def test_failure_names_the_dbt_log():
    res = BuildResult(False, [("fct_x", "model", "error", "Binder Error: column y\nLINE 3")],
                      log_path=Path("/lake/.dbt/logs/dbt.log"))
    with pytest.raises(TilakeError, match=r"^dbt build failed \(fct_x: Binder Error: column y\); "
                                          r"dbt log: /lake/.dbt/logs/dbt.log$"):
        res.raise_if_failed()


def test_dbt_passthrough_needs_a_lake(tmp_path):
    with pytest.raises(TilakeError, match="no lake here"):
        dbt_passthrough(Lake(tmp_path / "nope"), ["ls"])
    assert not (tmp_path / "nope").exists()


@pytest.fixture(scope="module")
def example_lake(example_run):
    return Lake(example_run[0] / "lake")   # the session's example (tests/conftest.py); builds leave its data as is


def test_build_prints_n_of_m_from_real_dbt_events_and_verbose_quiet(example_lake, monkeypatch):
    monkeypatch.setenv(settings.DBT_PROGRESS, "normal")   # recorded: the CLI flag's setting is undone after the test
    r = CliRunner().invoke(main, ["build", "--check", "--verbose", "--lake", str(example_lake.root)])   # every node
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("dbt build: ")]
    total = int(lines[0].split(" of ")[1].split()[0])
    assert total > 50 and len(lines) == total and lines[-1].startswith(f"dbt build: {total} of {total} nodes  ")
    assert any(" model fct_op_comparison success " in line for line in lines)
    assert r.stdout.splitlines()[-1].startswith("dbt build: ") and "0 failed" in r.stdout
    monkeypatch.setenv(settings.DBT_PROGRESS, "normal")   # recorded: the CLI flag's setting is undone after the test
    r = CliRunner().invoke(main, ["build", "--quiet", "--lake", str(example_lake.root)])
    assert r.exit_code == 0 and " of " not in r.stderr


def test_tilake_dbt_runs_the_packaged_project_against_the_lake(example_lake, capfd):
    assert dbt_passthrough(example_lake, ["ls", "--resource-type", "source", "--output", "name"]) == 0
    out = capfd.readouterr().out
    assert "kernels" in out and "boundary_results" in out
    assert (example_lake.root / ".dbt" / "target" / "manifest.json").is_file()
