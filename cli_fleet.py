"""The fleet options of the command line (docs/fleet.md), installed on :data:`tilake.cli.main` by
:func:`install` (kept out of ``cli.py``, which is at the 500-line limit):

* ``--ray [auto|local|ADDRESS]`` on ``ingest``, ``run`` and ``scan``: stored on the command's
  :class:`tilake.cli_context.CliContext` (never in ``os.environ``) and passed as ``ray=`` to
  :func:`tilake.pipeline.profile.captures_for` (unset: ``$TILAKE_RAY``, :func:`tilake.settings.ray_address`): one
  Ray task per capture on the node that holds it (:mod:`tilake.ingest.profiler.fleet`). Given without a
  value it means ``auto``; a value that is not an address (a folder right after ``--ray``) is one
  ``error:`` line.
* ``tilake runs compact RUN``: merge the many small Parquet files of a run's partitions
  (:func:`tilake.lake.compact.compact_run`).
"""
from __future__ import annotations

from pathlib import Path

import click

from tilake import settings
from tilake.cli_context import cli_context


def _set_ray(ctx, param, value):
    if value:
        from tilake.ingest.profiler.fleet import check_address

        cli_context(ctx).ray = check_address(value)
    return value


RAY_OPTION = click.Option(
    ["--ray"], is_flag=False, flag_value="auto", default=None, expose_value=False, callback=_set_ray,
    metavar="[auto|local|ADDRESS]", envvar=settings.RAY, show_envvar=True,
    help="Ingest with one Ray task per capture, on the node that holds it (auto: the Ray cluster of this "
         "machine, else a local Ray; local; HOST:PORT). The lake must be on storage every node sees. "
         "Needs pip install '.[ray]'; see docs/fleet.md.")


@click.command("compact")
@click.argument("run_id")
@click.option("--min-files", type=click.IntRange(min=2), default=2, show_default=True,
              help="Merge a partition folder holding at least this many Parquet files.")
@click.option("--lake", "lake_path", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar=settings.LAKE, show_envvar=True, help="Lake folder (default ./tilake-lake).")
@click.pass_context
def runs_compact(ctx, run_id, min_files, lake_path) -> None:
    """Merge RUN_ID's many small Parquet files into one per partition folder (rows unchanged; swapped in
    by one atomic commit). The warehouse needs no rebuild."""
    from tilake.lake.compact import compact_run
    from tilake.lake.store import validate_run_id

    validate_run_id(run_id)
    lake = cli_context(ctx).lake(lake_path)
    merged = compact_run(lake, run_id, min_files=min_files)
    if not merged:
        click.echo(f"run {run_id}: no partition folder holds {min_files} or more small files; nothing changed")
        return
    click.echo(f"run {run_id}: " + ", ".join(f"{t} {n} file(s) merged away" for t, n in merged.items()))


def install(main: click.Group) -> None:
    """Add ``--ray`` to ``ingest``/``run``/``scan`` and ``compact`` to the ``runs`` group of ``main``."""
    for name in ("ingest", "run", "scan"):
        cmd = main.commands.get(name)
        if cmd is not None and not any(p.name == "ray" for p in cmd.params):
            cmd.params.append(RAY_OPTION)
    runs = main.commands.get("runs")
    if isinstance(runs, click.Group) and "compact" not in runs.commands:
        runs.add_command(runs_compact)
