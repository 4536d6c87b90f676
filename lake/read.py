"""The lake's one read door: :meth:`tilake.lake.store.Lake.reading` (mirror of ``Lake.writing``).

Every reader opens the warehouse here (``tilake.open_lake``, ``tilake sql`` and its shell, the
registry, the reports, the kernel alignment): a read-only connection over ``<lake>/warehouse.duckdb``
in a DuckDB instance of its own (:func:`tilake.lake.duck.connect_private`), with the ``raw_<table>``
temporary views over the Parquet lake (:func:`raw_view_sql`, the one spelling of those views; the
DuckDB CLI shell runs the same statements from its init file).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Union

import duckdb

from tilake.errors import TilakeError
from tilake.lake import schema
from tilake.lake.commit import check_format, settle
from tilake.lake.duck import connect_private, sql_str

LakeLike = Any
"""A :class:`tilake.lake.store.Lake` (not imported here: the store imports this module)."""
RawTables = Union[bool, Iterable[str]]
"""Which ``raw_<table>`` views a read connection gets: True every raw table, False none, or the names."""


def raw_source(lake: LakeLike, table: str) -> str:
    """SQL table expression for a raw table, columns in :data:`tilake.lake.schema.TABLES` order:
    ``read_parquet`` of its files as a Hive dataset (partition columns from the path, typed by
    :func:`~tilake.lake.schema.hive_types_sql`; ``WHERE run_id = …`` opens only that run's files), or
    a typed empty relation when the table has no file yet. A lake not yet migrated by
    :meth:`Lake.ensure` (read-only readers never migrate; its root ``_empty.parquet`` has no
    partition path and its files store the partition columns) is read with path parsing off."""
    cols = schema.TABLES[table]
    if any((lake.raw / table).rglob("*.parquet")) if (lake.raw / table).is_dir() else False:
        names = ", ".join(f'"{c}"' for c, _t in cols)
        if (lake.raw / table / "_empty.parquet").exists():
            return (f"(SELECT {names} FROM read_parquet({sql_str(lake.table_glob(table))}, hive_partitioning=false, "
                    "union_by_name=true))")
        return (f"(SELECT {names} FROM read_parquet({sql_str(lake.table_glob(table))}, hive_partitioning=true, "
                f"hive_types={schema.hive_types_sql(table)}, union_by_name=true))")
    return f"(SELECT {schema.null_list(cols)} WHERE false)"


def raw_tables(raw: RawTables) -> List[str]:
    """The raw table names ``raw`` selects, in :data:`tilake.lake.schema.TABLES` order (unknown names dropped)."""
    if raw is True:
        return list(schema.TABLES)
    if raw is False or raw is None:
        return []
    wanted = set(raw)
    return [t for t in schema.TABLES if t in wanted]


def raw_tables_named(sql: str) -> List[str]:
    """The raw tables whose ``raw_<table>`` view the query text ``sql`` names (case-insensitive)."""
    low = sql.lower()
    return [t for t in schema.TABLES if f"raw_{t}" in low]


def raw_view_sql(lake: LakeLike, table: str) -> str:
    """``CREATE OR REPLACE TEMP VIEW "raw_<table>"`` over the table's Parquet (:func:`raw_source`), no ``;``."""
    return f'CREATE OR REPLACE TEMP VIEW "raw_{table}" AS SELECT * FROM {raw_source(lake, table)}'


def open_read(lake: LakeLike, raw: RawTables = True, error: Optional[str] = None) -> duckdb.DuckDBPyConnection:
    """The connection :meth:`Lake.reading` yields (the caller closes it).

    Args:
        raw: the ``raw_<table>`` views to create (:data:`RawTables`).
        error: the first words of the message when DuckDB cannot open the file (default
            ``cannot open the warehouse read-only``), followed by DuckDB's message on one line.
    Raises:
        TilakeError: the lake has a newer format (:func:`tilake.lake.commit.check_format`); no warehouse yet
            (run ``tilake build``); DuckDB cannot attach it (not a DuckDB file, held by an old-style writer).
    """
    check_format(lake.root)   # a lake of a newer tilake: one line, for readers too
    if raw_tables(raw):
        settle(lake)   # a commit a killed writer sealed is completed before the raw views see it
    con = _attach(lake.warehouse, error)
    try:
        for t in raw_tables(raw):
            con.execute(raw_view_sql(lake, t))
    except BaseException:
        con.close()
        raise
    return con


def _attach(warehouse: Path, error: Optional[str]) -> duckdb.DuckDBPyConnection:
    if not warehouse.exists():
        raise TilakeError("no warehouse yet", path=warehouse, hint="run `tilake build` (or `tilake run`) first")
    try:
        return connect_private(warehouse)
    except duckdb.Error as exc:
        raise TilakeError(f"{error or 'cannot open the warehouse read-only'}: {error_line(exc)}",
                          path=warehouse) from exc


def error_line(exc: BaseException) -> str:
    """DuckDB's error message as one line: the message and its hints, without the ``LINE n:`` caret block."""
    keep = []
    for line in str(exc).splitlines():
        if line.startswith("LINE "):
            break
        if line.strip():
            keep.append(line.strip())
    return " ".join(keep) or type(exc).__name__



@contextlib.contextmanager
def reading_file(warehouse: Union[str, Path], error: Optional[str] = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """:meth:`Lake.reading` without raw views for the readers that are handed the warehouse file of a
    lake (the reports, the kernel alignment): the same connection, closed when the block ends.

    Raises:
        TilakeError: as :func:`open_read`.
    """
    con = _attach(Path(warehouse), error)
    try:
        yield con
    finally:
        con.close()
