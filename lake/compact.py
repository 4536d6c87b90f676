"""Small files: merge the Parquet files of one leaf partition (``<table>/run_id=…/side=…/rank=…``) into one.

Where sizes are chosen: every data file is one ``COPY … TO … (FORMAT parquet, COMPRESSION zstd)`` of
:meth:`tilake.lake.store.RunWriter.copy_query` — one file per (table, capture, write), so one leaf gets
one file per capture and write: a training rank's kernels come as 2 files (compute kernels, then the
HCCL ops), and rollout replicas that all say rank 0 (vllm-ascend workers) put one file each into
``side=infer/rank=0``. Row groups are DuckDB's default, 122,880 rows (``ROW_GROUP_SIZE``, DuckDB 1.5.5
COPY docs); the compacted file is written with :data:`ROW_GROUP_ROWS`, the same figure, stated.

Two entries:

* :func:`compact_staged` — at every commit (:meth:`tilake.lake.store.Lake.write_run`, before the
  rename): a staged leaf with more than :data:`AUTO_MIN_FILES` files whose mean size is under
  :data:`SMALL_BYTES` is merged. Staging is private, so no reader can see the half-done state.
* :func:`compact_run` — ``tilake runs compact RUN``: the same for a committed run (any leaf with at
  least ``min_files`` files), staged beside the lake and swapped in by one commit
  (:class:`tilake.lake.commit.Commit`: every table's folder and the run record in one sealed journal), under
  the writer lock; rows are unchanged (checked by tests/lake/test_compact.py).

Rows keep their order: the files are read in name order (``preserve_insertion_order`` is on).
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, Iterable, List, Sequence

from tilake.lake.commit import pending
from tilake.lake.duck import connect, sql_str

AUTO_MIN_FILES = 8
"""A staged leaf partition with more files than this is merged at commit (when they are small)."""
SMALL_BYTES = 64 << 20
"""Mean file size under which the files of a leaf count as small (64 MiB)."""
ROW_GROUP_ROWS = 122_880
"""Rows per Parquet row group of a compacted file (DuckDB's default for every other lake file)."""
COMPACTED = "part-c00001.parquet"


def _leaves(table_dir: Path) -> Dict[Path, List[Path]]:
    """Leaf folder → its data files (name order) under one ``<table>/run_id=…`` folder."""
    out: Dict[Path, List[Path]] = {}
    for f in sorted(table_dir.rglob("*.parquet")):
        if not f.name.startswith("."):
            out.setdefault(f.parent, []).append(f)
    return out


def _merge(con, files: Sequence[Path], target: Path) -> int:
    """Write the rows of ``files`` (in order) to ``target``; returns the row count."""
    src = "[" + ", ".join(sql_str(f) for f in files) + "]"
    con.execute(f"COPY (SELECT * FROM read_parquet({src}, hive_partitioning=false, union_by_name=true)) "
                f"TO {sql_str(target)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
    return con.execute(f"SELECT count(*) FROM read_parquet({sql_str(target)})").fetchone()[0]


def _needs(files: Sequence[Path], min_files: int, small_bytes: int) -> bool:
    return len(files) >= min_files and sum(f.stat().st_size for f in files) / len(files) < small_bytes


def compact_staged(staging: Path, run_id: str, tables: Iterable[str], min_files: int = AUTO_MIN_FILES + 1,
                   small_bytes: int = SMALL_BYTES) -> int:
    """Merge, inside a writer's staging folder, each leaf of ``run_id`` with ≥ ``min_files`` small files.

    Returns:
        files removed (merged away). Raises: duckdb.Error on a write failure (the caller's commit then
        does not happen and the staging folder is removed: the lake is unchanged).
    """
    removed, con = 0, None
    try:
        for t in tables:
            for leaf, files in _leaves(Path(staging) / t / f"run_id={run_id}").items():
                if not _needs(files, min_files, small_bytes):
                    continue
                con = con or connect()
                tmp = leaf / f".compact-{uuid.uuid4().hex[:8]}.parquet-partial"
                _merge(con, files, tmp)
                for f in files:
                    f.unlink()
                os.rename(tmp, leaf / COMPACTED)
                removed += len(files) - 1
    finally:
        if con is not None:
            con.close()
    return removed


def compact_run(lake, run_id: str, min_files: int = 2, small_bytes: int = SMALL_BYTES) -> Dict[str, int]:
    """``tilake runs compact RUN``: merge each leaf partition of a committed run with ≥ ``min_files``
    files of mean size under ``small_bytes`` into one file; returns ``{table: files merged away}``
    (tables left as they were are not listed).

    Per table the run's folder is rebuilt in a staging folder (merged leaves written anew, other files
    hard-linked, or copied where links fail) and every table is swapped in by one commit
    (:meth:`tilake.lake.store.Lake._commit`: a sealed journal, old folders to ``.trash``, then deleted),
    inside :meth:`Lake.writing`. Rows are unchanged.
    ``run_id`` must be valid (:func:`tilake.lake.store.validate_run_id`, which the caller runs: this
    module sits below the store).
    Raises:
        TilakeError: the run is not in the lake; LakeBusyError.
    """
    from tilake.errors import TilakeError
    from tilake.lake import schema

    out: Dict[str, int] = {}
    with lake.writing():
        tables = [t for t in schema.TABLES if (lake.raw / t / f"run_id={run_id}").is_dir()]
        if not tables:
            raise TilakeError(f"run {run_id} is not in the lake (tilake runs lists the runs)", path=lake.root)
        staging = lake.root / ".staging" / uuid.uuid4().hex
        con = connect()
        try:
            todo = []
            for t in tables:
                src = lake.raw / t / f"run_id={run_id}"
                leaves = _leaves(src)
                if not any(_needs(f, min_files, small_bytes) for f in leaves.values()):
                    continue
                removed = 0
                for leaf, files in leaves.items():
                    dest = staging / t / f"run_id={run_id}" / leaf.relative_to(src)
                    dest.mkdir(parents=True, exist_ok=True)
                    if _needs(files, min_files, small_bytes):
                        _merge(con, files, dest / COMPACTED)
                        removed += len(files) - 1
                        continue
                    for f in files:
                        try:
                            os.link(f, dest / f.name)
                        except OSError:
                            shutil.copy2(f, dest / f.name)
                todo.append(t)
                out[t] = removed
            con.close()
            con = None
            if todo:
                lake._commit(SimpleNamespace(tables=todo, run_id=run_id, staging=staging))
        finally:
            if con is not None:
                con.close()
            if not pending(lake.root):   # a sealed commit that failed mid-way still needs its staging
                shutil.rmtree(staging, ignore_errors=True)
    return out
