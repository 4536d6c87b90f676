"""The lake's own options and command, installed on :data:`tilake.cli.main` by :func:`install` (kept out of
``cli.py``, which is at its size limit):

* ``--wait SECONDS`` on every write command (``ingest``, ``run``, ``scan``, ``example``, ``build``, ``dbt``,
  ``runs rm``, ``runs compact``, ``dumps analyze``, ``dumps gate``): how long to wait for another writer's
  lake lock (:func:`tilake.settings.lock_wait`, default 60 s; ``0`` refuses at once). The value reaches the
  lake through :func:`tilake.settings.given` for this command only (never ``os.environ``).
* ``tilake check``: verify every run's files against its record and the run registry
  (:func:`tilake.lake.check.check_lake`).
"""
from __future__ import annotations

import sys

import click

from tilake import settings
from tilake.cli_context import JSON_OPTION, LAKE_OPTION, cli_context, emit_json

WRITE_COMMANDS = ("ingest", "run", "scan", "example", "build", "dbt", "runs rm", "runs compact",
                  "dumps analyze", "dumps gate")


def _set_wait(ctx, param, value):
    if value is not None:
        ctx.with_resource(settings.given(LOCK_WAIT=repr(float(value))))
    return value


def wait_option() -> click.Option:
    """A fresh ``--wait SECONDS`` option (one object per command)."""
    return click.Option(
        ["--wait", "lock_wait"], type=click.FloatRange(min=0), default=None, expose_value=False,
        callback=_set_wait, metavar="SECONDS", envvar=settings.LOCK_WAIT, show_envvar=True,
        help=f"Wait up to SECONDS for another tilake writer's lake lock (shown on stderr) before giving up; "
             f"0 refuses at once [default: {settings.DEFAULT_LOCK_WAIT:g}].")


@click.command("check")
@LAKE_OPTION
@JSON_OPTION
def check_cmd(lake_path, as_json) -> None:
    """Verify the lake: every run's files against the record its commit wrote (missing, changed or unreadable
    Parquet), the run registry, files no commit wrote, lake internals that are links, the lake's format and
    the warehouse. Exit 1 when anything is wrong (one line each)."""
    from tilake.lake.check import check_lake
    from tilake.vocab import ExitCode

    rep = check_lake(cli_context().lake(lake_path))
    if as_json:
        emit_json({"ok": not rep.problems, "format": rep.format, "runs": rep.runs, "files": rep.files,
                   "problems": rep.problems})
    else:
        for line in rep.problems:
            click.echo(f"problem: {line}", err=True)
        if rep.problems:
            click.echo(f"lake check: {len(rep.problems)} problem(s) in {rep.runs} run(s), {rep.files} recorded file(s)")
        else:
            click.echo(f"lake check: ok — {rep.runs} run(s), {rep.files} recorded file(s), format {rep.format}")
    if rep.problems:
        sys.exit(int(ExitCode.CHECK_FAILED))


def _command(main: click.Group, path: str):
    cmd = main
    for part in path.split():
        cmd = cmd.commands.get(part) if isinstance(cmd, click.Group) else None
        if cmd is None:
            return None
    return cmd


def install(main: click.Group) -> None:
    """Add ``--wait`` to the write commands and ``check`` to ``main``."""
    for path in WRITE_COMMANDS:
        cmd = _command(main, path)
        if cmd is not None and not any(p.name == "lock_wait" for p in cmd.params):
            cmd.params.append(wait_option())
    if "check" not in main.commands:
        main.add_command(check_cmd)

