"""Row checks of a torch_npu profiler DB: what is refused, what is kept and counted (issue #12 item 5).

Real captures stopped while recording, copied while written, or edited by tools carry rows a join
or a sum turns into silently wrong numbers. Each kind is either **refused** (one line naming the file,
table, row or column and the problem; the lake is unchanged) or **kept and counted** in the capture
health (``captures.invalid_rows``, JSON ``{problem: rows}``):

============================================  ===============================================
kind                                          handling
============================================  ===============================================
no ``STRING_IDS`` table / no kernel ``name``  refused: kernel names cannot be decoded
``STRING_IDS`` id with two different values   refused: names are ambiguous (783 kernels became
                                              1.6 M rows through the join fan-out)
``STRING_IDS`` id repeated, same value        kept once, counted
``COMPUTE_TASK_INFO``/``TASK`` row repeated   kept once (per ``globalTaskId``), counted;
                                              two different rows for one id: refused
kernel time NULL, negative, ``endNs<startNs``  kept for the kernel set (op-type counts), times
                                              set NULL so every timing aggregate skips it,
                                              counted (BR-24: the last tasks of a cut capture)
kernel ending past the session end (+1 s) or  the same (``endNs = INT64_MAX`` gave 237-year
  after 2**62 ns, or longer than one hour       kernels and an INT64 overflow in every build)
STRING_IDS text that is not UTF-8             refused, naming the id (DuckDB's own message is
                                              "Cannot create a string of size …")
============================================  ===============================================

A kernel's time is valid when ``0 <= startNs <= endNs <= bound`` (both present) and
``endNs - startNs <= KERNEL_MAX_NS`` (one hour); ``bound`` is the session end
(``SESSION_TIME_INFO.endTimeNs``) plus :data:`SESSION_SLACK_NS` when the capture has one, else
:data:`~tilake.lake.schema.TIME_MAX_NS`. ``start_ns`` is kept when it is non-negative and below the
bound, ``end_ns`` and ``dur_ns`` only when the span is valid, so no INT64 subtraction can overflow
("Overflow in subtraction of INT64" on ``endNs = INT64_MIN``).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Dict

from tilake.errors import TilakeError
from tilake.lake.duck import sql_str, sqlite_ro
from tilake.lake.schema import KERNEL_MAX_NS, TIME_MAX_NS

LIM = TIME_MAX_NS
"""|ns| beyond this (year 2116) is not a profiler time."""

SESSION_SLACK_NS = 10**9
"""A kernel may end this long (1 s) after ``SESSION_TIME_INFO.endTimeNs`` (real captures end ~0.1 s before)."""


def end_bound(session) -> int:
    """Latest valid kernel end (ns) of a capture whose ``SESSION_TIME_INFO`` is ``(start, end)``:
    ``end`` + :data:`SESSION_SLACK_NS` when both are integers and ``end >= start``, else :data:`LIM`."""
    start, end = (tuple(session) + (None, None))[:2]
    if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < LIM:
        return min(LIM, end + SESSION_SLACK_NS)
    return LIM


def span_ok(start: str, end: str, bound: int = LIM) -> str:
    """SQL: the span ``start``..``end`` (ns) is a valid kernel time (both present,
    ``0 <= start <= end <= bound``, at most ``KERNEL_MAX_NS`` long; the length is taken in HUGEINT)."""
    return (f"({start} IS NOT NULL AND {end} IS NOT NULL AND {start} >= 0 AND {end} >= {start} "
            f"AND {end} <= {int(bound)} AND CAST({end} AS HUGEINT) - {start} <= {KERNEL_MAX_NS})")


def span_columns(start: str, end: str, bound: int = LIM) -> str:
    """SQL select list ``start_ns, end_ns, dur_ns`` of a kernel: NULL where the time is invalid."""
    ok = span_ok(start, end, bound)
    return (f"CASE WHEN {start} >= 0 AND {start} <= {int(bound)} THEN {start} END AS start_ns, "
            f"CASE WHEN {ok} THEN {end} END AS end_ns, "
            f"CASE WHEN {ok} THEN CAST(CAST({end} AS HUGEINT) - {start} AS BIGINT) END AS dur_ns")


def span_problem(start: str, end: str, table: str, bound: int = LIM) -> str:
    """SQL: the name of what is wrong with a span (``TASK.endNs NULL``, ``TASK.endNs < startNs``,
    ``TASK.endNs past the session end``, ``TASK duration over 1 h`` …), else NULL."""
    past = "past the session end" if int(bound) < LIM else "out of range (after 2**62 ns)"
    return (f"CASE WHEN {start} IS NULL THEN '{table}.startNs NULL' WHEN {end} IS NULL THEN '{table}.endNs NULL' "
            f"WHEN {start} < 0 THEN '{table}.startNs negative' WHEN {end} < {start} THEN '{table}.endNs < startNs' "
            f"WHEN {end} > {int(bound)} THEN '{table}.endNs {past}' "
            f"WHEN CAST({end} AS HUGEINT) - {start} > {KERNEL_MAX_NS} THEN '{table} duration over 1 h' END")


def check_tables(pr, path: Path) -> None:
    """Refuse a DB whose kernels cannot be named.

    Raises:
        TilakeError: COMPUTE_TASK_INFO present but no STRING_IDS table, or no ``name`` column.
    """
    if not pr.has("COMPUTE_TASK_INFO"):
        return
    if not pr.has("STRING_IDS"):
        raise TilakeError("no STRING_IDS table: kernel names and op types (ids into STRING_IDS) cannot be "
                          "decoded; export the DB again with torch_npu analyse()", path=path)
    if not pr.has("COMPUTE_TASK_INFO", "name"):
        cols = ", ".join(pr.tables["COMPUTE_TASK_INFO"])
        raise TilakeError(f"COMPUTE_TASK_INFO has no name column (columns: {cols}): kernel names cannot be read",
                          path=path)


def dedupe_strings(con, path: Path) -> int:
    """Make the temp table ``sid`` one row per id; return how many repeated rows were dropped.

    Raises:
        TilakeError: an id holds two different values (names this file and the first such id).
    """
    dup, conflict = con.execute(
        "SELECT coalesce(sum(n - 1), 0), count(*) FILTER (WHERE v > 1) FROM "
        "(SELECT id, count(*) AS n, count(DISTINCT value) AS v FROM sid GROUP BY id HAVING count(*) > 1)").fetchone()
    if conflict:
        i, vals = con.execute("SELECT id, list(DISTINCT value ORDER BY value)[1:2] FROM sid GROUP BY id "
                              "HAVING count(DISTINCT value) > 1 ORDER BY id LIMIT 1").fetchone()
        raise TilakeError(f"STRING_IDS: {conflict} ids have more than one value (id {i}: "
                          f"{' / '.join(repr(v) for v in vals)}); names cannot be decoded unambiguously", path=path)
    if dup:
        con.execute("CREATE OR REPLACE TEMP TABLE sid AS SELECT DISTINCT ON (id) * FROM sid")
    return int(dup)


BITMAP_SLACK = 8
"""Key spans up to this many times the row count (plus 2**20) are counted with a bitmap."""


def distinct_ids(con, source: str) -> tuple:
    """``(rows, distinct non-NULL globalTaskIds)`` of the SQL relation ``source``.

    globalTaskIds are dense (msprof numbers tasks 0, 1, 2 …), so when the id span is at most
    :data:`BITMAP_SLACK` × rows + 2**20 the distinct count is the number of bits set by
    ``bitstring_agg`` (one bit per possible id: exact, no hashing; 2 M ids: 0.02 s vs 0.15 s for
    ``count(DISTINCT)``, bench/README.md); otherwise ``count(DISTINCT globalTaskId)``.
    """
    n, lo, hi = con.execute(f"SELECT count(*), min(globalTaskId), max(globalTaskId) FROM {source}").fetchone()
    if lo is None:
        return int(n), 0
    if hi - lo + 1 <= BITMAP_SLACK * n + (1 << 20):
        ids = con.execute(f"SELECT bit_count(bitstring_agg(globalTaskId, {int(lo)}, {int(hi)})) FROM {source}").fetchone()[0]
    else:
        ids = con.execute(f"SELECT count(DISTINCT globalTaskId) FROM {source}").fetchone()[0]
    return int(n), int(ids or 0)


def dedupe_dump(con, file: Path, table: str, path: Path) -> int:
    """Keep one row per ``globalTaskId`` in a dumped ``table`` Parquet file; return the rows dropped.

    Raises:
        TilakeError: one ``globalTaskId`` has two different rows (names the id).
    """
    f = f"read_parquet({sql_str(file)}, hive_partitioning=false)"
    n, ids = distinct_ids(con, f)
    if n == ids:
        return 0
    distinct = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT * FROM {f})").fetchone()[0]
    if distinct != ids:
        gid = con.execute(f"SELECT globalTaskId FROM (SELECT DISTINCT * FROM {f}) GROUP BY globalTaskId "
                          "HAVING count(*) > 1 ORDER BY globalTaskId LIMIT 1").fetchone()[0]
        raise TilakeError(f"{table}: {distinct - ids} globalTaskIds have two different rows (e.g. globalTaskId "
                          f"{gid}); which one is the kernel is unknown", path=path)
    tmp = file.with_suffix(".dedup.parquet")
    con.execute(f"COPY (SELECT DISTINCT * FROM {f}) TO {sql_str(tmp)} (FORMAT parquet, COMPRESSION uncompressed)")
    tmp.replace(file)
    return int(n - ids)


def timing_counts(con, task_file: Path, cti_file: Path, bound: int = LIM) -> Dict[str, int]:
    """``{problem: kernels}`` for compute kernels (TASK ⋈ COMPUTE_TASK_INFO) whose time is invalid
    (``bound``: :func:`end_bound` of the capture's session)."""
    t = f"read_parquet({sql_str(task_file)}, hive_partitioning=false)"
    prob = span_problem("startNs", "endNs", "TASK", bound)
    rows = con.execute(f"SELECT p, count(*) FROM (SELECT globalTaskId, {prob} AS p FROM {t} "
                       f"WHERE NOT {span_ok('startNs', 'endNs', bound)}) b "
                       f"SEMI JOIN read_parquet({sql_str(cti_file)}, hive_partitioning=false) c USING (globalTaskId) "
                       "GROUP BY p ORDER BY p").fetchall()
    return {p: int(n) for p, n in rows}


def explain(exc: BaseException, db: Path, shown: Path) -> "TilakeError | None":
    """Turn a DuckDB-internal error into a line in the file's terms, or None when it is not one we know.

    Looks, with sqlite3 and only on this error path, for the row that caused it: a STRING_IDS value
    (or another TEXT column) that is not UTF-8 for "Cannot create a string of size" / "invalid
    unicode"; a time column out of range for "Overflow in …".
    """
    msg = str(exc)
    try:
        con = sqlite_ro(db)
        con.text_factory = bytes
    except sqlite3.Error:
        return None
    try:
        if "Cannot create a string" in msg or "nicode" in msg or "UTF" in msg:
            for table, key, col in (("STRING_IDS", "id", "value"), ("PYTORCH_API", "rowid", "startNs"),
                                    ("PYTORCH_API", "rowid", "endNs"), ("PYTORCH_CALLCHAINS", "rowid", "stack")):
                try:
                    cur = con.execute(f'SELECT {key}, "{col}" FROM "{table}" WHERE typeof("{col}") = \'text\'')
                except sqlite3.Error:
                    continue
                for k, v in cur:
                    try:
                        v.decode("utf-8")
                    except UnicodeDecodeError:
                        return TilakeError(f"{table}.{col} for {key} {k} is not valid UTF-8 text ({v[:12]!r}…); "
                                           "the file is damaged or was not written by torch_npu", path=shown)
            return TilakeError("a text column holds bytes that are not a string (damaged pages?): "
                               f"{msg.splitlines()[0][:120]}", path=shown)
        if "Overflow" in msg:
            for table in ("TASK", "COMMUNICATION_OP", "MSTX_EVENTS"):
                try:
                    r = con.execute(f'SELECT rowid, startNs, endNs FROM "{table}" WHERE startNs NOT BETWEEN {-LIM} AND {LIM} '
                                    f"OR endNs NOT BETWEEN {-LIM} AND {LIM} LIMIT 1").fetchone()
                except sqlite3.Error:
                    continue
                if r:
                    return TilakeError(f"{table} row {r[0]}: startNs/endNs out of range ({r[1]}, {r[2]})", path=shown)
    finally:
        con.close()
    return None
