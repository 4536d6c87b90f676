"""Ingest benchmark (issue 2, "Benchmark"): tilake ingest of a DB with N TASK + N COMPUTE_TASK_INFO rows.

Prints figures, asserts nothing. Steps, all in one run:

1. build ``bench.db`` with the real torch_npu schema (:func:`tilake.synth.write_big_db`:
   sqlite3 creates the tables from the embedded real DDL, DuckDB's SQLite scanner bulk-inserts
   ``range(N)``; ``--compare-build`` also times the ``sqlite3.executemany`` path on the same N);
2. baseline: a bare DuckDB ``COPY (SELECT * FROM sqlite_scan(db, 'TASK')) TO … (FORMAT parquet)`` and the
   same for COMPUTE_TASK_INFO, in this process;
3. ``tilake ingest --lake L --run-id bench --train bench.db --allow-missing`` as a subprocess; its peak
   RSS is ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (KiB on Linux; the ingest is the only child
   that is waited for).

Targets: ingest time ≤ 1.0 × baseline (issue 12; issue 2 asked ≤ 1.5×), peak RSS ≤ 1 GB.

Usage::

    python bench/bench_ingest.py [--rows 10000000] [--keep] [--workdir DIR] [--compare-build]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tilake.lake.duck import connect, sql_str
from tilake.synth import write_big_db


def tilake_cmd() -> list:
    """The ``tilake`` console script next to this interpreter, else ``python -m tilake.cli``."""
    exe = Path(sys.executable).with_name("tilake")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tilake.cli"]


def ingest_available() -> bool:
    """True when ``tilake ingest --help`` works and knows ``--train``."""
    try:
        p = subprocess.run(tilake_cmd() + ["ingest", "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "--train" in p.stdout


def baseline_copy(db: Path, out: Path) -> float:
    """Seconds for a bare DuckDB COPY of TASK and COMPUTE_TASK_INFO from the SQLite file to Parquet."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    con = connect(sqlite=True)
    try:
        for table in ("TASK", "COMPUTE_TASK_INFO"):
            con.execute(f"COPY (SELECT * FROM sqlite_scan({sql_str(db)}, '{table}')) "
                        f"TO {sql_str(out / (table.lower() + '.parquet'))} (FORMAT parquet)")
    finally:
        con.close()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="TASK and COMPUTE_TASK_INFO rows (default 10M)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (DB, parquet, lake)")
    ap.add_argument("--workdir", type=Path, default=None, help="work folder (default: a new temp folder)")
    ap.add_argument("--db", type=Path, default=None,
                    help="reuse an existing benchmark DB (from --keep) instead of building one")
    ap.add_argument("--compare-build", action="store_true",
                    help="also build the DB with sqlite3.executemany and print both build times")
    a = ap.parse_args(argv)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="tilake-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = a.db or work / "bench.db"
    try:
        for p in ([] if a.db else [db]) + [work / "baseline", work / "lake", work / "bench_sqlite.db",
                                                   work / "tmp"]:
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        if a.db:
            con = sqlite3.connect(f"file:{a.db}?mode=ro&immutable=1", uri=True)
            a.rows = con.execute("SELECT COUNT(*) FROM COMPUTE_TASK_INFO").fetchone()[0]
            con.close()
        print(f"rows: {a.rows:,} TASK + {a.rows:,} COMPUTE_TASK_INFO  (work folder {work})", flush=True)
        if not a.db:
            b = write_big_db(db, a.rows, engine="duckdb")
            print(f"build (duckdb INSERT … FROM range(N)):  {b['seconds']:.1f} s  "
                  f"({b['bytes'] / 2**20:,.0f} MiB)", flush=True)
        if a.compare_build:
            b2 = write_big_db(work / "bench_sqlite.db", a.rows, engine="sqlite")
            print(f"build (sqlite3 executemany batches):    {b2['seconds']:.1f} s", flush=True)
            (work / "bench_sqlite.db").unlink()
        base = baseline_copy(db, work / "baseline")
        print(f"baseline DuckDB COPY sqlite_scan → parquet (TASK + COMPUTE_TASK_INFO): {base:.2f} s", flush=True)
        if not ingest_available():
            print("ingest command not available yet (tilake ingest --help failed); skipping the ingest timing",
                  flush=True)
            return 0
        cmd = tilake_cmd() + ["ingest", "--lake", str(work / "lake"), "--run-id", "bench", "--train", str(db),
                              "--allow-missing"]
        # private temp folder: DuckDB names its spill files duckdb_temp_storage_*.tmp, and two processes
        # spilling into the same folder (e.g. a test run beside this benchmark) corrupt each other's files
        tmp = work / "tmp"
        tmp.mkdir(exist_ok=True)
        env = dict(os.environ, TMPDIR=str(tmp))
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        secs = time.perf_counter() - t0
        rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        tail = (p.stdout + p.stderr).strip().splitlines()[-2:] or ["no output"]
        if p.returncode != 0:
            print(f"ingest failed (exit {p.returncode}{', killed by a signal' if p.returncode < 0 else ''}) "
                  f"after {secs:.1f} s, peak RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:,.0f} "
                  "MiB: " + " | ".join(tail), flush=True)
            return 1
        m = re.search(r"(\d+) kernels", p.stdout)
        kernels = int(m.group(1)) if m else None
        ratio = secs / base if base else float("nan")
        print(f"tilake ingest (subprocess):              {secs:.2f} s  kernels ingested: {kernels:,}"
              if kernels is not None else f"tilake ingest (subprocess): {secs:.2f} s")
        print(f"ratio ingest / baseline:                 {ratio:.2f}×  (target ≤ 1.0×: "
              f"{'met' if ratio <= 1.0 else 'NOT met'})")
        print(f"peak RSS of the ingest subprocess:       {rss_kib / 1024:,.0f} MiB  (target ≤ 1 GB: "
              f"{'met' if rss_kib * 1024 <= 10**9 else 'NOT met'})")
        if kernels is not None and kernels != a.rows:
            print(f"warning: ingest reported {kernels:,} kernels for {a.rows:,} rows", flush=True)
        return 0
    finally:
        if not a.keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
