"""``tilake sql``: read-only SQL over the warehouse (marts) and the raw lake tables.

Three walls keep the lake (and the rest of the disk) unchanged:

1. only SELECT-type statements (SELECT, WITH, VALUES, FROM-first, SHOW, DESCRIBE, SUMMARIZE,
   PIVOT with an IN list, listing PRAGMAs) and ``EXPLAIN``/``EXPLAIN ANALYZE`` *of such a
   statement* run. The decision is made on the statement DuckDB will execute, with DuckDB's own
   parser (``extract_statements``; :func:`executed_statements` unwraps ``EXPLAIN [ANALYZE]
   [(options)]`` with ``duckdb.tokenize`` and parses the inner text again, failing closed when it
   cannot tell): ``EXPLAIN ANALYZE COPY … TO …`` runs the COPY inside DuckDB, so it is refused
   like a bare COPY. PREPARE/EXECUTE, COPY, EXPORT, ATTACH, INSTALL/LOAD, SET, CALL, CREATE,
   INSERT, UPDATE, DELETE, DROP, … are refused with one line naming the statement type;
2. the warehouse is opened with DuckDB ``read_only=True`` (a write that slipped through fails
   inside DuckDB: "Cannot execute statement of type INSERT ... in read-only mode");
3. file access is limited to the lake folder (``SET allowed_directories``, then
   ``enable_external_access=false``: ``read_csv('/etc/passwd')``, ``COPY … TO '/tmp/x'``,
   ``INSTALL``/``LOAD`` fail with DuckDB's "Permission Error") unless the caller opts in
   (``tilake sql --allow-external-access``; never for queries read from files such as trend
   definitions), extension auto-install/load is off, and the configuration is locked
   (``lock_configuration``), so no statement can undo any of this. ``--output`` files may not be
   written inside the lake folder.

Raw tables are reachable as temporary views ``raw_<table>`` (e.g. ``raw_kernels``) over the
lake's Parquet (created only when the query names them, so marts-only queries stay fast).
"""
from __future__ import annotations

import contextlib
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import duckdb

from tilake.errors import TilakeError
from tilake.files import check_regular_target, neutralise_csv
from tilake.lake import schema
from tilake.lake.duck import sql_str
from tilake.lake.read import error_line, open_read, raw_tables_named, raw_view_sql
from tilake.lake.store import Lake

ALLOWED_TYPES = {"SELECT"}
"""Statement types that run (after unwrapping EXPLAIN): DuckDB's ``StatementType.SELECT`` covers
SELECT/WITH/VALUES/FROM-first/SHOW/DESCRIBE/SUMMARIZE/UNPIVOT and the listing PRAGMAs."""
FORMATS = ("csv", "json", "parquet")
_EXPLAIN_FLAGS = ("ANALYZE", "ANALYSE")


def duckdb_error_line(exc: BaseException) -> str:
    """DuckDB's error message as one line: the message and its hints, without the ``LINE n:`` caret block."""
    return error_line(exc)


def _lock_down(con, lake: Lake, allow_external_access: bool = False,
               allowed_paths: Sequence[Path] = ()) -> None:
    """Limit file access of ``con`` to the lake folder (plus ``allowed_paths``) and lock the config.

    DuckDB checks ``allowed_directories`` on the resolved path, so the staging views that read the
    lake through its safe link (``warehouse.dbt_lake_root``) keep working. Must run after the raw
    views are created and before any user SQL (parsing included: ``IMPORT DATABASE`` reads files
    while it is parsed).
    """
    con.execute("SET enable_progress_bar = false")
    if not allow_external_access:
        con.execute(f"SET allowed_directories = [{sql_str(str(lake.root) + '/')}]")
        if allowed_paths:
            con.execute("SET allowed_paths = [" + ", ".join(sql_str(p) for p in allowed_paths) + "]")
        con.execute("SET enable_external_access = false")
    con.execute("SET allow_community_extensions = false")
    con.execute("SET lock_configuration = true")


def open_readonly(lake: Lake, sql_hint: Optional[str] = None, allow_external_access: bool = False,
                  allowed_paths: Sequence[Path] = ()):
    """Read-only connection to ``warehouse.duckdb`` with ``raw_<table>`` views, file access limited
    to the lake folder, and locked config.

    Args:
        sql_hint: the query about to run; only the raw views it names are created
            (None creates all of them).
        allow_external_access: let queries read files outside the lake (``read_csv('/x.csv')``);
            off by default, and never on for queries that come from files.
        allowed_paths: single files the connection may also touch (the ``--output`` temp file).
    Raises:
        TilakeError: the warehouse does not exist or cannot be opened (e.g. held by an old-style
            writer); the message is DuckDB's, on one line.
    """
    con = open_read(lake, True if sql_hint is None else raw_tables_named(sql_hint))   # Lake.reading's connection
    try:
        _lock_down(con, lake, allow_external_access, allowed_paths)
    except BaseException:
        con.close()
        raise
    return con


def _kind(st) -> str:
    """Statement type name (``SELECT``, ``COPY`` …); DuckDB types the Python enum does not name
    (``UPDATE EXTENSIONS`` prints as ``???``) are named by their first word."""
    name = getattr(st.type, "name", None) or str(st.type).rsplit(".", 1)[-1]
    if not re.fullmatch(r"[A-Z_]+", name or ""):
        words = re.findall(r"[A-Za-z_]+", st.query)
        name = (" ".join(words[:2]).upper() if words else "UNKNOWN")
    return name


def _explain_inner(text: str) -> List[str]:
    """Candidate texts of the statement inside ``EXPLAIN [ANALYZE] [(options)] <statement>``.

    Tokens come from ``duckdb.tokenize`` (strings and comments are never mistaken for keywords
    or parentheses). A leading ``(`` may open an option list (``EXPLAIN (ANALYZE, FORMAT json)
    COPY …``) or a parenthesised query (``EXPLAIN (SELECT 1)``): both readings are returned and
    the caller checks every one that parses.
    """
    toks = duckdb.tokenize(text)
    ends = [p for p, _ in toks[1:]] + [len(text)]

    def word(i: int) -> str:
        return text[toks[i][0]:ends[i]].strip().split()[0].upper() if i < len(toks) else ""

    def is_op(i: int, ch: str) -> bool:
        return i < len(toks) and str(toks[i][1]).endswith("operator") and text[toks[i][0]] == ch

    i = 1
    if i < len(toks) and word(i) in _EXPLAIN_FLAGS:
        i += 1
    if i >= len(toks):
        return []
    out = [text[toks[i][0]:]]
    if is_op(i, "("):
        depth, j = 0, i
        while j < len(toks):
            if is_op(j, "("):
                depth += 1
            elif is_op(j, ")"):
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j + 1 < len(toks):
            out.append(text[toks[j + 1][0]:])
    return out


def executed_statements(con, st, _depth: int = 0) -> List[Tuple[str, str]]:
    """``(type, text)`` of what DuckDB will execute for parsed statement ``st``.

    A plain statement is itself; ``EXPLAIN``/``EXPLAIN ANALYZE`` is unwrapped (ANALYZE executes
    the inner statement). When no reading of the inner text parses as exactly one statement,
    the result is ``("unrecognised EXPLAIN", text)`` so the caller refuses it
    (fail closed).
    """
    kind = _kind(st)
    if kind != "EXPLAIN":
        return [(kind, st.query)]
    if _depth > 4:
        return [("nested EXPLAIN", st.query)]
    found: List[Tuple[str, str]] = []
    for text in _explain_inner(st.query):
        try:
            inner = con.extract_statements(text)
        except duckdb.Error:
            continue
        if len(inner) == 1:
            found += executed_statements(con, inner[0], _depth + 1)
    return found or [("unrecognised EXPLAIN", st.query)]


def check_statements(con, sql: str) -> List[Any]:
    """Parse ``sql`` with DuckDB and return its statements if each one executes a SELECT-type statement.

    ``EXPLAIN`` and ``EXPLAIN ANALYZE`` are judged by the statement they wrap
    (:func:`executed_statements`), so ``EXPLAIN ANALYZE COPY … TO …`` is refused as a COPY.

    Raises:
        TilakeError: a parse error (DuckDB's message, one line), an empty query, or a statement
            of another type (named in the message).
    """
    try:
        stmts = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise TilakeError(duckdb_error_line(exc)) from exc
    if not stmts:
        raise TilakeError("empty query")
    for st in stmts:
        for kind, _text in executed_statements(con, st):
            if kind not in ALLOWED_TYPES:
                inside = " (inside EXPLAIN)" if _kind(st) == "EXPLAIN" and kind != _kind(st) else ""
                label = "INSTALL/LOAD" if kind == "LOAD" else kind   # DuckDB types INSTALL as a LOAD statement
                raise TilakeError(f"tilake sql is read-only: {label} statements are refused{inside} "
                                  "(only SELECT/WITH/SHOW/DESCRIBE/SUMMARIZE and EXPLAIN of them run)")
    return stmts


def _bind(text: str, params: Optional[dict]) -> dict:
    """The ``params`` that ``text`` names as ``$name`` (DuckDB refuses a value for a parameter a statement lacks)."""
    return {k: v for k, v in (params or {}).items() if re.search(rf"\${re.escape(k)}\b", text)}


def query(lake: Lake, sql: str, allow_external_access: bool = False,
          params: Optional[Dict[str, str]] = None, max_rows: Optional[int] = None) -> Tuple[List[str], List[tuple]]:
    """Run a read-only query; returns ``(column names, rows)`` of the last statement.

    Args:
        allow_external_access: let the query read files outside the lake (see :func:`open_readonly`).
        params: values of the query's ``$name`` parameters (``{"run_id": "R"}`` for the named queries).
        max_rows: fetch at most ``max_rows + 1`` rows (one more than asked tells the caller there were more);
            None: every row.
    Raises:
        TilakeError: see :func:`open_readonly` / :func:`check_statements`; a DuckDB error while
            binding or running (its message on one line).
    """
    con = open_readonly(lake, sql, allow_external_access)
    try:
        stmts = check_statements(con, sql)
        try:
            cur = None
            for st in stmts:
                cur = con.execute(st.query, _bind(st.query, params))
            cols = [d[0] for d in cur.description] if cur.description else []
            if not cols:
                return cols, []
            return cols, cur.fetchall() if max_rows is None else cur.fetchmany(max_rows + 1)
        except duckdb.Error as exc:
            raise TilakeError(duckdb_error_line(exc)) from exc
    finally:
        con.close()


# DESCRIBE / SHOW / SUMMARIZE (after leading comments): valid as a subquery, not inside COPY ( … )
_SHOW_LIKE = re.compile(r"^(?:\s*(?:--[^\n]*\n|/\*.*?\*/))*\s*(?:DESCRIBE|DESC|SHOW|SUMMARIZE)\b", re.I | re.S)


def export(lake: Lake, sql: str, fmt: str, output: Path, allow_external_access: bool = False,
           params: Optional[Dict[str, str]] = None) -> int:
    """Write the result of one SELECT to ``output`` as csv (header), json (array) or parquet.

    The file is written through a temp file beside it (the only path outside the lake the
    connection may touch) and renamed over ``output``.

    Returns:
        rows written.
    Raises:
        TilakeError: unknown format, several statements, output inside the lake, DuckDB errors.
    """
    if fmt not in FORMATS:
        raise TilakeError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if str(output) == "-" or Path(output).name == "-":
        raise TilakeError("refusing to write a file named '-' (for stdout, leave --output out)")
    output = Path(output).expanduser().resolve()
    root = lake.root.resolve()
    if output == root or root in output.parents:
        raise TilakeError("refusing to write query output inside the lake folder", path=output)
    if output.is_dir():
        raise TilakeError("--output is a folder; give a file name", path=output)
    check_regular_target(output)
    tmp = output.with_name(f".{output.name}.tmp")
    con = open_readonly(lake, sql, allow_external_access, allowed_paths=[tmp])
    try:
        stmts = check_statements(con, sql)
        if len(stmts) != 1 or str(stmts[0].type).endswith("EXPLAIN"):
            raise TilakeError("--format exports exactly one SELECT statement")
        opts = {"csv": "FORMAT csv, HEADER true", "json": "FORMAT json, ARRAY true",
                "parquet": "FORMAT parquet"}[fmt]
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TilakeError(f"cannot create the output folder ({exc.strerror or exc})", path=output.parent) from exc
        body = stmts[0].query.strip().rstrip(";")
        if _SHOW_LIKE.match(body):   # COPY (DESCRIBE t) is a parser error; a subquery of it is not
            body = f"SELECT * FROM ({body})"
        try:
            con.execute(f"COPY ({body}\n) TO {sql_str(tmp)} ({opts})", _bind(body, params))
            n = con.execute(f"SELECT count(*) FROM ({body}\n)", _bind(body, params)).fetchone()[0]
        except duckdb.Error as exc:
            with contextlib.suppress(OSError):   # a read-only folder: nothing was written to remove
                tmp.unlink(missing_ok=True)
            raise TilakeError(duckdb_error_line(exc)) from exc
        if fmt == "csv":   # no cell a spreadsheet runs as a formula, no control character (ESC) left raw
            safe = tmp.with_name(tmp.name + ".safe")
            try:
                neutralise_csv(tmp, safe)
                safe.replace(tmp)
            except (OSError, UnicodeDecodeError) as exc:
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
                    safe.unlink(missing_ok=True)
                raise TilakeError(f"cannot write the CSV ({exc})", path=output) from exc
        tmp.replace(output)
        return n
    finally:
        con.close()


def export_stdout(lake: Lake, sql: str, fmt: str, allow_external_access: bool = False, out=None, params=None) -> int:
    """Write the result of one SELECT as csv (header) or json (array of objects) to stdout.

    The bytes are exactly those ``--output FILE`` gets (DuckDB's COPY into a private temp folder,
    then copied out), so ``tilake sql Q --format csv > x.csv`` equals ``-o x.csv``.

    Returns:
        rows written.
    Raises:
        TilakeError: parquet (binary) asked for stdout; see :func:`export`.
    """
    import tempfile

    if fmt == "parquet":
        raise TilakeError("--format parquet is binary: give --output FILE (not stdout)")
    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix="tilake-sql-") as d:
        f = Path(d) / f"result.{fmt}"
        n = export(lake, sql, fmt, f, allow_external_access, params)
        text = f.read_text(encoding="utf-8")
    out.write(text if not text or text.endswith("\n") else text + "\n")
    out.flush()
    return n


# ---------------------------------------------------------------------------------- shell

def duckdb_cli() -> Optional[str]:
    """Path of the ``duckdb`` CLI: on PATH, else beside the running Python (``pip install duckdb-cli``)."""
    found = shutil.which("duckdb")
    if found:
        return found
    here = Path(sys.executable).parent / "duckdb"
    return str(here) if here.exists() else None


def shell_init_sql(lake: Lake, allow_external_access: bool = False) -> str:
    """SQL run at shell start: no extension downloads, ``raw_<table>`` temp views over the lake,
    file access limited to the lake folder (unless ``allow_external_access``), configuration locked."""

    lines = ["SET autoinstall_known_extensions = false;", "SET autoload_known_extensions = false;"]
    lines += [raw_view_sql(lake, t) + ";" for t in schema.TABLES]   # the views Lake.reading creates
    if not allow_external_access:
        lines.append(f"SET allowed_directories = [{sql_str(str(lake.root) + '/')}];")
        lines.append("SET enable_external_access = false;")
    lines.append("SET allow_community_extensions = false;")
    lines.append("SET lock_configuration = true;")
    return "\n".join(lines)
