"""Kernel strings through ENUMs and lookup lists, the TASK duplicate bitmap, range size under a memory limit.

Real inputs first: the torch_npu level-0 and level-2 DBs of ``../shared/fixtures/profiler`` (a CNN job);
the memory-limit case is a BR-22-kind DB written by ``tilake.synth.write_big_db`` (real torch_npu DDL
copied from those fixtures) plus unrelated STRING_IDS rows, as ``fixtures/bugs/BR-22/make_input.py`` does.
"""
from __future__ import annotations

import sqlite3

import duckdb
import pyarrow.parquet as pq
import pytest
from profiler_helpers import FIXTURE_DB, raw

from tilake import settings
from tilake.ingest.profiler import decode, kernels
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import _workers_for, ingest_profile
from tilake.ingest.profiler.rows import distinct_ids
from tilake.lake.store import Lake
from tilake.pipeline.failures import error_line
from tilake.synth import write_big_db

COLS = ("rank, capture_id, global_task_id, device_id, stream_id, task_id, start_ns, end_ns, dur_ns, kernel_name, "
        "op_type, op_type_derived, accelerator, device_task_type, block_dim, input_shapes, input_dtypes, "
        "input_formats, output_shapes, output_dtypes, output_formats, connection_id, cann_api_name, host_op_id, "
        "host_op_name, callchain_id, match_confidence")


@pytest.mark.parametrize("level", ["level0", "level2"])
def test_enum_and_lookup_list_path_equals_plain_strings(shared_dir, tmp_path, monkeypatch, level):
    """Every kernel column is the same whether strings go through ENUMs + lookup lists (default) or plain
    VARCHAR + LEFT JOINs (ENUM_MAX_VALUES = 0, LUT_MAX_SPAN = 0); level 0 has no opType (derived names)."""
    caps = explicit(shared_dir / FIXTURE_DB / level, "train")
    fast = Lake(tmp_path / "fast")
    ingest_profile(fast, "r", caps, allow_missing=True, progress=False)
    monkeypatch.setattr(decode, "ENUM_MAX_VALUES", 0)
    monkeypatch.setattr(decode, "LUT_MAX_SPAN", 0)
    plain = Lake(tmp_path / "plain")
    ingest_profile(plain, "r", explicit(shared_dir / FIXTURE_DB / level, "train"), allow_missing=True, progress=False)
    got = sorted(raw(fast.root, "kernels", "true").project(COLS).fetchall(), key=repr)
    want = sorted(raw(plain.root, "kernels", "true").project(COLS).fetchall(), key=repr)
    assert len(got) == 382 and got == want
    derived = sum(1 for r in got if r[11])
    assert derived == (382 if level == "level0" else 0)
    # the files hold plain UTF-8 strings (Parquet logical type String), never an ENUM
    f = next((fast.raw / "kernels").rglob("*.parquet"))
    schema = pq.read_schema(f)
    assert str(schema.field("kernel_name").type) == "string" and str(schema.field("op_type").type) == "string"


def test_distinct_ids_counts_exactly():
    con = duckdb.connect()
    rel = "(SELECT * FROM (VALUES (1), (2), (2), (NULL), (5)) t(globalTaskId))"
    assert distinct_ids(con, rel) == (5, 3)                   # bitmap over the span 1..5
    wide = "(SELECT * FROM (VALUES (1), (2), (2), (NULL), (5000000000)) t(globalTaskId))"
    assert distinct_ids(con, wide) == (5, 3)                  # span too wide for a bitmap: count(DISTINCT)
    assert distinct_ids(con, "(SELECT * FROM (VALUES (-3), (-3), (7)) t(globalTaskId))") == (3, 2)
    assert distinct_ids(con, "(SELECT 1::BIGINT AS globalTaskId WHERE false)") == (0, 0)


def test_chunk_rows_follow_the_memory_limit():
    small = duckdb.connect(config={"memory_limit": "100MB"})   # DuckDB prints it back as '95.3 MiB'
    assert kernels.chunk_rows(small) == int(95.3 * (1 << 20)) // 256      # nothing held: all of it
    small.execute("CREATE TEMP TABLE held AS SELECT repeat('x', 40) || range AS s FROM range(1000000)")
    held = small.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory() WHERE tag = 'IN_MEMORY_TABLE'").fetchone()[0]
    assert held > 20 << 20                                     # the strings sit in the limit
    assert kernels.chunk_rows(small) == max(int(95.3 * (1 << 20)) - held, int(95.3 * (1 << 20)) // 8) // 256
    assert kernels.chunk_rows(duckdb.connect(config={"memory_limit": "2GB"})) == 2_000_000
    assert kernels.chunk_rows(duckdb.connect(config={"memory_limit": "1MB"})) == 50_000


def test_small_memory_limit_ingests_a_big_capture_in_ranges(tmp_path, monkeypatch):
    """BR-22 kind: 300,000 kernels and 600,000 unrelated STRING_IDS rows under a 128 MB limit (was: one
    2 M-row join range, 'failed to pin block' below ~400 MiB). The decoded strings hold much of the limit,
    so the join runs in ≥ 2 ranges, and every kernel lands."""
    db = tmp_path / "train" / "ascend_pytorch_profiler_0.db"
    write_big_db(db, 300_000)
    with sqlite3.connect(db) as c:
        base = c.execute("SELECT max(id) FROM STRING_IDS").fetchone()[0] + 1
        c.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", ((base + i, f"aten::unused_string_{i}") for i in range(600_000)))
    monkeypatch.setenv(settings.MEMORY_LIMIT, "128MB")
    lake = Lake(tmp_path / "lake")
    ingest_profile(lake, "big", explicit(db, "train"), allow_missing=True, progress=False)
    files = list((lake.raw / "kernels").rglob("*.parquet"))
    assert len(files) >= 2
    n, names = raw(lake.root, "kernels", "true").aggregate("count(*), count(DISTINCT kernel_name)").fetchone()
    assert (n, names) == (300_000, 7)


def test_out_of_memory_is_one_line(monkeypatch):
    monkeypatch.setenv(settings.MEMORY_LIMIT, "64MB")
    exc = duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate data of size 32.0 MiB\nPossible solutions: …")
    line = error_line(exc, "ingest")
    assert line == ("DuckDB ran out of memory under the limit 64MB (Out of Memory Error: failed to allocate data of "
                    "size 32.0 MiB); raise it with --memory-limit or TILAKE_MEMORY_LIMIT (e.g. 2GB); the lake is unchanged")
    assert error_line(ValueError("x"), "ingest") is None      # a real bug keeps its traceback


def test_memory_sizes_and_worker_shares():
    assert settings.size_bytes("232.6 MiB") == int(232.6 * (1 << 20))
    assert settings.size_bytes("2GB") == 2_000_000_000 and settings.size_bytes("lots") is None
    assert _workers_for("512MiB", 2) == 2 and _workers_for("300MB", 4) == 1 and _workers_for("4GiB", 32) == 16
    mib = int(settings.default_memory_limit()[:-3])
    import os
    cores = len(os.sched_getaffinity(0))
    assert 256 <= mib <= min(8192, max(256, 256 * cores))
