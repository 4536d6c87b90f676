"""Read one ``ascend_pytorch_profiler_{rank}.db`` (torch_npu DB export) into the lake.

This module probes the file and writes host ops, call stacks and MSTX ranges; the kernel path
(dump TASK/COMPUTE_TASK_INFO/CANN_API, join them in ranges, HCCL ops) is :mod:`.kernels`.

Format facts (``reference/ascend-profiler-format.md`` §0, §2.2–2.6, "Traps"; torch_npu
``_fwk_api_db_parser.py``; msprof ``msprof_db.cpp``):

* kernels are ``TASK ⋈ COMPUTE_TASK_INFO`` on ``globalTaskId`` (TASK also holds memcpy/event rows
  that are not kernels) plus one row per ``COMMUNICATION_OP`` (HCCL op, op type ``hcom_*_``);
* every name-like INTEGER column is an id into ``STRING_IDS(id, value)``;
* host op of a kernel: ``TASK.connectionId = CONNECTION_IDS.connectionId``,
  (its call stack: its own ``callchainId`` or that of the innermost enclosing op on the same thread),
  ``CONNECTION_IDS.id = PYTORCH_API.connectionId`` (op rows ``type = 50001``; the innermost op wins);
  the launching CANN API is ``CANN_API.connectionId = TASK.connectionId``;
* ``PYTORCH_API.startNs/endNs`` are TEXT; ``inputDtypes``/``inputShapes`` contents are swapped in
  real files (decided here by content); the block-size column is ``blockDim`` (CANN 8.x),
  ``blockNum`` (CANN 9.0) or ``block_dim`` (2024-03) — probed with ``PRAGMA table_info``;
* a DB in WAL journal mode (header bytes 18–19 = 2) grows ``-wal``/``-shm`` files when opened,
  even read-only, so it is copied (with its ``-wal``/``-shm``/``-journal``) to a private temp folder and
  recovered there, as SQLite would (committed ``-wal`` frames replayed, a hot journal rolled back);
  inputs stay byte-identical.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

from tilake.errors import TilakeError
from tilake.ingest.inputs import check_regular, open_regular, special_kind
from tilake.ingest.profiler.kernels import sid_join, sid_value, write_kernels
from tilake.ingest.profiler.names import clean_text, derived_op_type
from tilake.ingest.profiler.rows import check_tables, dedupe_strings, explain
from tilake.lake.duck import sql_str, sqlite_ro, with_sqlite

SQLITE_MAGIC = b"SQLite format 3\x00"
API_TYPE_OP = 50001
# the block count of COMPUTE_TASK_INFO, probed by meaning in this order (reference §0 item 3, §2.5):
# blockNum (CANN 9.0+ holds the count; CANN 9.1 adds a new blockDim and gridDim, written 0),
# then blockDim (CANN 8.x), then block_dim (2024-03). The first column present wins.
BLOCK_COLUMNS = ("blockNum", "blockDim", "block_dim")
# extra tables/columns only MindStudio Insight writes into DBs it opens (reference §2.2 note);
# OVERLAP_ANALYSIS is not one of them: CANN 9.1's msprof writes it too (label "overlap")
INSIGHT_TABLES = {"connectionCats", "status_info"}


@dataclass
class DbProbe:
    """What a DB holds: ``tables`` (name → list of column names), ``rows`` (name → count),
    ``schema_version``, ``session`` (start_ns, end_ns), ``journal_wal``, ``keys`` (PRIMARY KEY columns)."""

    tables: Dict[str, List[str]] = field(default_factory=dict)
    rows: Dict[str, int] = field(default_factory=dict)
    schema_version: Optional[str] = None
    session: tuple = (None, None)
    journal_wal: bool = False
    # table → its PRIMARY KEY columns (real DDL: STRING_IDS.id, COMPUTE_TASK_INFO.globalTaskId; TASK has none)
    keys: Dict[str, List[str]] = field(default_factory=dict)

    def unique(self, table: str, column: str) -> bool:
        """Whether the DDL guarantees one row per ``column`` (it is the table's single PRIMARY KEY)."""
        return self.keys.get(table) == [column]

    def has(self, table: str, column: Optional[str] = None) -> bool:
        """Whether the table (and column) exists."""
        cols = self.tables.get(table)
        return cols is not None and (column is None or column in cols)

    @property
    def block_column(self) -> Optional[str]:
        """The block-size column name of COMPUTE_TASK_INFO in this CANN version, if any."""
        return next((c for c in BLOCK_COLUMNS if self.has("COMPUTE_TASK_INFO", c)), None)

    @property
    def schema_variant(self) -> str:
        """Short label of the schema variant, e.g. ``blockDim+insight`` or ``blockNum+opState+gridDim+overlap``
        (CANN 9.1: ``OVERLAP_ANALYSIS`` without Insight's own tables/columns is the profiler's, not an edit)."""
        parts = [self.block_column or "noblock"]
        if self.has("COMPUTE_TASK_INFO", "opState"):
            parts.append("opState")
        if self.has("COMPUTE_TASK_INFO", "gridDim"):
            parts.append("gridDim")
        if INSIGHT_TABLES & set(self.tables) or self.has("TASK", "depth"):
            parts.append("insight")
        elif self.has("OVERLAP_ANALYSIS"):
            parts.append("overlap")
        if self.has("PYTORCH_CALLCHAINS"):
            parts.append("stack")
        return "+".join(parts)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def check_header(path: Path) -> bool:
    """Validate the SQLite header; return True when the DB is in WAL journal mode.

    Raises:
        TilakeError: not a SQLite file, or shorter than its header says (truncated copy).
    """
    check_regular(path, "profiler database")       # a FIFO: never opened (SQLite would block on it)
    recover = sidecars(path)      # a -wal or hot -journal beside it: the file alone is not the database
    try:
        size = path.stat().st_size
        with open_regular(path, "profiler database") as f:
            head = f.read(100)
    except OSError as exc:
        raise TilakeError(f"cannot read file ({exc.strerror})", path=path) from exc
    if size == 0 and not recover:
        raise TilakeError("empty file (0 bytes), not a profiler database", path=path)
    if size == 0:
        return True       # all of it in the -wal (or journal): SQLite reads it there
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise TilakeError("not a SQLite database (wrong header); expected an "
                          "ascend_pytorch_profiler_*.db written by torch_npu", path=path)
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    valid_for = int.from_bytes(head[92:96], "big")
    change = int.from_bytes(head[24:28], "big")
    if recover:           # the -wal / -journal completes or rolls back what the header says
        return head[18] == 2 or head[19] == 2
    if pages and valid_for == change and size < pages * page_size:
        raise TilakeError(f"truncated SQLite database: {size} bytes on disk, header says "
                          f"{pages * page_size}; copy the file again from the host", path=path)
    if size % page_size:
        raise TilakeError(f"truncated SQLite database: size {size} is not a multiple of the "
                          f"page size {page_size}", path=path)
    return head[18] == 2 or head[19] == 2


#: files SQLite keeps beside a database: the write-ahead log, its index, and the rollback journal
SIDECARS = ("-wal", "-shm", "-journal")


def sidecars(path: Path) -> List[str]:
    """The suffixes of :data:`SIDECARS` present (as regular files) beside the DB ``path``."""
    out = []
    for sfx in SIDECARS:
        side = Path(str(path) + sfx)
        if side.is_file() and special_kind(side) is None:
            out.append(sfx)
    return out


@contextmanager
def readable_copy(path: Path, wal: bool) -> Iterator[Path]:
    """Yield a path that may be opened without creating files beside the input, holding what SQLite itself
    would read there.

    A DB with no ``-wal``/``-journal`` beside it and not in WAL mode is opened in place (read-only immutable
    opens create nothing). Otherwise the DB and its ``-wal``/``-shm``/``-journal`` are copied into a private
    temp folder (removed afterwards) and the copy is opened once read-write: SQLite replays committed ``-wal``
    frames (a DB whose data lives only in the ``-wal`` of a process that never checkpointed), ignores
    uncommitted ones (a capture copied mid-transaction), and rolls back a hot ``-journal`` (a writer killed
    mid-transaction); the copy is then checkpointed into a plain file that every reader sees whole. The input
    and its sidecars are never written.

    Raises:
        TilakeError: the copy cannot be made or SQLite refuses the recovery (names the sidecars).
    """
    sides = sidecars(path)
    if not wal and not sides:
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix="tilake-db-"))
    try:
        dst = tmp / path.name
        try:
            shutil.copyfile(path, dst)
            for sfx in sides:
                shutil.copyfile(Path(str(path) + sfx), Path(str(dst) + sfx))
        except OSError as exc:
            raise TilakeError(f"cannot copy the database and its {', '.join(sides) or 'WAL'} files to a temp folder "
                              f"({exc.strerror})", path=path) from exc
        try:
            con = sqlite3.connect(str(dst), isolation_level=None)
            try:
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()   # recovery happens on first read
                if wal or "-wal" in sides:
                    con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    con.execute("PRAGMA journal_mode=DELETE").fetchone()
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise TilakeError(f"SQLite cannot recover the database with its {', '.join(sides) or 'WAL'} file(s) "
                              f"({exc}); copy the files again from the host, all together", path=path) from exc
        yield dst
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def probe(path: Path) -> DbProbe:
    """List tables, columns and row counts with sqlite3 in immutable mode (creates no files).

    Raises:
        TilakeError: the file is not a readable SQLite database.
    """
    p = DbProbe()
    try:
        con = sqlite_ro(path)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for n in names:
                info = con.execute(f'PRAGMA table_info("{n}")').fetchall()
                p.tables[n] = [r[1] for r in info]
                p.keys[n] = [r[1] for r in info if r[5]]
                p.rows[n] = con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]
            if "META_DATA" in p.tables:
                r = con.execute("SELECT value FROM META_DATA WHERE name='SCHEMA_VERSION'").fetchone()
                p.schema_version = r[0] if r else None
            if p.has("SESSION_TIME_INFO", "startTimeNs") and p.has("SESSION_TIME_INFO", "endTimeNs"):
                r = con.execute("SELECT startTimeNs, endTimeNs FROM SESSION_TIME_INFO LIMIT 1").fetchone()
                p.session = tuple(r) if r else (None, None)
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise TilakeError(f"unreadable SQLite database ({exc})", path=path) from exc
    return p


@dataclass
class DbResult:
    """Counts written for one DB capture."""

    kernels: int = 0
    compute_kernels: int = 0
    host_ops: int = 0
    call_stacks: int = 0
    mstx: int = 0
    probe: Optional[DbProbe] = None
    # rows kept but counted (capture health, :mod:`.rows`): {problem: rows}
    invalid: Dict[str, int] = field(default_factory=dict)
    # warnings for the capture's reason (host links missing …), each once
    notes: List[str] = field(default_factory=list)

    def invalid_note(self) -> str:
        """The notes and one sentence on the counted rows, for the capture's reason, or ``""``."""
        if not self.invalid:
            return "; ".join(self.notes)
        parts = ", ".join(f"{k}: {v}" for k, v in sorted(self.invalid.items()))
        timed = sum(v for k, v in self.invalid.items() if k.split(" ", 1)[0].split(".")[0] in KERNEL_TABLES
                    and ("Ns" in k or "duration" in k))
        dangling = max((v for k, v in self.invalid.items() if k.endswith("not in STRING_IDS")), default=0)
        nameless = sum(v for k, v in self.invalid.items() if "kernel name unknown" in k)
        host = sum(v for k, v in self.invalid.items() if k.startswith("PYTORCH_API"))
        steps = sum(v for k, v in self.invalid.items() if k.startswith("STEP_TIME"))
        heads = ([f"{timed} kernels with invalid times kept for the kernel set, excluded from timings"] if timed else [])
        heads += ([f"{dangling} kernels name a STRING_IDS id that does not exist (name or op type unknown)"]
                  if dangling else [])
        heads += [f"{nameless} kernels with no name"] if nameless else []
        heads += [f"{host} host ops whose time is not a number (excluded from host timings)"] if host else []
        heads += [f"{steps} STEP_TIME rows that are not a step range (not used for steps)"] if steps else []
        head = "; ".join(heads) or "repeated rows dropped"
        return "; ".join([*self.notes, f"{head} ({parts})"])


def load_db(db: Path, pr: DbProbe, writer, partition: Dict, capture_id: str,
            shown: Optional[Path] = None, say: Optional[Callable[[str], None]] = None) -> DbResult:
    """Write kernels, host ops, call stacks and MSTX ranges of one attached DB.

    Args:
        db: a path safe to open (see :func:`readable_copy`). pr: its probe.
        writer: :class:`tilake.lake.store.RunWriter`. partition: ``{"side":…, "rank":…}``.
        shown: the input file named in errors (default ``db``; differs for a private WAL copy).
        say: progress callback, called with a short line (table being read, its row count, kernel
            rows written so far) while the capture is read (the CLI's rich progress line).
    Returns:
        :class:`DbResult` with the row counts written and the rows kept but counted (``invalid``).
    Raises:
        TilakeError: the SQLite scanner cannot read a required table (malformed file); a row kind
            that is refused (:mod:`.rows`: no STRING_IDS, ambiguous ids, non-UTF-8 text).
    """
    con = with_sqlite(writer.con)
    shown = shown or db
    say = say or (lambda text: None)
    res = DbResult(probe=pr)
    check_tables(pr, shown)
    con.execute("DETACH DATABASE IF EXISTS s")
    con.execute(f"ATTACH {sql_str(db)} AS s (TYPE sqlite, READ_ONLY)")
    try:
        # strings are cleaned (quotes, CR/LF, N/A) and op types derived from names once per STRING_IDS
        # row, not once per kernel row: the kernel query only picks precomputed columns
        say(f"reading STRING_IDS ({pr.rows.get('STRING_IDS', 0):,} rows)")
        src = ("SELECT id, value FROM s.STRING_IDS" if pr.has("STRING_IDS")
               else "SELECT CAST(NULL AS BIGINT) AS id, CAST(NULL AS VARCHAR) AS value WHERE false")
        con.execute(f"CREATE OR REPLACE TEMP TABLE sid AS SELECT id, value, {clean_text('value')} AS clean, "
                    f"{derived_op_type('value')} AS derived FROM ({src})")
        dup = 0 if pr.unique("STRING_IDS", "id") else dedupe_strings(con, shown)
        if dup:
            res.invalid["STRING_IDS repeated ids (same value, kept once)"] = dup
        say(f"reading PYTORCH_API ({pr.rows.get('PYTORCH_API', 0):,} rows)")
        _host_ops_table(con, pr)
        bad_host = con.execute("SELECT count(*) FROM hops WHERE start_ns IS NULL OR end_ns IS NULL "
                               "OR end_ns < start_ns").fetchone()[0]
        if bad_host:   # NaN / text / NULL where PYTORCH_API keeps its TEXT times: counted, never silently "ok"
            res.invalid["PYTORCH_API.startNs/endNs not an integer, NULL or end < start"] = int(bad_host)
        bad_steps = _bad_step_rows(db, pr)
        if bad_steps:
            res.invalid["STEP_TIME rows not a step range (id, startNs, endNs)"] = bad_steps
        res.compute_kernels, res.kernels = write_kernels(con, pr, writer, partition, capture_id,
                                                          res.invalid, shown, res.notes, say)
        say(f"{res.kernels:,} kernels written; host ops, call stacks, MSTX")
        res.host_ops = _write_host_ops(con, writer, partition, capture_id)
        if pr.has("PYTORCH_CALLCHAINS"):
            # stack is a STRING_IDS key (TEXT holding the frame itself in torch_npu 6.0.rc1)
            res.call_stacks = writer.copy_query(
                "call_stacks",
                f"SELECT {sql_str(capture_id)} AS capture_id, c.id AS callchain_id, c.stackDepth AS depth, "
                "coalesce(jf.value, CAST(c.stack AS VARCHAR)) AS frame FROM s.PYTORCH_CALLCHAINS c "
                "LEFT JOIN sid jf ON jf.id = TRY_CAST(c.stack AS BIGINT)",
                partition)
        if pr.has("MSTX_EVENTS", "eventType"):
            jm, m = sid_join(pr, "MSTX_EVENTS", "message", "e", "jm", only_used=True)
            res.mstx = writer.copy_query(
                "mstx_ranges",
                f"SELECT {sql_str(capture_id)} AS capture_id, {sid_value(m)} AS message, "
                f"e.startNs AS start_ns, e.endNs AS end_ns, e.globalTid AS global_tid "
                f"FROM s.MSTX_EVENTS e {jm} WHERE e.eventType = 2", partition)
    except TilakeError:
        raise
    except Exception as exc:  # duckdb errors on malformed pages or mismatched types
        if type(exc).__name__ == "InterruptException" or str(exc).startswith("Query interrupted"):
            raise TilakeError("interrupted by the user; the lake is unchanged") from exc
        if type(exc).__name__ == "OutOfMemoryException":
            raise   # the CLI's one line names the memory limit and how to raise it (pipeline/failures.py)
        if "File name too long" in str(exc) or isinstance(exc, MemoryError):
            raise   # the lake's path / this machine's memory, not the DB: the CLI's one line says which
        better = explain(exc, db, shown)
        if better is not None:
            raise better from exc
        raise TilakeError(f"cannot read profiler tables ({str(exc).splitlines()[0]})", path=shown) from exc
    finally:
        try:
            con.execute("DETACH DATABASE IF EXISTS s")
        except Exception:  # connection invalidated by a fatal DuckDB error: the writer reopens one
            writer._con = None
    return res


#: tables whose rows are kernels (their time problems read "kernels with invalid times")
KERNEL_TABLES = ("TASK", "COMPUTE_TASK_INFO", "COMMUNICATION_OP")


def _bad_step_rows(db: Path, pr: DbProbe) -> int:
    """``STEP_TIME`` rows that are not a step range: ``id`` not a non-negative integer, ``startNs``/``endNs`` not
    integers, or ``endNs < startNs`` (0 when the table is absent or unreadable)."""
    if not pr.has("STEP_TIME"):
        return 0
    try:
        con = sqlite_ro(db)
    except sqlite3.Error:
        return 0
    try:
        rows = con.execute("SELECT id, startNs, endNs FROM STEP_TIME").fetchall()
    except sqlite3.Error:
        return 0
    finally:
        con.close()

    def as_int(v) -> Optional[int]:
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, int):
            return v
        try:
            return int(str(v).strip()) if str(v).strip().lstrip("-").isdigit() else None
        except ValueError:
            return None

    bad = 0
    for i, a, b in rows:
        i, a, b = as_int(i), as_int(a), as_int(b)
        if i is None or i < 0 or a is None or b is None or b < a:
            bad += 1
    return bad


def _host_ops_table(con, pr: DbProbe) -> None:
    """Temp tables ``hops`` (framework ops, numbered) and ``conn_host`` (task connection → op)."""
    if not pr.has("PYTORCH_API"):
        con.execute("CREATE OR REPLACE TEMP TABLE hops (host_op_id BIGINT, name VARCHAR, start_ns BIGINT, "
                    "end_ns BIGINT, global_tid BIGINT, connection_id BIGINT, sequence_number BIGINT, "
                    "input_shapes VARCHAR, input_dtypes VARCHAR, callchain_id BIGINT)")
        con.execute("CREATE OR REPLACE TEMP TABLE conn_host (task_conn BIGINT, host_op_id BIGINT, "
                    "name VARCHAR, callchain_id BIGINT)")
        return
    where = f"WHERE p.type = {API_TYPE_OP}" if pr.has("PYTORCH_API", "type") else ""
    jn, n = sid_join(pr, "PYTORCH_API", "name", "p", "jn")
    jd, d = sid_join(pr, "PYTORCH_API", "inputDtypes", "p", "jd")
    js, sh = sid_join(pr, "PYTORCH_API", "inputShapes", "p", "js")
    da, sb = sid_value(d), sid_value(sh)
    shape_like = "regexp_matches({x}, '^[\\[\\]0-9,;\"\\s]+$')"
    # the real files swap the two columns' contents: decide per row by content
    shapes = f"CASE WHEN {shape_like.format(x=da)} THEN {da} ELSE {sb} END"
    dtypes = f"CASE WHEN {shape_like.format(x=da)} THEN {sb} ELSE {da} END"
    cc = "NULLIF(p.callchainId, CAST(4294967295 AS BIGINT))" if pr.has("PYTORCH_API", "callchainId") else "NULL"
    seq = "p.sequenceNumber" if pr.has("PYTORCH_API", "sequenceNumber") else "NULL"
    conn = "NULLIF(p.connectionId, CAST(4294967295 AS BIGINT))"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE hops AS
        SELECT row_number() OVER (ORDER BY start_ns, global_tid, connection_id, name, end_ns) AS host_op_id, *
        FROM (
          SELECT {sid_value(n)} AS name,
                 TRY_CAST(p.startNs AS BIGINT) AS start_ns, TRY_CAST(p.endNs AS BIGINT) AS end_ns,
                 p.globalTid AS global_tid, {conn} AS connection_id, {seq} AS sequence_number,
                 {clean_text(shapes)} AS input_shapes, {clean_text(dtypes)} AS input_dtypes,
                 {cc} AS callchain_id
          FROM s.PYTORCH_API p {jn} {jd} {js} {where}
        )""")
    # ACL-level records (aclnnMm …) carry no Python stack; torch_npu stores it on the enclosing
    # aten op of the same thread (reference §2.4): inherit the innermost enclosing op's callchain.
    con.execute("""
        CREATE OR REPLACE TEMP TABLE hops AS
        SELECT h.* REPLACE (coalesce(h.callchain_id, e.parent_chain) AS callchain_id)
        FROM hops h
        LEFT JOIN (
            SELECT a.host_op_id, b.callchain_id AS parent_chain
            FROM hops a JOIN hops b
              ON a.global_tid = b.global_tid AND b.start_ns <= a.start_ns AND b.end_ns >= a.end_ns
             AND b.host_op_id <> a.host_op_id
            WHERE a.callchain_id IS NULL AND b.callchain_id IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY a.host_op_id ORDER BY b.start_ns DESC, b.end_ns, b.host_op_id DESC) = 1
        ) e USING (host_op_id)""")
    if pr.has("CONNECTION_IDS"):
        con.execute("""
            CREATE OR REPLACE TEMP TABLE conn_host AS
            SELECT ci.connectionId AS task_conn, h.host_op_id, h.name, h.callchain_id
            FROM s.CONNECTION_IDS ci JOIN hops h ON h.connection_id = ci.id
            QUALIFY row_number() OVER (PARTITION BY ci.connectionId
                                       ORDER BY h.start_ns DESC, h.host_op_id DESC) = 1""")
    else:
        con.execute("CREATE OR REPLACE TEMP TABLE conn_host (task_conn BIGINT, host_op_id BIGINT, "
                    "name VARCHAR, callchain_id BIGINT)")


def _write_host_ops(con, writer, partition: Dict, capture_id: str) -> int:
    # kernels per host op, from the Parquet just staged in this capture's partition (cheap: one column;
    # other folders and other parallel workers' files, maybe half-written, are never read)
    part_dir = (writer.staging / "kernels" / f"run_id={writer.run_id}" / f"side={partition['side']}"
                / f"rank={partition['rank']}")
    staged = [str(p) for p in part_dir.glob(f"{getattr(writer, 'file_prefix', 'part-')}*.parquet")]
    mine = f"capture_id = {sql_str(capture_id)}"
    if staged:
        files = "[" + ", ".join(sql_str(s) for s in staged) + "]"
        counts = (f"SELECT host_op_id, count(*) AS n FROM read_parquet({files}, hive_partitioning=false) "
                  f"WHERE {mine} AND host_op_id IS NOT NULL GROUP BY host_op_id")
    else:
        counts = "SELECT NULL::BIGINT AS host_op_id, 0 AS n WHERE false"
    return writer.copy_query(
        "host_ops",
        f"""SELECT {sql_str(capture_id)} AS capture_id, 'db' AS source_kind, h.host_op_id, h.name,
                   h.start_ns, h.end_ns, h.global_tid, h.connection_id, h.sequence_number,
                   h.input_shapes, h.input_dtypes, h.callchain_id,
                   coalesce(k.n, 0) AS kernel_count, 1 AS call_count
            FROM hops h LEFT JOIN ({counts}) k USING (host_op_id)""",
        partition)


def profiler_level_from_db(con_path: Path) -> Optional[str]:
    """``Level0`` when every op type is ``N/A`` (level-0 capture), else None (unknown)."""
    con = sqlite_ro(con_path)
    try:
        r = con.execute("SELECT count(*), sum(CASE WHEN s.value = 'N/A' THEN 1 ELSE 0 END) "
                        "FROM (SELECT opType FROM COMPUTE_TASK_INFO LIMIT 1000) c "
                        "LEFT JOIN STRING_IDS s ON s.id = c.opType").fetchone()
    except sqlite3.DatabaseError:
        return None
    finally:
        con.close()
    if r and r[0] and r[0] == r[1]:
        return "Level0"
    return None


def session_fields(pr: DbProbe, db: Path) -> Dict:
    """Capture-health session columns: ``truncated``, ``session_start_ns``, ``session_end_ns``.

    A capture stopped while recording has ``SESSION_TIME_INFO.endTimeNs`` NULL (or before the
    start): it is marked truncated and its end is the largest valid observed TASK end
    (``0 <= startNs <= endNs``; BR-24), not left NULL. No SESSION_TIME_INFO: truncated unknown (NULL).
    """
    start, end = pr.session
    if not pr.has("SESSION_TIME_INFO"):
        return {"truncated": None, "session_start_ns": start, "session_end_ns": end}
    truncated = bool(start) and (not end or end < start)
    if truncated and pr.has("TASK", "endNs"):
        con = sqlite_ro(db)
        try:
            end = con.execute("SELECT max(endNs) FROM TASK WHERE startNs >= 0 AND endNs >= startNs").fetchone()[0]
        except sqlite3.DatabaseError:
            end = None
        finally:
            con.close()
    return {"truncated": truncated, "session_start_ns": start, "session_end_ns": end}


def table_rows_json(pr: DbProbe) -> str:
    """Row counts per table as compact JSON (capture-health evidence)."""
    return json.dumps(dict(sorted(pr.rows.items())), separators=(",", ":"))


def file_size(path: Path) -> int:
    """Size in bytes."""
    return os.path.getsize(path)
