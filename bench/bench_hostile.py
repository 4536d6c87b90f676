"""Hostile sizes (issue 33 "Bounded work"): time to parse launch scripts of many assignments and to ingest a
Chrome trace padded with whitespace between two events; the figures show linear growth.

Prints figures, asserts nothing. Each size runs in a fresh subprocess (time and peak RSS from ``os.wait4``):

1. ``parse_script`` of a script of ``N`` assignments ``V<i>=value_<i>`` and one verl launch line
   (``--assignments``, default 10,000 40,000 200,000);
2. ``tilake ingest --train FILE --allow-missing`` of the bundled CPU trace (``tests/data/torch_cpu_trace``) with
   ``M`` MiB of newlines between two events in the middle, written as plain JSON (``--padding-mib``, default
   64 256 1024; the file sits in ``--workdir``, removed afterwards unless ``--keep``).

Usage::

    python bench/bench_hostile.py
    python bench/bench_hostile.py --assignments 200000 --padding-mib 1024 --workdir /tmp/bh
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "torch_cpu_trace" / "prof_rank-0.json.gz"


def _run(argv) -> tuple:
    """``(wall s, peak RSS MiB, exit status)`` of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.stderr.close()
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def bench_scripts(sizes, work: Path) -> None:
    print("launch script parse (parse_script), assignments -> wall s, peak RSS MiB")
    prev = None
    for n in sizes:
        p = work / f"assign_{n}.sh"
        with open(p, "w") as f:
            f.write("#!/bin/bash\n")
            for i in range(n):
                f.write(f"V{i}=value_{i}\n")
            f.write("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/m/Qwen2-7B a.b=$V0\n")
        code = ("import sys; from pathlib import Path; from tilake.ingest.scan.script import parse_script; "
                "parse_script(Path(sys.argv[1]), env={})")
        wall, rss, rc = _run([sys.executable, "-c", code, str(p)])
        ratio = f"  ({wall / prev[1]:.1f}x time for {n / prev[0]:.1f}x assignments)" if prev else ""
        print(f"  {n:>9,}: {wall:7.2f} s  {rss:7.0f} MiB  exit {rc}{ratio}")
        prev = (n, wall)
        p.unlink()


def bench_padding(sizes, work: Path) -> None:
    print("padded trace ingest (tilake ingest), MiB of whitespace -> wall s, peak RSS MiB")
    body = json.dumps(json.loads(gzip.open(TRACE).read().decode("utf-8")))
    cut = body.index('}, {"', len(body) // 2)
    prev = None
    for mib in sizes:
        p = work / f"padded_{mib}.json"
        with open(p, "wb") as f:
            f.write(body[:cut + 1].encode() + b",")
            block = b"\n" * (1 << 20)
            for _ in range(mib):
                f.write(block)
            f.write(body[cut + 2:].encode())
        lake = work / f"lake_{mib}"
        wall, rss, rc = _run([sys.executable, "-m", "tilake.cli", "ingest", "--train", str(p), "--run-id", "b",
                              "--lake", str(lake), "--allow-missing"])
        ratio = f"  ({wall / prev[1]:.1f}x time for {mib / prev[0]:.1f}x padding)" if prev else ""
        print(f"  {mib:>6} MiB: {wall:7.2f} s  {rss:7.0f} MiB  exit {rc}{ratio}")
        prev = (mib, wall)
        p.unlink()
        shutil.rmtree(lake, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assignments", type=int, nargs="*", default=[10_000, 40_000, 200_000])
    ap.add_argument("--padding-mib", type=int, nargs="*", default=[64, 256, 1024])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="tilake-bench-hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if a.assignments:
            bench_scripts(a.assignments, work)
        if a.padding_mib:
            bench_padding(a.padding_mib, work)
    finally:
        if not a.keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
