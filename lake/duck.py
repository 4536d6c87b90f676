"""DuckDB connections with the SQLite scanner loaded from its wheel, never downloaded.

The extension file ships in the ``duckdb-extension-sqlite-scanner`` package
(``duckdb_extension_sqlite_scanner/extensions/v<version>/sqlite_scanner.duckdb_extension``);
auto-install and auto-load are switched off so no network access can happen at run time.

Memory and spilling: every connection gets the memory limit of :func:`tilake.settings.memory_limit`
and its own spill folder under one private per-process folder, both set once when the connection
opens. DuckDB refuses to change ``temp_directory`` once a connection has spilled ("Cannot switch
temporary directory after the current one has been used", BR-22), and two database instances
writing the same folder clash on file names, so neither is ever changed later.
"""
from __future__ import annotations

import atexit
import glob
import itertools
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import List, Optional, Union

import duckdb

from tilake import settings
from tilake.errors import TilakeError

_NO_NETWORK = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# DuckDB 1.5.5: with top_n_window_elimination, a CREATE TABLE AS of ``qualify row_number() over
# (partition by <Hive partition column> order by …) = 1`` joined to another relation writes 0 rows
# while the SELECT alone returns them (found on dim_runs over raw/runs read with
# hive_partitioning=true); every tilake connection and the dbt profile switch it off
SAFE_OPTIMIZERS = {"disabled_optimizers": "top_n_window_elimination"}


def sqlite_extension_path() -> str:
    """Path of the sqlite_scanner extension file shipped by ``duckdb-extension-sqlite-scanner``.

    Raises:
        TilakeError: the package is missing or holds no extension for this DuckDB version.
    """
    try:
        import duckdb_extension_sqlite_scanner as pkg
    except ImportError as exc:  # pragma: no cover - install problem
        raise TilakeError("the duckdb-extension-sqlite-scanner package is not installed",
                          hint="pip install duckdb-extension-sqlite-scanner==" + duckdb.__version__) from exc
    base = os.path.join(os.path.dirname(pkg.__file__), "extensions")
    exact = os.path.join(base, "v" + duckdb.__version__, "sqlite_scanner.duckdb_extension")
    if os.path.exists(exact):
        return exact
    found = sorted(glob.glob(os.path.join(base, "*", "sqlite_scanner.duckdb_extension")))
    if not found:
        raise TilakeError("no sqlite_scanner extension file inside duckdb-extension-sqlite-scanner", path=base)
    return found[-1]


_SPILL_LOCK = threading.Lock()
_SPILL = {"root": None, "pid": None}
_SPILL_SEQ = itertools.count()


def spill_root() -> Path:
    """This process's private spill folder (``$TMPDIR/tilake-spill-*``), created on first use and
    removed when the process exits; a forked child gets its own."""
    with _SPILL_LOCK:
        if _SPILL["root"] is None or _SPILL["pid"] != os.getpid():
            root = Path(tempfile.mkdtemp(prefix="tilake-spill-"))
            _SPILL.update(root=root, pid=os.getpid())
            atexit.register(shutil.rmtree, root, True)
        return _SPILL["root"]


def connect(database: Optional[Union[str, Path]] = None, read_only: bool = False,
            sqlite: bool = False) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB connection with network extension loading disabled.

    Args:
        database: DuckDB file, or None for in-memory.
        read_only: open the file read-only (reports and ``tilake sql`` use this).
        sqlite: load the SQLite scanner from its wheel.
    Returns:
        A DuckDB connection whose memory limit (:func:`tilake.settings.memory_limit`) and spill
        folder (one per connection under :func:`spill_root`) are fixed for its lifetime.
    Raises:
        TilakeError: ``$TILAKE_MEMORY_LIMIT`` is not a size.
    """
    spill = spill_root() / f"c{next(_SPILL_SEQ)}"
    config = dict(_NO_NETWORK, memory_limit=settings.memory_limit(), temp_directory=str(spill), **SAFE_OPTIMIZERS)
    con = duckdb.connect(str(database) if database else ":memory:", read_only=read_only, config=config)
    if sqlite:
        con.execute(f"LOAD '{sqlite_extension_path()}'")
    return con


def connect_private(database: Union[str, Path]) -> duckdb.DuckDBPyConnection:
    """Open ``database`` read-only in a DuckDB instance of its own (not shared with any other connection).

    ``duckdb.connect(file)`` hands every connection to the same file in one process the same database
    instance, so settings are shared: ``tilake sql``'s ``lock_configuration`` (and its file-access
    limits) landed on a notebook's ``tilake.open_lake()`` connection, and the next ``tilake sql`` query
    in that process failed with 'Cannot change configuration option … the configuration has been
    locked'. Here the connection is a fresh in-memory instance that ATTACHes the file ``READ_ONLY``
    under its file stem (``warehouse``: the catalog name the dbt-built views use) and makes it the
    default catalog (``USE``), so unqualified names are the file's tables and views.

    Raises:
        duckdb.Error: the file cannot be attached (missing, not a DuckDB file, locked by a writer).
    """
    con = connect()
    try:
        con.execute(f"ATTACH {sql_str(database)} AS \"{Path(database).stem}\" (READ_ONLY)")
        con.execute(f'USE "{Path(database).stem}"')
    except duckdb.Error:
        con.close()
        raise
    return con


def with_sqlite(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` with DuckDB's SQLite scanner loaded (a no-op once loaded). Loaded on demand by the profiler-DB
    readers: the first LOAD costs ~0.3 CPU-s and ~5 MiB, which a torch-trace ingest never needs."""
    con.execute(f"LOAD {sql_str(sqlite_extension_path())}")
    return con


def memory_limit_bytes(con: duckdb.DuckDBPyConnection) -> Optional[int]:
    """The connection's DuckDB ``memory_limit`` in bytes (``current_setting`` prints e.g. ``232.6 MiB``);
    None when it is unlimited or not a size."""
    return settings.size_bytes(str(con.execute("SELECT current_setting('memory_limit')").fetchone()[0]))


def sql_str(value: Union[str, Path]) -> str:
    """Quote a value as a SQL string literal (single quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def sqlite_uri(path: Union[str, Path]) -> str:
    """``file:`` URI that opens the SQLite file ``path`` read-only and immutable (no ``-journal``/``-wal``
    file is created beside it), with the path percent-encoded: a folder named ``run#3`` or ``a?b``
    or ``100%`` would otherwise end the path at ``#``/``?`` or decode ``%41``, and SQLite would open
    (and create, as a zero-byte file) another file beside the input (https://sqlite.org/uri.html)."""
    import urllib.parse

    return "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro&immutable=1"


def sqlite_ro(path: Union[str, Path]):
    """A ``sqlite3`` connection to ``path``, read-only and immutable (:func:`sqlite_uri`).

    Raises:
        sqlite3.Error: the file cannot be opened (missing: ``unable to open database file``).
    """
    import sqlite3

    return sqlite3.connect(sqlite_uri(path), uri=True)


def parquet_columns(con, path: Union[str, Path]) -> List[str]:
    """Column names stored in one Parquet file (Hive path parsing off: ``run_id=`` folders add nothing)."""
    return [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({sql_str(path)}, "
                                      "hive_partitioning=false)").fetchall()]
