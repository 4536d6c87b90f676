"""Benchmark (issue 12, speed 2): ``tilake ingest`` + op-type statistics vs ``msprof-analyze cluster -m
compute_op_sum`` on the same capture.

Prints figures, asserts nothing. Steps:

1. a one-rank cluster layout msprof-analyze accepts: ``cluster/node-0_<pid>_<ts>_ascend_pt/`` holding
   ``profiler_info_0.json`` (torch_npu keys, :func:`tilake.synth.layout._profiler_info`) and
   ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db`` with ``--rows`` TASK + COMPUTE_TASK_INFO rows
   (:func:`tilake.synth.write_big_db`, real torch_npu DDL); reused when it exists;
2. msprof-analyze: ``--msprof-analyze EXE``, else installed from PyPI into ``<workdir>/msprof-venv``
   (``python -m venv`` + ``pip install msprof-analyze``); run
   ``msprof-analyze cluster -d cluster -m compute_op_sum -o OUT --force`` (its per-op-type count,
   total/avg/min/max duration in ``cluster_analysis_output/cluster_analysis.db``);
3. tilake: ``python -m tilake.cli ingest --lake L --run-id bench --train DB --allow-missing``, then the
   same statistics (count, sum/avg/min/max ``dur_ns`` per op type and accelerator) over the lake's raw
   kernels, in a fresh process;
4. median of ``--repeats`` runs each (fresh output folders), ``uptime`` load with each; the op-type counts
   of both are compared.

Target: tilake ≥ 5× faster. Usage::

    python bench/bench_msprof.py [--rows 2000000] [--repeats 3] [--workdir /tmp/bench_msprof]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

TILAKE_STATS = r"""
import json, subprocess, sys, time
from tilake.lake.duck import connect
from tilake.lake.store import Lake, raw_source
lake, db = sys.argv[1], sys.argv[2]
t = time.perf_counter()
subprocess.run([sys.executable, "-m", "tilake.cli", "ingest", "--lake", lake, "--run-id", "bench", "--train", db,
                "--allow-missing"], check=True, capture_output=True)
t_ingest = time.perf_counter() - t
con = connect()
rows = con.execute(f"SELECT op_type, accelerator, count(*) AS n, sum(dur_ns), avg(dur_ns), min(dur_ns), max(dur_ns) "
                   f"FROM {raw_source(Lake(lake), 'kernels')} WHERE run_id = 'bench' GROUP BY ALL ORDER BY n DESC").fetchall()
print(json.dumps({"ingest": t_ingest, "total": time.perf_counter() - t, "counts": {r[0]: r[2] for r in rows}}))
"""


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def build(work: Path, rows: int) -> Path:
    from tilake.synth import write_big_db
    from tilake.synth.layout import _profiler_info
    pt = work / "cluster" / "node-0_3217657_20251129080000000_ascend_pt"
    db = pt / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    if db.exists():
        return db
    shutil.rmtree(work / "cluster", ignore_errors=True)
    r = write_big_db(db, rows)
    start = 1_764_403_200_000_000_000
    (pt / "profiler_info_0.json").write_text(json.dumps(_profiler_info(0, "level1", "db", False, False, start,
                                                                       start + 2000 * rows), indent=4))
    print(f"built {db} ({r['bytes'] / 2**20:.0f} MiB) in {r['seconds']:.1f} s")
    return db


def msprof_exe(work: Path, given: str) -> str:
    if given:
        return given
    exe = work / "msprof-venv" / "bin" / "msprof-analyze"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(work / "msprof-venv")], check=True)
        subprocess.run([str(work / "msprof-venv" / "bin" / "pip"), "install", "-q", "msprof-analyze"], check=True)
    return str(exe)


def msprof_counts(out: Path) -> dict:
    dbs = sorted(out.rglob("cluster_analysis.db"))
    if not dbs:
        return {}
    con = sqlite3.connect(dbs[0])
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            if "OpType" in cols and "Count" in cols:
                q = f'SELECT OpType, sum(Count) FROM "{t}" GROUP BY OpType'
                return {"table": t, "counts": dict(con.execute(q).fetchall())}
        return {"tables": tables}
    finally:
        con.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_msprof"))
    ap.add_argument("--msprof-analyze", default="", help="msprof-analyze executable (default: install into a side venv)")
    a = ap.parse_args(argv)
    work = a.workdir
    work.mkdir(parents=True, exist_ok=True)
    db = build(work / f"rows{a.rows}", a.rows)
    cluster = db.parents[2]
    exe = msprof_exe(work, a.msprof_analyze)
    ms, tl, last_ms, last_tl = [], [], {}, {}
    for i in range(a.repeats):
        out = work / f"msprof-out-{i}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        t = time.perf_counter()
        p = subprocess.run([exe, "cluster", "-d", str(cluster), "-m", "compute_op_sum", "-o", str(out), "--force"],
                           capture_output=True, text=True)
        ms.append(time.perf_counter() - t)
        last_ms = msprof_counts(out)
        print(f"msprof-analyze compute_op_sum run {i + 1}: {ms[-1]:.2f} s (rc {p.returncode})  [load {load()}]")
        if p.returncode or not last_ms.get("counts"):
            print("  " + (p.stdout + p.stderr)[-1500:].replace("\n", "\n  "), "\n  output:", last_ms)
        lake = work / f"lake-{i}"
        shutil.rmtree(lake, ignore_errors=True)
        t = time.perf_counter()
        q = subprocess.run([sys.executable, "-c", TILAKE_STATS, str(lake), str(db)], capture_output=True, text=True)
        tl.append(time.perf_counter() - t)
        if q.returncode:
            print(q.stderr[-1500:])
            return 1
        last_tl = json.loads(q.stdout.strip().splitlines()[-1])
        print(f"tilake ingest + op-type statistics run {i + 1}: {tl[-1]:.2f} s (ingest {last_tl['ingest']:.2f} s)"
              f"  [load {load()}]")
        shutil.rmtree(lake, ignore_errors=True)
    m_ms, m_tl = statistics.median(ms), statistics.median(tl)
    print(f"rows {a.rows:,} TASK + COMPUTE_TASK_INFO ({db.stat().st_size / 2**20:.0f} MiB DB); median of {a.repeats}: "
          f"msprof-analyze {m_ms:.2f} s, tilake {m_tl:.2f} s → tilake {m_ms / m_tl:.2f}× faster (target ≥ 5×)")
    mc = last_ms.get("counts") or {}
    same = mc and {k: int(v) for k, v in mc.items()} == {k: int(v) for k, v in last_tl["counts"].items()}
    print(f"op-type counts: tilake {last_tl['counts']}; msprof-analyze {mc or last_ms} → "
          f"{'identical' if same else 'DIFFERENT or not available'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
