"""The terminal side of ``tilake sql`` (:mod:`tilake.lake.sql` runs the queries, read-only): the
command (:func:`sql_command`), result tables and line mode, and the shell (the DuckDB CLI, or a
minimal prompt when it is not installed).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from tilake.errors import TilakeError
from tilake.lake.sql import duckdb_cli, export, export_stdout, query, shell_init_sql
from tilake.lake.store import Lake


def sql_command(lake: Lake, sql: Optional[str], fmt: str = "table", output: Optional[Path] = None,
                max_rows: int = 200, allow_external_access: bool = False, params: Optional[Dict[str, str]] = None) -> int:
    """``tilake sql``: no query opens the shell; table/line print here; csv/json go to stdout unless
    ``output`` names a file (``-`` is stdout: a file named ``-`` is never written); parquet needs a file.
    ``params``: ``--param name=value`` values of the query's ``$name`` parameters.

    Returns:
        the exit status (the shell's, else 0).
    Raises:
        TilakeError: an option that does not fit the format; see :func:`tilake.lake.sql.query` / :func:`tilake.lake.sql.export`.
    """
    if sql is None:
        if fmt != "table" or output or params:
            raise TilakeError("--format/--output/--param need a QUERY")
        return open_shell(lake, allow_external_access=allow_external_access)
    if fmt in ("table", "line"):
        if output:
            raise TilakeError("--output needs --format csv, json or parquet")
        cols, rows = query(lake, sql, allow_external_access, params)
        (print_lines if fmt == "line" else print_result)(cols, rows, max_rows)
    elif output is None or str(output) == "-":
        export_stdout(lake, sql, fmt, allow_external_access, params=params)
    else:
        print(f"wrote {export(lake, sql, fmt, output, allow_external_access, params)} row(s) to {output}")
    return 0


def print_lines(cols: List[str], rows: List[tuple], max_rows: int = 200, out=None) -> None:
    """Vertical (line) mode for wide rows: one ``column = value`` line per column, a ``-- row N --``
    line before each row (DuckDB CLI ``.mode line`` with row numbers); nothing is cut or wrapped
    into columns, so it reads at 80 columns and in logs."""
    out = out or sys.stdout
    if not cols:
        out.write("ok (no result set)\n")
        return
    width = max(len(str(c)) for c in cols)
    for i, r in enumerate(rows[:max_rows], 1):
        out.write(f"-- row {i} --\n")
        for c, v in zip(cols, r):
            out.write(f"{str(c).rjust(width)} = {'NULL' if v is None else v}\n")
    more = len(rows) - max_rows
    out.write(f"{len(rows)} row(s)" + (f" — {more} not shown (use --max-rows or --format csv)" if more > 0 else "") + "\n")


def _words_width(cols: List[str], rows: List[tuple]) -> int:
    """Terminal columns a rich table of ``rows`` needs so that no word is cut: per column its longest
    word (header or value, ``NULL`` for None) plus rich's 3 columns of padding and border, plus 1."""
    need = 1
    for i, c in enumerate(cols):
        words = str(c).split() + [w for r in rows for w in ("NULL" if r[i] is None else str(r[i])).split()]
        need += max((len(w) for w in words), default=0) + 3
    return need


def print_result(cols: List[str], rows: List[tuple], max_rows: int = 200, console=None) -> None:
    """Rich table of a query result (first ``max_rows`` rows; the count of the rest is printed).

    On a terminal too narrow for the table's longest words, the rows are printed in line mode
    (:func:`print_lines`) instead of cutting words. Piped or redirected (``tilake sql … | less``, ``> out.txt``)
    the output stays a table, drawn as wide as its longest words (nothing cut); ``--format line|csv|json``
    chooses another shape.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    if not cols:
        console.print("ok (no result set)")
        return
    shown = rows[:max_rows]
    need = _words_width(cols, shown)
    if need > console.width:
        if console.is_terminal:
            # a table this wide would cut words mid-way (rich folds a word longer than its column): one
            # ``column = value`` line each instead, nothing cut
            print_lines(cols, rows, max_rows, out=console.file)
            return
        console = Console(file=console.file, width=need, color_system=None, force_terminal=False)
    t = Table(show_lines=False)
    for c in cols:
        t.add_column(escape(str(c)), overflow="fold")
    for r in rows[:max_rows]:
        t.add_row(*["NULL" if v is None else escape(str(v)) for v in r])
    console.print(t)
    more = len(rows) - max_rows
    console.print(f"{len(rows)} row(s)" + (f" — {more} not shown (use --max-rows or --format)" if more > 0 else ""))


# ---------------------------------------------------------------------------------- shell

def open_shell(lake: Lake, input_text: Optional[str] = None, cli: Optional[str] = "auto",
               allow_external_access: bool = False) -> int:
    """Interactive SQL shell on the warehouse opened read-only, raw tables as ``raw_<table>`` views.

    Uses the DuckDB CLI (``duckdb -readonly``; shipped by the ``duckdb-cli`` wheel, same
    version as the Python package) when available: it runs what the user types (it is their own
    terminal), with file access limited to the lake folder and the configuration locked by
    :func:`tilake.lake.sql.shell_init_sql`. Otherwise a minimal Python prompt (:class:`_MiniShell`, statements end
    with ``;``, the read-only rules of :func:`tilake.lake.sql.check_statements`).

    Args:
        input_text: feed this text on stdin instead of the terminal (tests).
        cli: path of the CLI, ``"auto"`` to look it up, None to force the Python prompt.
        allow_external_access: let statements read files outside the lake.
    Returns:
        the shell's exit status.
    """
    if not lake.warehouse.exists():
        raise TilakeError("no warehouse yet", path=lake.warehouse, hint="run `tilake build` (or `tilake run`) first")
    exe = duckdb_cli() if cli == "auto" else cli
    if exe:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="tilake-shell-") as d:   # nothing is written to the lake
            init = Path(d) / "init.sql"
            init.write_text(shell_init_sql(lake, allow_external_access) + "\n", encoding="utf-8")
            args = [exe, "-readonly", "-init", str(init), str(lake.warehouse)]
            if input_text is not None:
                cp = subprocess.run(args, input=input_text, text=True, capture_output=True)
                sys.stdout.write(cp.stdout)
                sys.stderr.write(cp.stderr)
                return cp.returncode
            return subprocess.call(args)
    return _MiniShell(lake, allow_external_access).run(input_text)


class _MiniShell:
    """Fallback prompt (only when no DuckDB CLI is installed): one read-only query per ``;``."""

    def __init__(self, lake: Lake, allow_external_access: bool = False) -> None:
        self.lake = lake
        self.allow_external_access = allow_external_access

    def run(self, input_text: Optional[str] = None) -> int:
        from rich.console import Console

        console = Console()
        console.print("tilake sql shell (no duckdb CLI found: `pip install duckdb-cli` for the full shell); "
                      "end statements with ';', .quit to leave")
        lines = iter(input_text.splitlines()) if input_text is not None else None
        buf = ""
        while True:
            try:
                line = next(lines) if lines is not None else input("tilake> " if not buf else "   ...> ")
            except (StopIteration, EOFError):
                return 0
            if line.strip() in (".quit", ".exit", "\\q"):
                return 0
            buf += line + "\n"
            if not buf.strip().endswith(";"):
                continue
            try:
                cols, rows = query(self.lake, buf, self.allow_external_access)
                print_result(cols, rows, console=console)
            except TilakeError as exc:
                console.print(f"error: {exc}", markup=False)
            buf = ""
