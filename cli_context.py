"""What the command line hands every command: the :class:`CliContext` on ``ctx.obj``, the shared
options and parameter types, and the one JSON emitter of every ``--json``.

The options of the front door never write ``os.environ``: ``--rules``, ``--quiet``/``--verbose`` and
``--ray`` store their value on the context; the command passes ``ray`` on as an argument and runs
inside :meth:`CliContext.applied`, where :mod:`tilake.settings` reads ``--rules`` and the dbt progress
level before the environment (:func:`tilake.settings.given`), for that command only.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import click

from tilake import settings
from tilake.errors import TilakeError

# --- parameter types: a bad value fails at the door with one `error:` line (datasette style) -----

class DoorError(click.BadParameter):
    """A bad option value found by one of tilake's ParamTypes; printed as one ``error:`` line."""

    door_message = True


class _TilakeType(click.ParamType):
    """Base of tilake's ParamTypes: :meth:`fail` raises :class:`DoorError` with the plain message."""

    def fail(self, message, param=None, ctx=None):
        raise DoorError(message, ctx=ctx, param=param)

    @staticmethod
    def _opt(param) -> str:
        return (param.opts[0] if param is not None and getattr(param, "opts", None) else "value")


class RunId(_TilakeType):
    """A run id: ``[A-Za-z0-9._-]+`` (:func:`tilake.lake.store.validate_run_id`)."""

    name = "run_id"

    def convert(self, value, param, ctx):
        from tilake.lake.run_ids import validate_run_id

        try:
            return validate_run_id(value)
        except TilakeError as exc:
            self.fail(str(exc), param, ctx)


class KeyValue(_TilakeType):
    """``key=value`` → ``(key, value)`` (both stripped); with ``numbers`` a digits-only value → int."""

    name = "key=value"

    def __init__(self, numbers: bool = False) -> None:
        self.numbers = numbers

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        if "=" not in value:
            self.fail(f"{self._opt(param)} expects key=value, got {value!r}", param, ctx)
        k, v = value.split("=", 1)
        v = v.strip()
        return k.strip(), (int(v) if self.numbers and v.isdigit() else v)


class IntList(_TilakeType):
    """Comma-separated integers (``0,5,13``) → ``[0, 5, 13]``."""

    name = "int,int,..."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            return [int(x) for x in str(value).split(",")]
        except ValueError:
            self.fail(f"{self._opt(param)} must be comma-separated integers, got {value!r}", param, ctx)


class TokenRange(_TilakeType):
    """``START:END`` → ``(start, end)`` integers."""

    name = "start:end"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            a, b = (int(x) for x in str(value).split(":"))
        except ValueError:
            self.fail(f"{self._opt(param)} must be START:END, got {value!r}", param, ctx)
        return a, b


RUN_ID = RunId()

LAKE_OPTION = click.option(
    "--lake", "lake_path", type=click.Path(file_okay=False, path_type=Path), default=None,
    envvar=settings.LAKE, show_envvar=True,
    help="Lake folder (default ./tilake-lake).")

JSON_OPTION = click.option("--json", "as_json", is_flag=True,
                           help="Print a machine-readable JSON summary on stdout (nothing else goes to stdout).")


@dataclass
class CliContext:
    """The values the options of one ``tilake`` command line gave (None: not given).

    Attributes:
        lake_path: ``--lake`` of a group (``tilake runs --lake X rm R``), the default of its subcommands.
        rules: ``--rules DIR`` (seed CSVs over the shipped ones). dbt_progress: ``quiet`` or ``verbose``.
        ray: ``--ray`` (checked: ``auto``, ``local`` or an address).
    """

    lake_path: Optional[Path] = None
    rules: Optional[str] = None
    dbt_progress: Optional[str] = None
    ray: Optional[str] = None

    def lake(self, lake_path: Optional[Path] = None):
        """The :class:`~tilake.lake.store.Lake` of ``lake_path``, else of the group's ``--lake``, else the default."""
        from tilake.lake.store import Lake

        return Lake(lake_path or self.lake_path)

    @contextlib.contextmanager
    def applied(self) -> Iterator["CliContext"]:
        """The block sees ``--rules`` and the dbt progress level through :func:`tilake.settings.given`."""
        with settings.given(RULES=self.rules, DBT_PROGRESS=self.dbt_progress):
            yield self


def cli_context(ctx: Optional[click.Context] = None) -> CliContext:
    """The :class:`CliContext` of the running command line (made on first use, on the root context)."""
    ctx = ctx or click.get_current_context()
    root = ctx.find_root()
    if not isinstance(root.obj, CliContext):
        root.obj = CliContext()
    return root.obj


def _store(name: str, value_of=lambda v: v):
    def callback(ctx, param, value):
        if value:
            setattr(cli_context(ctx), name, value_of(value))
        return value
    return callback


def dbt_options(f):
    """``--rules DIR``, ``--verbose`` and ``--quiet`` of the dbt build (on build/run/example), stored on the
    context; the command body runs inside :meth:`CliContext.applied`."""
    @functools.wraps(f)
    def run(*args, **kwargs):
        with cli_context().applied():
            return f(*args, **kwargs)

    run = click.option("--rules", type=click.Path(exists=True, file_okay=False), expose_value=False,
                       callback=_store("rules"), help="Folder of seed CSVs (op_catalog, grading_rules, "
                       "recommendations...) extending the shipped ones [env var: TILAKE_RULES; default "
                       "<lake>/rules/].")(run)
    for flag, text in (("verbose", "A line per dbt node."), ("quiet", "No dbt progress (failures and the summary only).")):
        run = click.option("--" + flag, is_flag=True, expose_value=False, help=text,
                           callback=_store("dbt_progress", lambda v, lv=flag: lv))(run)
    return run


def emit_json(obj: Any) -> None:
    """The one JSON emitter of every ``--json``/``--format json`` (:func:`tilake.reports.json_out.emit_json`)."""
    from tilake.reports.json_out import emit_json as emit

    emit(obj)
