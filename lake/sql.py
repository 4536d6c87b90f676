"""``tilake sql``: read-only SQL over the warehouse (marts) and the raw lake tables.

Three walls keep the lake unchanged:

1. the warehouse is opened with DuckDB ``read_only=True`` (any write statement fails inside
   DuckDB: "Cannot execute statement of type INSERT ... in read-only mode");
2. only ``SELECT``-type statements (SELECT, WITH, VALUES, FROM-first, SHOW, DESCRIBE, SUMMARIZE,
   PRAGMA listing) and ``EXPLAIN`` are accepted, checked with DuckDB's own parser
   (``extract_statements``) before anything runs; COPY, EXPORT, ATTACH, INSTALL/LOAD, SET,
   CALL, CREATE, INSERT, UPDATE, DELETE, DROP … are refused with one line;
3. configuration is locked after setup (``lock_configuration``), extension auto-install/load
   is off, and ``--output`` files may not be written inside the lake folder.

Raw tables are reachable as temporary views ``raw_<table>`` (e.g. ``raw_kernels``) over the
lake's Parquet (created only when the query names them, so marts-only queries stay fast).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import duckdb

from tilake.lake import schema
from tilake.lake.duck import connect, sql_str
from tilake.errors import TilakeError
from tilake.lake.store import Lake, raw_source

ALLOWED_TYPES = {"SELECT", "EXPLAIN"}
FORMATS = ("csv", "json", "parquet")


def duckdb_error_line(exc: BaseException) -> str:
    """DuckDB's error message as one line: the message and its hints, without the ``LINE n:`` caret block."""
    keep = []
    for line in str(exc).splitlines():
        if line.startswith("LINE "):
            break
        if line.strip():
            keep.append(line.strip())
    return " ".join(keep) or type(exc).__name__


def _raw_views(con, lake: Lake, only: Optional[Sequence[str]] = None) -> List[str]:

    made = []
    for t in schema.TABLES:
        if only is not None and t not in only:
            continue
        con.execute(f'CREATE OR REPLACE TEMP VIEW "raw_{t}" AS SELECT * FROM {raw_source(lake, t)}')
        made.append(f"raw_{t}")
    return made


def open_readonly(lake: Lake, sql_hint: Optional[str] = None):
    """Read-only connection to ``warehouse.duckdb`` with ``raw_<table>`` views and locked config.

    Args:
        sql_hint: the query about to run; only the raw views it names are created
            (None creates all of them).
    Raises:
        TilakeError: the warehouse does not exist or cannot be opened (e.g. held by an old-style
            writer); the message is DuckDB's, on one line.
    """
    if not lake.warehouse.exists():
        raise TilakeError("no warehouse yet", path=lake.warehouse, hint="run `tilake build` (or `tilake run`) first")
    try:
        con = connect(lake.warehouse, read_only=True)
    except duckdb.Error as exc:
        raise TilakeError(f"cannot open the warehouse read-only: {duckdb_error_line(exc)}", path=lake.warehouse)
    only = None
    if sql_hint is not None:
        low = sql_hint.lower()
        only = [t for t in schema.TABLES if f"raw_{t}" in low]
    _raw_views(con, lake, only)
    con.execute("SET enable_progress_bar = false")
    con.execute("SET lock_configuration = true")
    return con


def check_statements(con, sql: str) -> List[Any]:
    """Parse ``sql`` with DuckDB and return its statements if every one is SELECT/EXPLAIN.

    Raises:
        TilakeError: a parse error (DuckDB's message, one line), an empty query, or a statement
            of another type (named in the message).
    """
    try:
        stmts = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise TilakeError(duckdb_error_line(exc))
    if not stmts:
        raise TilakeError("empty query")
    for st in stmts:
        kind = str(st.type).rsplit(".", 1)[-1]
        if kind not in ALLOWED_TYPES:
            raise TilakeError(f"tilake sql is read-only: {kind} statements are refused "
                              "(only SELECT/WITH/SHOW/DESCRIBE/SUMMARIZE/EXPLAIN run)")
    return stmts


def query(lake: Lake, sql: str) -> Tuple[List[str], List[tuple]]:
    """Run a read-only query; returns ``(column names, rows)`` of the last statement.

    Raises:
        TilakeError: see :func:`open_readonly` / :func:`check_statements`; a DuckDB error while
            binding or running (its message on one line).
    """
    con = open_readonly(lake, sql)
    try:
        stmts = check_statements(con, sql)
        try:
            cur = None
            for st in stmts:
                cur = con.execute(st.query)
            cols = [d[0] for d in cur.description] if cur.description else []
            return cols, cur.fetchall() if cols else []
        except duckdb.Error as exc:
            raise TilakeError(duckdb_error_line(exc))
    finally:
        con.close()


def export(lake: Lake, sql: str, fmt: str, output: Path) -> int:
    """Write the result of one SELECT to ``output`` as csv (header), json (array) or parquet.

    Returns:
        rows written.
    Raises:
        TilakeError: unknown format, several statements, output inside the lake, DuckDB errors.
    """
    if fmt not in FORMATS:
        raise TilakeError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    output = Path(output).expanduser().resolve()
    root = lake.root.resolve()
    if output == root or root in output.parents:
        raise TilakeError("refusing to write query output inside the lake folder", path=output)
    if output.is_dir():
        raise TilakeError("--output is a folder; give a file name", path=output)
    con = open_readonly(lake, sql)
    try:
        stmts = check_statements(con, sql)
        if len(stmts) != 1 or str(stmts[0].type).endswith("EXPLAIN"):
            raise TilakeError("--format exports exactly one SELECT statement")
        opts = {"csv": "FORMAT csv, HEADER true", "json": "FORMAT json, ARRAY true",
                "parquet": "FORMAT parquet"}[fmt]
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = output.with_name(f".{output.name}.tmp")
        body = stmts[0].query.strip().rstrip(";")
        try:
            con.execute(f"COPY ({body}) TO {sql_str(tmp)} ({opts})")
            n = con.execute(f"SELECT count(*) FROM ({body})").fetchone()[0]
        except duckdb.Error as exc:
            tmp.unlink(missing_ok=True)
            raise TilakeError(duckdb_error_line(exc))
        tmp.replace(output)
        return n
    finally:
        con.close()


def print_result(cols: List[str], rows: List[tuple], max_rows: int = 200, console=None) -> None:
    """Rich table of a query result (first ``max_rows`` rows; the count of the rest is printed)."""
    from rich.console import Console
    from rich.table import Table
    from rich.markup import escape

    console = console or Console()
    if not cols:
        console.print("ok (no result set)")
        return
    t = Table(show_lines=False)
    for c in cols:
        t.add_column(escape(str(c)), overflow="fold")
    for r in rows[:max_rows]:
        t.add_row(*["NULL" if v is None else escape(str(v)) for v in r])
    console.print(t)
    more = len(rows) - max_rows
    console.print(f"{len(rows)} row(s)" + (f" — {more} not shown (use --max-rows or --format)" if more > 0 else ""))


# ---------------------------------------------------------------------------------- shell

def duckdb_cli() -> Optional[str]:
    """Path of the ``duckdb`` CLI: on PATH, else beside the running Python (``pip install duckdb-cli``)."""
    found = shutil.which("duckdb")
    if found:
        return found
    here = Path(sys.executable).parent / "duckdb"
    return str(here) if here.exists() else None


def shell_init_sql(lake: Lake) -> str:
    """SQL run at shell start: no extension downloads, ``raw_<table>`` temp views over the lake."""

    lines = ["SET autoinstall_known_extensions = false;", "SET autoload_known_extensions = false;"]
    for t in schema.TABLES:
        lines.append(f'CREATE OR REPLACE TEMP VIEW "raw_{t}" AS SELECT * FROM {raw_source(lake, t)};')
    return "\n".join(lines)


def open_shell(lake: Lake, input_text: Optional[str] = None, cli: Optional[str] = "auto") -> int:
    """Interactive SQL shell on the warehouse opened read-only, raw tables as ``raw_<table>`` views.

    Uses the DuckDB CLI (``duckdb -readonly``; shipped by the ``duckdb-cli`` wheel, same
    version as the Python package) when available; otherwise a minimal Python prompt
    (:class:`_MiniShell`, statements end with ``;``, read-only rules of :func:`check_statements`).

    Args:
        input_text: feed this text on stdin instead of the terminal (tests).
        cli: path of the CLI, ``"auto"`` to look it up, None to force the Python prompt.
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
            init.write_text(shell_init_sql(lake) + "\n", encoding="utf-8")
            args = [exe, "-readonly", "-init", str(init), str(lake.warehouse)]
            if input_text is not None:
                cp = subprocess.run(args, input=input_text, text=True, capture_output=True)
                sys.stdout.write(cp.stdout)
                sys.stderr.write(cp.stderr)
                return cp.returncode
            return subprocess.call(args)
    return _MiniShell(lake).run(input_text)


class _MiniShell:
    """Fallback prompt (only when no DuckDB CLI is installed): one read-only query per ``;``."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake

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
                cols, rows = query(self.lake, buf)
                print_result(cols, rows, console=console)
            except TilakeError as exc:
                console.print(f"error: {exc}", markup=False)
            buf = ""
