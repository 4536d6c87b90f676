"""The lake: Hive-partitioned Parquet under ``<root>/raw`` plus ``<root>/warehouse.duckdb``.

Writes are atomic per command: a :class:`RunWriter` stages Parquet files in
``<root>/.staging/<uuid>/`` and, only when the ingest finished without error, commits them in one step
(:class:`tilake.lake.commit.Commit`): a journal listing every rename (old partitions to ``.trash``, staged
ones in, the run's record ``manifest/<run_id>.json``) is sealed by one rename, the renames are made, the
journal is removed. A process killed at any moment leaves the old state (no sealed journal: the staging is
swept) or the new one (the next open of the lake completes the sealed journal). A failed ingest deletes its
staging folder and leaves the lake as it was. Re-ingesting a run replaces its partitions of the tables the
writer owns; it never duplicates rows.

One writer at a time, one door per command: :meth:`Lake.writing` takes ``<root>/.lock``
(``fcntl.flock``; a second writer waits up to ``--wait`` seconds, :func:`tilake.settings.lock_wait`, then
gets :class:`LakeBusyError`), completes or sweeps what a killed writer left and runs :meth:`Lake.ensure`,
once. The contract: a command's flow (``tilake.pipeline``)
holds ``writing()`` around all its writes (ingest, remove, dbt build); the lower functions
(:meth:`Lake.write_run`, :meth:`Lake.remove_run`, :mod:`tilake.lake.warehouse`) step into the same
door, which for the thread already holding it is free (no second ``flock``, no second ``ensure``).
Called alone (tests, scripts) they open the door themselves. Readers come in by :meth:`Lake.reading`.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from tilake import settings
from tilake.errors import LakeBusyError, TilakeError
from tilake.files import atomic_path
from tilake.lake import commit as C
from tilake.lake import schema
from tilake.lake.compact import compact_staged
from tilake.lake.duck import connect, parquet_columns, sql_str
from tilake.lake.read import RawTables, open_read, raw_source  # noqa: F401  (raw_source: the readers' import)
from tilake.lake.run_ids import RUN_ID_RE, validate_run_id  # noqa: F401  (the rule lives there; callers import it here too)

TMP_SUFFIX = ".parquet-partial"
"""Suffix of files being written inside ``raw/`` (never matched by ``**/*.parquet`` globs)."""
TMP_PREFIX = ".tmp-"
"""Prefix of those files (a migration killed mid-way leaves ``.tmp-*``; the next one deletes them)."""


def lake_root(path: Optional[Union[str, Path]] = None) -> Path:
    """Resolve the lake root: explicit path, else ``$TILAKE_LAKE``, else ``./tilake-lake``
    (:func:`tilake.settings.lake_path`)."""
    return Path(path or settings.lake_path()).expanduser().resolve()


_WRITE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                 errno.EROFS: "the lake is on a read-only file system",
                 errno.EACCES: "permission denied (the lake is read-only for this user)",
                 errno.EPERM: "operation not permitted (the lake is read-only for this user)"}
_WRITE_TEXTS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                "Read-only file system": errno.EROFS, "Permission denied": errno.EACCES}


def lake_write_error(root: Path, exc: BaseException) -> Optional[TilakeError]:
    """One ``TilakeError`` naming the lake for a write that failed because of the machine, else None.

    Walks ``exc`` and its causes (``__cause__``/``__context__``): an ``OSError`` with ENOSPC/EDQUOT
    (any file), or EROFS/EACCES/EPERM on a path inside ``root`` (a read-only input elsewhere is the
    input's problem, not the lake's); a DuckDB error whose text names a path inside ``root``
    together with one of those causes ("IO Error: Could not write file …/.staging/…: No space
    left on device") — so a full disk during ingest no longer blames the input DB.
    """
    seen, todo, text_root = set(), [exc], str(root)
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        code, where = None, None
        if isinstance(e, OSError) and e.errno in _WRITE_ERRNOS:
            fn = str(e.filename2 or e.filename or "")   # shutil.copy: filename2 is the destination
            inside = fn == text_root or fn.startswith(text_root + os.sep)
            if e.errno in (errno.ENOSPC, errno.EDQUOT) or inside:
                code, where = e.errno, fn
        elif not isinstance(e, OSError) and text_root in str(e):
            code = next((c for t, c in _WRITE_TEXTS.items() if t in str(e)), None)
        if code is not None:
            rel = ""
            if where and where.startswith(text_root + os.sep):
                rel = f" ({os.path.relpath(where, text_root)})"
            elif where:
                rel = f" ({where})"
            return TilakeError(f"cannot write to the lake{rel}: {_WRITE_ERRNOS[code]}; the lake was left "
                               "as it was", path=root)
        todo += [e.__cause__, e.__context__]
    return None


class Lake:
    """An embedded lake rooted at ``root`` (created on first write).

    Attributes:
        root: lake folder. raw: ``root/raw``. warehouse: ``root/warehouse.duckdb``.
    """

    def __init__(self, root: Optional[Union[str, Path]] = None) -> None:
        self.root = lake_root(root)
        self.raw = self.root / "raw"
        self.warehouse = self.root / "warehouse.duckdb"
        self.lock_path = self.root / ".lock"
        # thread that holds the door (writing()); None when no command of this process writes
        self._writer: Optional[int] = None
        # whether the open door committed or removed a partition (a lake it created is then kept)
        self._changed = False

    # ------------------------------------------------------------------ layout
    def ensure(self) -> None:
        """Create the folders and a zero-row schema file per registered table; migrate old lakes.

        Layout (:mod:`tilake.lake.schema`): partition columns only in the ``key=value`` path, every
        data file carrying the table's full :func:`~tilake.lake.schema.file_columns`, and the schema
        file at :meth:`schema_file` (``raw/<table>/_schema/run_id=_/…/schema.parquet``). The dbt sources
        read ``raw/<table>/**/*.parquet`` with ``union_by_name=false``: DuckDB takes the schema from the
        first file of the glob (the schema file sorts first) instead of reading every footer at
        bind time (≈ 0.5 s per reference at 3 000 files; DuckDB 1.5.5 matches the other files'
        columns by name, casts types, ignores extra columns, and fails on a missing one).

        Migration, when a table's schema file is missing or differs from the schema: every data file
        that stores a partition column (lakes before the Hive-readable layout, whose files also
        carried ``run_id``/``side``/``rank``, which pyarrow refused to merge with the path) or lacks a
        column is rewritten without the partition columns and with the missing columns as NULL
        (temp file ``.tmp-*.parquet-partial`` + ``os.replace`` per file); then the schema file is
        written and the old root ``raw/<table>/_empty.parquet`` deleted. An interrupted migration
        leaves the schema file stale or absent, so the next call resumes it, first deleting any temp
        file left. A lake of format 1 (no ``lake.json``) gets a run record per run
        (:func:`tilake.lake.commit.write_record`) and then ``lake.json``. :meth:`writing` calls it once
        per command, under the lock.

        Raises:
            TilakeError: the lake path is a file; the lake is of a newer format.
        """
        if self.root.exists() and not self.root.is_dir():
            raise TilakeError("lake path exists and is not a folder", path=self.root)
        self.raw.mkdir(parents=True, exist_ok=True)
        con = None
        for table in schema.TABLES:
            want = [c for c, _t in schema.file_columns(table)]
            target, old = self.schema_file(table), self.raw / table / "_empty.parquet"
            if target.exists() and not old.exists():
                con = con or connect()
                if parquet_columns(con, target) == want:
                    continue
            target.parent.mkdir(parents=True, exist_ok=True)
            con = con or connect()
            self._migrate_table(con, table)
            with atomic_path(target, TMP_PREFIX, TMP_SUFFIX) as tmp:
                con.execute(f"COPY (SELECT {schema.null_list(schema.file_columns(table))} WHERE false) "
                            f"TO {sql_str(tmp)} (FORMAT parquet)")
            old.unlink(missing_ok=True)
        if con is not None:
            con.close()
        if C.read_format(self.root) < C.FORMAT_VERSION:
            self._record_runs()
            C.write_format(self.root)

    def _record_runs(self) -> int:
        """Format 1 → 2: write the run record (``manifest/<run_id>.json``) of every run from the files it
        has now; returns how many. Killed mid-way, ``lake.json`` is not yet written and this runs again."""
        runs: Dict[str, Dict[str, Dict[str, int]]] = {}
        for table in schema.TABLES:
            d = self.raw / table
            if not d.is_dir():
                continue
            for part in sorted(d.glob("run_id=*")):
                if part.is_dir() and not part.is_symlink():
                    runs.setdefault(part.name.split("=", 1)[1], {})[table] = C.list_files(part, self.root)
        for run_id, tables in runs.items():
            target = C.manifest_path(self.root, run_id)
            tmp = target.with_name(f".{target.name}.tmp")
            C.write_record(tmp, run_id, tables)
            os.replace(tmp, target)
        return len(runs)

    def _migrate_table(self, con, table: str) -> int:
        """Rewrite the data files of ``table`` that store a partition column or lack a column of
        :func:`~tilake.lake.schema.file_columns`; returns how many.

        Rows and values are kept; partition columns are dropped from the file (the path holds them);
        a missing column is added as ``NULL`` of its type; columns the schema no longer lists are
        kept in the file (readers ignore them).
        """
        cols, keys = schema.file_columns(table), set(schema.hive_keys(table))
        # a migration killed mid-way left the schema file stale (it is written last), so this runs
        # again: first drop its half-written or not-yet-renamed temp files
        for stale in (self.raw / table).glob(f"**/{TMP_PREFIX}*"):
            if stale.is_file():
                stale.unlink()
        n = 0
        for f in sorted((self.raw / table).glob("run_id=*/**/*.parquet")):
            if f.name.startswith("."):
                continue
            have = parquet_columns(con, f)
            drop = [c for c in have if c in keys]
            missing = [(c, t) for c, t in cols if c not in have]
            if not missing and not drop:
                continue
            select = "*" + (" EXCLUDE (" + ", ".join(f'"{c}"' for c in drop) + ")" if drop else "")
            add = (", " + schema.null_list(missing)) if missing else ""
            # the temp name does not end in .parquet: no reader glob can pick it up if we are killed
            with atomic_path(f, TMP_PREFIX, TMP_SUFFIX) as tmp:
                con.execute(f"COPY (SELECT {select}{add} FROM read_parquet({sql_str(f)}, hive_partitioning=false)) "
                            f"TO {sql_str(tmp)} (FORMAT parquet, COMPRESSION zstd)")
            n += 1
        return n

    def schema_file(self, table: str) -> Path:
        """The zero-row file fixing ``table``'s file columns (:func:`tilake.lake.schema.schema_file_rel`)."""
        return self.root / schema.schema_file_rel(table)

    def table_glob(self, table: str) -> str:
        """Glob of every Parquet file of ``table`` (including the schema file; read it with
        ``hive_partitioning=true, hive_types=`` :func:`tilake.lake.schema.hive_types_sql`)."""
        return str(self.raw / table / "**" / "*.parquet")

    # ------------------------------------------------------------------ locking
    @contextlib.contextmanager
    def locked(self, wait: Optional[float] = None, quiet: bool = False) -> Iterator[None]:
        """Hold the single-writer lock for the duration of the block.

        The lock file is opened without following a link (``O_NOFOLLOW``) and must be a regular file.
        When another process holds it, waits up to ``wait`` seconds (default :func:`tilake.settings.lock_wait`,
        the ``--wait`` option), printing once on stderr ``waiting for the lake lock held by pid N…``.

        Args:
            quiet: print nothing while waiting (readers completing a journal).
        Raises:
            LakeBusyError: another process held it for longer than ``wait`` (message names the pid);
            TilakeError: the lake path is a file, or the folder or its lock file cannot be created; the lock
            file is a link or not a regular file; the lake path contains ``?``; the lock cannot be taken
            because the lake is read-only or the disk is full; a write inside the block failed for such a
            reason (see :func:`lake_write_error`).
        """
        if self.root.exists() and not self.root.is_dir():
            raise TilakeError("lake path exists and is not a folder", path=self.root)
        if "?" in str(self.root):
            raise TilakeError("the lake path contains '?', which DuckDB reads as the start of URL parameters "
                              "in a database path (the warehouse could never be built)", path=self.root,
                              hint="use a lake folder without '?'")
        C.guard(self.lock_path, False, self.root)
        wait = settings.lock_wait() if wait is None else wait
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                C.guard(self.lock_path, False, self.root)   # raced into a link: the one line
            mapped = lake_write_error(self.root, exc)
            if mapped is not None:
                raise TilakeError(f"cannot take the writer lock: {_WRITE_ERRNOS[exc.errno]}; the lake is unchanged",
                                  path=self.root) from exc
            raise TilakeError(f"cannot create the lake folder or its lock file ({exc.strerror or exc})",
                              path=self.root) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TilakeError("the lake's .lock should be a regular file and is not", path=self.lock_path,
                                  hint="move .lock out of the lake and retry")
            self._take(fd, wait, quiet)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            except OSError as exc:   # a full disk (ENOSPC) or quota: the pid cannot be written
                fcntl.flock(fd, fcntl.LOCK_UN)
                raise TilakeError(f"cannot take the writer lock: {_WRITE_ERRNOS.get(exc.errno, exc.strerror or exc)}; "
                                  "the lake is unchanged", path=self.root) from exc
            try:
                yield
            except Exception as exc:   # a full disk or read-only lake mid-write: one line naming the lake
                mapped = lake_write_error(self.root, exc)
                if mapped is None:
                    raise
                raise mapped from exc
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _take(self, fd: int, wait: float, quiet: bool) -> None:
        """``flock`` ``fd``, waiting up to ``wait`` s for another holder (see :meth:`locked`)."""
        deadline, told, holder = time.monotonic() + wait, False, "unknown"
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or holder
            if time.monotonic() >= deadline:
                waited = f"; waited {wait:g} s for it" if wait > 0 else ""
                raise LakeBusyError(f"another tilake writer is using this lake (pid {holder}){waited}",
                                    path=self.root, hint="retry when it has finished, or give --wait SECONDS") from None
            if not told and not quiet:
                print(f"waiting for the lake lock held by pid {holder}… (up to {wait:g} s; --wait SECONDS)",
                      file=sys.stderr, flush=True)
                told = True
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    @contextlib.contextmanager
    def writing(self) -> Iterator["Lake"]:
        """The one door of a write command: lock, sweep, ensure, once; re-entered for free.

        The outermost entry (per thread) refuses a lake of a newer format, takes the writer lock
        (:meth:`locked`, waiting as ``--wait`` says), refuses lake internals that are links or of the wrong
        kind (:func:`tilake.lake.commit.check_internals`), completes a commit a killed writer sealed
        (:func:`tilake.lake.commit.recover`), removes staging and trash folders a killed writer left
        (:meth:`_sweep_orphans`) and brings the layout up to date (:meth:`ensure`). A nested entry by the thread holding the door does nothing more.
        When the block raises and the door created the lake folder without committing anything
        into it, the folder is removed again: a failed first command leaves nothing behind.

        Raises:
            LakeBusyError: another writer (process or thread) held the lock past the wait; TilakeError: the
            lake path is a file, a lake internal is a link or of the wrong kind, the lake is of a newer format.
        """
        if self._writer == threading.get_ident():
            yield self
            return
        created = not self.root.exists()
        try:
            if self.root.is_dir():
                C.check_format(self.root)   # a newer lake is refused before anything is touched
            with self.locked():
                self._writer, self._changed = threading.get_ident(), False
                try:
                    C.check_format(self.root)
                    C.check_internals(self.root, schema.TABLES)
                    if C.recover(self.root):   # a killed writer's sealed commit: completed first
                        self._changed = True
                    self._sweep_orphans()
                    self.ensure()
                    yield self
                finally:
                    self._writer = None
        except BaseException:
            if created and not self._changed:
                shutil.rmtree(self.root, ignore_errors=True)
            raise

    @contextlib.contextmanager
    def reading(self, raw: RawTables = True, error: Optional[str] = None) -> Iterator[Any]:
        """The one read door, mirror of :meth:`writing`: a read-only DuckDB connection over the
        warehouse in an instance of its own, with ``raw_<table>`` views over the Parquet lake (``raw``:
        True all, False none, or the table names), closed when the block ends (:mod:`tilake.lake.read`).
        Never locks, never migrates: readers and a writer swapping the warehouse in do not block each other.

        Raises:
            TilakeError: no warehouse yet; DuckDB cannot open it (``error``: the message's first words).
        """
        con = open_read(self, raw, error)
        try:
            yield con
        finally:
            con.close()

    @contextlib.contextmanager
    def write_run(self, run_id: str, tables: Sequence[str]) -> Iterator["RunWriter"]:
        """Stage a run's partitions and swap them in atomically at the end of the block.

        Runs inside :meth:`writing` (the caller's door, or its own when called alone).

        Args:
            run_id: validated run id.
            tables: the tables this writer owns; their old partitions of ``run_id`` are replaced
                (removed when nothing new was written for them).
        Raises:
            TilakeError: invalid run id or unknown table; LakeBusyError: lock held elsewhere.
        """
        validate_run_id(run_id)
        for t in tables:
            if t not in schema.TABLES:
                raise TilakeError(f"unknown lake table {t!r}")
        with self.writing():
            staging = self.root / ".staging" / uuid.uuid4().hex
            staging.mkdir(parents=True)
            writer = RunWriter(self, run_id, list(tables), staging)
            try:
                yield writer
                writer._close()
                compact_staged(staging, run_id, writer.tables)   # many small files of a leaf → one
                self._commit(writer)
            finally:
                writer._close()
                if not C.pending(self.root):   # a sealed commit that failed mid-way still needs its staging
                    shutil.rmtree(staging, ignore_errors=True)
                with contextlib.suppress(OSError):
                    (self.root / ".staging").rmdir()

    def _sweep_orphans(self) -> None:
        """Remove staging/trash folders left by a killed writer (we hold the lock: nobody else writes; both
        were checked not to be links by :meth:`writing`)."""
        for d in (self.root / ".staging", self.root / ".trash"):
            if d.is_dir() and not d.is_symlink():
                for child in d.iterdir():
                    shutil.rmtree(child, ignore_errors=True)

    def remove_run(self, run_id: str, tables: Optional[Sequence[str]] = None) -> int:
        """Delete every partition of ``run_id`` (all tables by default), inside :meth:`writing`, in one
        commit (:class:`tilake.lake.commit.Commit`) together with its run record.

        Returns:
            the number of partition folders removed.
        Raises:
            TilakeError: invalid run id; LakeBusyError: lock held elsewhere.
        """
        validate_run_id(run_id)
        with self.writing():
            chosen = list(tables or schema.TABLES)
            record = C.read_manifest(self.root, run_id)
            parts = [t for t in chosen if os.path.lexists(self.raw / t / f"run_id={run_id}")]
            if not parts:
                return 0
            com = C.Commit(self.root)
            for t in parts:
                com.replace(self.raw / t / f"run_id={run_id}", None)
                record.pop(t, None)
            staged = self._stage_record(run_id, record)
            com.replace(C.manifest_path(self.root, run_id), staged)
            try:
                com.apply()
            finally:
                if staged is not None and not C.pending(self.root):
                    shutil.rmtree(staged.parent, ignore_errors=True)
            self._changed = True
        return len(parts)

    def _stage_record(self, run_id: str, record: Dict[str, Dict[str, int]]) -> Optional[Path]:
        """Write ``record`` as a staged run record (None when the run has no table left)."""
        if not record:
            return None
        path = self.root / ".staging" / uuid.uuid4().hex / "record.json"
        C.write_record(path, run_id, record)
        return path

    def _commit(self, writer: "RunWriter") -> None:
        """Swap the writer's staged partitions of ``writer.tables`` and the run's updated record in, in one
        commit (:class:`tilake.lake.commit.Commit`: sealed journal, renames, journal removed, trash deleted)."""
        record = C.read_manifest(self.root, writer.run_id)
        if not record and not C.manifest_path(self.root, writer.run_id).exists():
            # no record yet: the run's other tables (written before records existed) keep theirs
            for t in schema.TABLES:
                part = self.raw / t / f"run_id={writer.run_id}"
                if t not in writer.tables and part.is_dir():
                    record[t] = C.list_files(part, self.root)
        com = C.Commit(self.root)
        for t in writer.tables:
            target = self.raw / t / f"run_id={writer.run_id}"
            staged = writer.staging / t / f"run_id={writer.run_id}"
            if staged.is_dir():
                files = C.list_files(staged, staged)
                record[t] = {os.path.relpath(target / f, self.root): n for f, n in files.items()}
                target.parent.mkdir(parents=True, exist_ok=True)
            else:
                record.pop(t, None)
            com.replace(target, staged)
        rec = writer.staging / ".record.json" if record else None
        if rec is not None:
            C.write_record(rec, writer.run_id, record)
        com.replace(C.manifest_path(self.root, writer.run_id), rec)
        (self.root / C.MANIFESTS).mkdir(exist_ok=True)
        if com.apply():
            self._changed = True


class RunWriter:
    """Stages Parquet files for one run. Obtained from :meth:`Lake.write_run`."""

    def __init__(self, lake: Lake, run_id: str, tables: List[str], staging: Path) -> None:
        self.lake = lake
        self.run_id = run_id
        self.tables = tables
        self.staging = staging
        self.rows_written: Dict[str, int] = {}
        self._con = None
        self._seq = 0

    def _close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @property
    def con(self):
        """A private in-memory DuckDB connection for staging work (SQLite scanner: :func:`.duck.with_sqlite`)."""
        if self._con is None:
            self._con = connect()
        return self._con

    def _target(self, table: str, partition: Dict[str, Any]) -> Path:
        if table not in self.tables:
            raise TilakeError(f"writer for run {self.run_id} does not own table {table!r}")
        d = self.staging / table / f"run_id={self.run_id}"
        for key in schema.PARTITIONS[table]:
            if key not in partition:
                raise TilakeError(f"table {table} needs partition value {key!r}")
            val = str(partition[key])
            if not RUN_ID_RE.match(val):
                raise TilakeError(f"invalid partition value {key}={val!r}")
            d = d / f"{key}={val}"
        d.mkdir(parents=True, exist_ok=True)
        self._seq += 1
        return d / f"part-{self._seq:05d}.parquet"

    def copy_query(self, table: str, sql: str, partition: Optional[schema.Partition] = None,
                   con=None, strings: Iterable[str] = ()) -> int:
        """Write the rows of ``sql`` (must yield the table's columns by name) as one Parquet file.

        The run id and partition values go into the folder path only (the file holds
        :func:`~tilake.lake.schema.file_columns`; a partition column ``sql`` yields is ignored).
        ``strings``: VARCHAR columns that ``sql`` may yield as an ENUM; they are written as they come
        (Parquet UTF-8 strings either way, from the ENUM's dictionary without hashing each value).
        Returns the row count.
        """
        partition = dict(partition or {})
        con = con or self.con
        keep = set(strings)
        cols = [f'q."{c}"' if c in keep and t == "VARCHAR" else f'CAST(q."{c}" AS {t}) AS "{c}"'
                for c, t in schema.file_columns(table)]
        target = self._target(table, partition)
        con.execute(f"COPY (SELECT {', '.join(cols)} FROM ({sql}) q) TO {sql_str(target)} "
                    "(FORMAT parquet, COMPRESSION zstd)")
        n = con.execute(f"SELECT count(*) FROM read_parquet({sql_str(target)})").fetchone()[0]
        self.rows_written[table] = self.rows_written.get(table, 0) + n
        return n

    def rows_table(self, columns: List[tuple], rows: Iterable[schema.LakeRow]) -> str:
        """Load Python rows into a temp table of the given ``(name, type)`` columns; returns its name.

        Rows go through a newline-delimited JSON file in the staging folder and DuckDB's
        ``read_json`` with explicit types (DuckDB's per-value Python conversion is slow when
        pandas is not installed). Dict/list values are stored as JSON text.
        """
        name = f"_rows_{uuid.uuid4().hex[:8]}"
        path = self.staging / f"{name}.ndjson"
        with open(path, "w", encoding="utf-8") as f:
            for r in rows:
                rec = {}
                for c, _t in columns:
                    v = r.get(c)
                    if isinstance(v, (dict, list)):
                        v = json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)
                    elif isinstance(v, datetime):
                        v = v.strftime("%Y-%m-%d %H:%M:%S.%f")
                    elif v is not None and not isinstance(v, (str, int, float, bool)):
                        v = str(v)
                    rec[c] = v
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        spec = "{" + ", ".join(f"{sql_str(c)}: {sql_str(t)}" for c, t in columns) + "}"
        if path.stat().st_size == 0:
            self.con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT {schema.null_list(columns)} WHERE false')
        else:
            self.con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM read_json({sql_str(path)}, '
                             f"format='newline_delimited', columns={spec}, timestampformat='%Y-%m-%d %H:%M:%S.%f')")
        path.unlink()
        return name

    def write_rows(self, table: str, rows: Iterable[schema.LakeRow],
                   partition: Optional[schema.Partition] = None) -> int:
        """Write Python rows (dicts keyed by column name; missing keys are NULL). Returns the count."""
        tmp = self.rows_table(schema.TABLES[table], rows)
        try:
            return self.copy_query(table, f'SELECT * FROM "{tmp}"', partition)
        finally:
            self.con.execute(f'DROP TABLE "{tmp}"')

