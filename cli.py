"""tilake command line (click). Thin: each command parses options and calls one function.

Every user-input problem surfaces as ``error: <one line>`` on stderr with exit status 2
(:class:`tilake.ingest.errors.TilakeError`), never a traceback.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .ingest.errors import TilakeError

LAKE_OPTION = click.option(
    "--lake", "lake_path", type=click.Path(file_okay=False, path_type=Path), default=None,
    envvar="TILAKE_LAKE", show_envvar=True,
    help="Lake folder (default ./tilake-lake).")


class _Group(click.Group):
    """A click group that turns TilakeError into one clean line and exit status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TilakeError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="tilake")
def main() -> None:
    """tilake — the train–infer consistency lake (Ascend NPU, verl: Megatron + vLLM)."""


# --- profiler: ingest / build / report / example (foundation) -------------------------------

# --- dumps (dump analysis) -------------------------------------------------------------------

# --- scan (RL launch script → report) --------------------------------------------------------

# --- runs / sql / trend (across runs) --------------------------------------------------------


if __name__ == "__main__":  # pragma: no cover
    main()
