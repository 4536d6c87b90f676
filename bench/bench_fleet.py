"""Fleet benchmark (issue 24 item 3): N synthetic ranks ingested single-threaded, threaded and on local Ray.

Prints figures, asserts nothing. Steps:

1. **Input**: one DB of the real torch_npu schema with ``--kernels`` TASK + COMPUTE_TASK_INFO rows
   (:func:`tilake.synth.write_big_db`, DDL copied from the real fixture DBs), copied to ``--ranks``
   training ranks in verl's layout ``e2e/node-<r // 8>_<pid>_<ts>_ascend_pt/ASCEND_PROFILER_OUTPUT/
   ascend_pytorch_profiler_<r>.db`` (8 ranks per host name, as 8 NPUs per node). Reused when
   ``--workdir`` already holds it.
2. **Ingest**, each mode in a fresh process into a fresh lake (``ingest_profile``, ``allow_missing``:
   the DBs have no inference side): ``single`` (``workers=1``), ``threaded`` (``workers=None``: one per
   core, each 1/n of the DuckDB memory limit) and ``ray`` (``ray_fleet("local")``: a local Ray with this
   machine's cores, one task per capture; Ray start and the per-node probe are timed apart). Figures:
   wall, kernels/s, input MiB/s, peak RSS of the process (``VmHWM``) and, on Ray, of each worker process
   (``VmHWM`` read at the end of each of its tasks), the driver's commit (``os.rename`` of the staged
   folders) and completeness check (Parquet footers).
3. **The lake at that size**: Parquet files and mean file size per run; the same question asked through
   DuckDB over the Hive lake with and without partition columns (``rank = 5``, ``side``), with the files
   DuckDB scanned out of those matched (its JSON profile, "Scanning Files").

Usage::

    python bench/bench_fleet.py [--ranks 64] [--kernels 200000] [--workdir /tmp/bench_fleet] [--modes single,threaded,ray]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
from pathlib import Path
from tilake import settings
from tilake.ingest.profiler import load
from tilake.lake.store import Lake
from tilake.pipeline.profile import collect_captures, find_captures, reduce_captures
root, lake_dir, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
lake = Lake(lake_dir)
timing = {"commit": 0.0, "check": 0.0}
orig_commit = Lake._commit
def commit(self, w):
    t = time.perf_counter(); orig_commit(self, w); timing["commit"] += time.perf_counter() - t
Lake._commit = commit
out = {"mode": mode, "memory_limit": settings.memory_limit(), "cores": settings.cores()}
t0 = time.perf_counter()
if mode == "ray":
    from tilake.ingest.profiler import fleet as fl
    orig_check = fl.RayFleet.check_complete
    def check(self, w, caps):
        t = time.perf_counter(); orig_check(self, w, caps); timing["check"] += time.perf_counter() - t
    fl.RayFleet.check_complete = check
    with fl.ray_fleet("local", num_cpus=settings.cores()) as f:
        out["ray_start"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        caps = reduce_captures(f.probe(lambda present_only: find_captures(root, present_only=present_only)))
        out["probe"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        res = load.ingest_profile(lake, "fleet", caps, allow_missing=True, progress=False, fleet=f)
        out["ingest"] = time.perf_counter() - t2
        per_pid = {}
        for s in f.stats:
            per_pid[s["pid"]] = max(per_pid.get(s["pid"], 0), s["peak_rss_kib"])
        out.update(worker_peak_kib=sorted(per_pid.values()), task_memory=f.stats[0]["memory"],
                   task_threads=f.stats[0]["threads"], task_seconds=[s["seconds"] for s in f.stats],
                   nodes={p.hostname: p.tasks for p in f.nodes.values()})
else:
    caps = collect_captures(root)
    res = load.ingest_profile(lake, "fleet", caps, allow_missing=True, progress=False,
                              workers=1 if mode == "single" else None)
    out["ingest"] = time.perf_counter() - t0
    n = 1 if mode == "single" else load._workers_for(settings.memory_limit(), settings.cores())
    out.update(workers=n, task_memory=load._share_of(settings.memory_limit(), n) if n > 1 else settings.memory_limit())
out["wall"] = time.perf_counter() - t0
out.update(captures=len(caps), kernels=res.kernels, commit=timing["commit"], check=timing["check"],
           hwm_kib=next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))
print(json.dumps(out))
"""


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def make_input(root: Path, ranks: int, kernels: int) -> None:
    """``ranks`` copies of one ``kernels``-row DB in verl's e2e layout (see the module docstring)."""
    from tilake.synth import write_big_db

    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    template = tmp / "template.db"
    t = time.perf_counter()
    write_big_db(template, kernels)
    for r in range(ranks):
        pt = tmp / "po" / "e2e" / f"node-{r // 8}_{3217657 + 97 * r}_{20251129080000000 + r}_ascend_pt"
        (pt / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        shutil.copyfile(template, pt / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{r}.db")
    template.unlink()
    os.rename(tmp, root)
    print(f"generated {ranks} rank DBs of {kernels:,} kernels in {time.perf_counter() - t:.1f} s", flush=True)


def child(po: Path, lake: Path, mode: str) -> dict:
    shutil.rmtree(lake, ignore_errors=True)
    env = dict(os.environ, TMPDIR=str(lake.parent / "tmp"))   # a private spill folder (bench/README "Findings")
    (lake.parent / "tmp").mkdir(exist_ok=True)
    p = subprocess.run([sys.executable, "-c", CHILD, str(po), str(lake), mode], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{mode} ingest failed: {(p.stdout + p.stderr).strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def hive_query(lake, table: str, select: str, where: str, group: str = "") -> tuple:
    """``SELECT select FROM <table as a Hive dataset> WHERE where [GROUP BY group]`` in a fresh DuckDB
    connection: ``(milliseconds, rows, "files scanned/files matched by the glob")`` (DuckDB's JSON
    profile, ``Scanning Files`` of the READ_PARQUET scan)."""
    from tilake.lake import schema
    from tilake.lake.duck import connect, sql_str

    src = (f"read_parquet({sql_str(lake.table_glob(table))}, hive_partitioning=true, "
           f"hive_types={schema.hive_types_sql(table)})")
    prof = Path(tempfile.mkdtemp(prefix="bench-prof-")) / "profile.json"
    con = connect()
    try:
        con.execute("PRAGMA enable_profiling='json'")
        con.execute(f"PRAGMA profiling_output={sql_str(prof)}")
        t = time.perf_counter()
        rows = con.execute(f"SELECT {select} FROM {src} WHERE {where}" + (f" GROUP BY {group}" if group else "")
                           ).fetchall()
        ms = (time.perf_counter() - t) * 1000
        con.execute("PRAGMA disable_profiling")
    finally:
        con.close()
    scanned = _scanning(json.loads(prof.read_text())) if prof.exists() else "?"
    shutil.rmtree(prof.parent, ignore_errors=True)
    return ms, rows, scanned


def hive_figures(lake_root: Path, ranks: int) -> None:
    """Files of the run, and the same count through DuckDB with and without the partition columns."""
    from tilake.lake import schema
    from tilake.lake.store import Lake

    lake = Lake(lake_root)
    files = [p for t in schema.PROFILE_TABLES for p in (lake.raw / t / "run_id=fleet").rglob("*.parquet")]
    size = sum(p.stat().st_size for p in files)
    print(f"  run 'fleet': {len(files)} Parquet files in {len(schema.PROFILE_TABLES)} tables, "
          f"{size / 2**20:.1f} MiB, mean {size / max(1, len(files)) / 2**10:.0f} KiB a file")
    r = min(5, ranks - 1)
    for label, where in (("all kernels of the run", "run_id = 'fleet'"),
                         (f"one rank (side, rank = {r})", f"run_id = 'fleet' AND side = 'train' AND rank = {r}"),
                         ("ranks 0-7 (one host)", "run_id = 'fleet' AND rank < 8")):
        ms, rows, scanned = hive_query(lake, "kernels", "count(*), count(DISTINCT op_type), sum(dur_ns)", where)
        print(f"  DuckDB over the Hive lake, {label:30s} {ms:7.1f} ms  {rows[0][0]:>11,} kernels  "
              f"files scanned {scanned}")


def _scanning(node: dict) -> str:
    info = node.get("extra_info") or {}
    if "Scanning Files" in info:
        return info["Scanning Files"]
    for c in node.get("children", []):
        found = _scanning(c)
        if found:
            return found
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=200_000, help="kernels per rank (default 200,000)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--modes", default="single,threaded,ray")
    ap.add_argument("--keep", action="store_true", help="keep the lakes (the input is kept with --workdir)")
    a = ap.parse_args(argv)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    root = work / f"in_r{a.ranks}_k{a.kernels}"
    if not root.exists():
        make_input(root, a.ranks, a.kernels)
    po = root / "po"
    dbs = sorted(po.rglob("*.db"))
    size = sum(p.stat().st_size for p in dbs)
    print(f"input: {len(dbs)} rank DBs x {a.kernels:,} kernels = {len(dbs) * a.kernels:,} kernels, "
          f"{size / 2**20:,.0f} MiB; cores {len(os.sched_getaffinity(0))}  [load {load()}]", flush=True)
    results = {}
    for mode in a.modes.split(","):
        r = child(po, work / f"lake_{mode}", mode)
        results[mode] = r
        extra = ""
        if mode == "ray":
            extra = (f"; Ray start {r['ray_start']:.1f} s, probe {r['probe']:.2f} s, ingest {r['ingest']:.1f} s; "
                     f"{len(r['worker_peak_kib'])} worker processes, peak RSS each "
                     f"{min(r['worker_peak_kib']) / 1024:.0f}-{max(r['worker_peak_kib']) / 1024:.0f} MiB; "
                     f"task {r['task_memory']} x {r['task_threads']} thread(s); tasks {min(r['task_seconds']):.1f}-"
                     f"{max(r['task_seconds']):.1f} s each, sum {sum(r['task_seconds']):.0f} s; completeness check "
                     f"{r['check']:.2f} s")
        else:
            extra = f"; {r['workers']} worker(s) x {r['task_memory']}"
        print(f"{mode:9s} {r['wall']:7.1f} s  {r['kernels'] / r['ingest']:>10,.0f} kernels/s  "
              f"{size / 2**20 / r['ingest']:6.1f} MiB/s  peak RSS {r['hwm_kib'] / 1024:.0f} MiB"
              f"{' (driver)' if mode == 'ray' else ''}  commit {r['commit'] * 1000:.0f} ms{extra}  [load {load()}]",
              flush=True)
    ref = results.get("single")
    if ref:
        for mode, r in results.items():
            print(f"  {mode}: {ref['ingest'] / r['ingest']:.2f}x the single-threaded ingest rate")
    last = next((work / f"lake_{m}" for m in ("ray", "threaded", "single") if m in results), None)
    if last is not None:
        print("the lake at this size:")
        hive_figures(last, a.ranks)
    if not a.keep:
        for mode in results:
            shutil.rmtree(work / f"lake_{mode}", ignore_errors=True)
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
