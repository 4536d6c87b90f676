"""Benchmark (issue 12, speed 1): rank DBs of one run ingested in parallel vs one at a time.

Prints figures, asserts nothing. Steps:

1. ``tilake.synth.make_profiler_output`` writes a verl ``profiler_output/`` with ``--ranks`` training ranks
   and as many rollout replicas (each replica's DB is ``ascend_pytorch_profiler_0.db``, like the real
   vllm-ascend workers), reused when ``--workdir`` already holds one of the same size;
2. every capture alone: ``ingest_profile`` of that one capture into a fresh lake, in a fresh process
   (wall time of the call, peak RSS from ``VmHWM``) → the sum of single-rank ingests;
3. all captures at once: ``ingest_profile(..., workers=None)`` (one worker per core) in a fresh process;
   also ``workers=1`` (the sequential loop) for reference.

Target: parallel wall ≤ 0.6 × the sum of single-rank ingests; peak RSS within the DuckDB memory limit
(``TILAKE_MEMORY_LIMIT``; each worker gets 1/n of it). ``uptime`` load is printed with each figure.

Usage::

    python bench/bench_parallel.py [--ranks 8] [--layers 28] [--workdir /tmp/bench_par]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, shutil, sys, time, tempfile
from pathlib import Path
from tilake.ingest.profiler.discover import assign_worker_ranks, dedupe, discover
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake import settings
root, which, workers = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
caps = sorted(assign_worker_ranks(dedupe(discover(root))), key=lambda c: (c.side != "train", c.rank, str(c.path)))
if which != "all":
    caps = [caps[int(which)]]
lake = Lake(tempfile.mkdtemp(prefix="bench-par-lake-"))
t = time.perf_counter()
res = ingest_profile(lake, "bench", caps, allow_missing=True, progress=False,
                     workers=None if workers == "auto" else int(workers))
wall = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
shutil.rmtree(lake.root, ignore_errors=True)
print(json.dumps({"wall": wall, "captures": len(caps), "kernels": res.kernels, "hwm_kib": hwm,
                  "memory_limit": settings.memory_limit()}))
"""


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def child(root: Path, which: str, workers: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), which, workers], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8, help="training ranks and rollout replicas (default 8 each)")
    ap.add_argument("--layers", type=int, default=28, help="transformer layers of the synthetic job (28 = Qwen3-0.6B)")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args(argv)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="bench-par-"))
    root = work / f"po_r{a.ranks}_l{a.layers}"
    if not root.exists():
        from tilake.synth import JobConfig, make_profiler_output
        t = time.perf_counter()
        make_profiler_output(root, train_ranks=a.ranks, infer_replicas=a.ranks, job=JobConfig(layers=a.layers))
        print(f"generated {root} in {time.perf_counter() - t:.1f} s")
    dbs = sorted(root.rglob("*.db"))
    size = sum(p.stat().st_size for p in dbs)
    print(f"input: {len(dbs)} DBs ({a.ranks} train ranks + {a.ranks} rollout replicas), {size / 2**20:.0f} MiB; "
          f"cores {len(os.sched_getaffinity(0))}")
    singles = []
    for i in range(len(dbs)):
        r = child(root, str(i), "1")
        singles.append(r)
    s_wall = sum(r["wall"] for r in singles)
    print(f"single-capture ingests: sum {s_wall:.2f} s (each {min(r['wall'] for r in singles):.2f}–"
          f"{max(r['wall'] for r in singles):.2f} s), peak RSS max {max(r['hwm_kib'] for r in singles) / 1024:.0f} MiB"
          f"  [load {load()}]")
    seq = child(root, "all", "1")
    print(f"all captures, workers=1 (sequential): {seq['wall']:.2f} s, peak RSS {seq['hwm_kib'] / 1024:.0f} MiB, "
          f"{seq['kernels']} kernels  [load {load()}]")
    par = child(root, "all", "auto")
    print(f"all captures, workers=auto (one per core): {par['wall']:.2f} s, peak RSS {par['hwm_kib'] / 1024:.0f} MiB, "
          f"{par['kernels']} kernels, DuckDB memory limit {par['memory_limit']} (split between workers)  [load {load()}]")
    print(f"parallel / sum of singles = {par['wall'] / s_wall:.2f}× (target ≤ 0.6×); "
          f"parallel / sequential = {par['wall'] / seq['wall']:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
