"""The Python entry point for notebooks: ``tilake.open_lake(path)`` — no CLI needed.

The idea is HolisticTraceAnalysis' ``TraceAnalysis`` (one object over a folder of traces that a notebook
queries directly); here the object is a DuckDB connection, so every mart is a table, every raw lake table
is a view, and results go to pandas/polars/arrow with DuckDB's own ``.df()``/``.pl()``/``.arrow()``::

    import tilake

    con = tilake.open_lake("tilake-lake")          # or tilake.open_lake() with $TILAKE_LAKE
    con.sql("SHOW TABLES").show()                   # marts (fct_*, dim_*) and raw_<table> views
    red = con.sql("SELECT run_id, module, train_ops, infer_ops FROM fct_op_comparison "
                  "WHERE grade = 'red'").df()
    kernels = con.sql("SELECT side, op_type, sum(dur_ns) / 1e3 AS device_us FROM raw_kernels "
                      "WHERE run_id = 'example-qwen3-0.6b-grpo' GROUP BY ALL ORDER BY 3 DESC").df()
    con.close()

What it is:

* the lake's ``warehouse.duckdb`` attached **read-only** in a DuckDB instance of its own (DuckDB
  refuses INSERT/UPDATE/CREATE TABLE/… inside it; nothing a notebook does changes the lake; settings
  made on it never reach ``tilake sql`` or other connections in the process, nor the other way
  round — :func:`tilake.lake.duck.connect_private`);
* one temporary view ``raw_<table>`` per raw table (``raw_runs``, ``raw_captures``, ``raw_kernels``,
  ``raw_host_ops``, ``raw_call_stacks``, ``raw_tensor_stats``, ``raw_boundary_results``, …) over its
  Hive-partitioned Parquet, the same views ``tilake sql`` offers;
* extension auto-install/auto-load switched off (no network at run time).

``tilake build`` swaps in a new warehouse file (copy-and-swap), so an open connection keeps seeing
the state it opened; call ``open_lake`` again after a build to see new runs. A connection opened here
never blocks a writer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import duckdb

from tilake.errors import TilakeError
from tilake.lake.read import open_read
from tilake.lake.store import Lake

__all__ = ["open_lake"]


def open_lake(path: Optional[Union[str, Path]] = None) -> duckdb.DuckDBPyConnection:
    """Open a lake for reading: the marts as tables, the raw tables as ``raw_<table>`` views.

    Args:
        path: the lake folder; default ``$TILAKE_LAKE``, else ``./tilake-lake`` (as the CLI).
    Returns:
        A read-only DuckDB connection over ``<lake>/warehouse.duckdb`` (close it when done, or use it
        as a context manager: ``with tilake.open_lake(p) as con: ...``).
    Raises:
        TilakeError: the folder is not a lake, or it has no warehouse yet (run ``tilake build`` or
            ``tilake run``), or DuckDB cannot open the warehouse (its message, on one line).
    """
    lake = Lake(path)
    if not lake.root.is_dir():
        raise TilakeError("no lake here", path=lake.root, hint="ingest a run first (tilake run / example)")
    if not lake.warehouse.exists():
        raise TilakeError("the lake has no warehouse yet", path=lake.root,
                          hint="run `tilake build` (or `tilake run`) first")
    con: duckdb.DuckDBPyConnection = open_read(lake)   # what Lake.reading() yields, left open for the caller
    return con
