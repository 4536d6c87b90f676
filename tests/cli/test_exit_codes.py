"""Exit statuses are the same across commands (README "Exit status", ``tilake --help``): every command's
bad-input path exits 2 with one error line and no traceback; ``run``/``example`` exit 3 when a side has
no evidence, like ``dumps analyze``."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.reports.run_console import exit_status


def _bad_inputs(tmp):
    """(command line, words the error line must hold) for each command's bad input."""
    nope, afile, nolake, lake = tmp / "nope", tmp / "afile", tmp / "nolake", tmp / "lake"
    return [
        (["ingest", str(nope), "--lake", str(lake)], "does not exist"),
        (["build", "--lake", str(nolake)], "no lake here"),
        (["report", "r1", "--lake", str(nolake), "--out", str(tmp / "o")], "run `tilake build` first"),
        (["run", str(nope), "--lake", str(lake)], "does not exist"),
        (["example", "--out", str(afile)], "is a file"),
        (["example", "--backend", "cuda"], "'cuda' is not one of"),
        (["dumps", "probe", "--train", str(nope)], "dump path does not exist"),
        (["dumps", "analyze", "--train", str(nope), "--infer", str(nope), "--out", str(tmp / "o2")],
         "dump path does not exist"),
        (["dumps", "stub-prepare", "--train", str(nope), "--infer", str(nope), "--instruction",
          str(tmp / "nope.json"), "--out", str(tmp / "o3")], "cannot read stub instruction"),
        (["dumps", "maps", "extra"], "unexpected extra argument"),
        (["dumps", "gate", str(nope), str(nope)], "dump path does not exist"),
        (["scan", str(tmp / "nope.sh"), "--lake", str(lake)], "no such file"),
        (["runs", "--lake", str(afile)], "is a file"),
        (["runs", "rm", "bad!id", "--lake", str(lake)], "invalid run id"),
        (["runs", "compact", "bad!id", "--lake", str(lake)], "invalid run id"),
        (["runs", "diff", "a", "b", "--lake", str(nolake)], "no warehouse yet"),
        (["sql", "select 1", "--format", "csv", "--lake", str(nolake)], "no warehouse yet"),
        (["dbt", "--lake", str(nolake), "--", "ls"], "no lake here"),
        (["trend", "--metric", "nosuch", "--lake", str(nolake)], "unknown trend 'nosuch'"),
        (["mcp", "--lake", str(lake), "--out", str(afile)], "is a file"),
        (["check", "--lake", str(nolake)], "no lake here"),
    ]


def test_every_command_exits_2_on_bad_input(tmp_path):
    (tmp_path / "afile").write_text("x")
    seen = set()
    for args, words in _bad_inputs(tmp_path):
        r = CliRunner().invoke(main, args)
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output, (args, r.output)
        # tilake's own errors say "error:", click's usage errors "Error:"; one such line, the last
        assert lines and lines[-1].lower().startswith("error: ") and words in lines[-1], (args, lines[-1:])
        assert sum(ln.lower().startswith("error: ") for ln in lines) == 1, (args, r.output)
        group = main.commands[args[0]]
        seen.add(f"{args[0]} {args[1]}" if args[1] in getattr(group, "commands", {}) else args[0])
    commands = {c for c in main.commands if c != "dumps"} | {f"dumps {c}" for c in main.commands["dumps"].commands} \
        | {f"runs {c}" for c in main.commands["runs"].commands}
    assert commands == seen, commands ^ seen   # every command (and subcommand) has a bad-input case


@pytest.mark.parametrize("status,code", [("ok", 0), ("evidence_missing", 3), ("host_fallback", 3)])
def test_run_and_example_exit_3_without_evidence(status, code):
    assert exit_status(SimpleNamespace(status=status)) == code


def test_help_documents_the_exit_statuses():
    r = CliRunner().invoke(main, ["--help"], terminal_width=100)
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for part in ("0 done", "1 scan skipped the comparison", "2 bad input", "3 outputs written, nothing comparable (evidence_missing)"):
        assert part in text, part
