"""What the one-step commit costs (issue 33): ingest and re-ingest wall time with this checkout vs another one
(``--old``, e.g. a worktree of main), alternating runs, median; and the record check a build runs first.

    python bench/bench_commit.py --old /work/main            # 5 pairs of ingest + re-ingest, 1 000-run check
    python bench/bench_commit.py --repeats 3 --records 5000

Each ingest is ``python -m tilake.cli ingest`` in a subprocess on a generated capture (``--layers`` layers, 2
training ranks, 1 rollout replica); the old checkout is imported as ``tilake`` through a temporary folder
holding one link named ``tilake`` (its package dir is the checkout root). The record check is
:func:`tilake.lake.check.refuse_missing` on a lake of ``--records`` generated run records of 12 files each
(every file present). Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _ingest(pythonpath, po: Path, lake: Path, run_id: str) -> float:
    env = dict(os.environ, TILAKE_LOCK_WAIT="0")
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tilake.cli", "ingest", str(po), "--run-id", run_id, "--lake", str(lake)],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def _records(root: Path, n: int) -> float:
    from tilake.lake import commit as C
    from tilake.lake.check import refuse_missing
    from tilake.lake.store import Lake

    lake = Lake(root)
    for i in range(n):
        files = {}
        for t in ("kernels", "host_ops", "captures"):
            for k in range(4):
                rel = f"raw/{t}/run_id=b{i}/side=train/rank={k}/part-00001.parquet"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(b"x")
                files.setdefault(t, {})[rel] = 1
        C.write_record(C.manifest_path(root, f"b{i}"), f"b{i}", files)
    t = time.perf_counter()
    refuse_missing(lake)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, help="another tilake checkout to compare with (its root folder)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--records", type=int, default=1000)
    a = ap.parse_args()
    from tilake.synth import JobConfig, make_profiler_output

    work = Path(tempfile.mkdtemp(prefix="bench-commit-"))
    try:
        po = work / "po"
        make_profiler_output(po, job=JobConfig(layers=a.layers), train_ranks=2)
        old_path = None
        if a.old:
            old_path = work / "oldpkg"
            old_path.mkdir()
            (old_path / "tilake").symlink_to(a.old.resolve(), target_is_directory=True)
        sides = [("this", None)] + ([("old", old_path)] if old_path else [])
        times = {name: {"ingest": [], "re-ingest": []} for name, _p in sides}
        for k in range(a.repeats):
            for name, path in (sides if k % 2 == 0 else sides[::-1]):
                lake = work / f"lake-{name}-{k}"
                times[name]["ingest"].append(_ingest(path, po, lake, "r1"))
                times[name]["re-ingest"].append(_ingest(path, po, lake, "r1"))
                shutil.rmtree(lake)
        for name, _p in sides:
            for what, xs in times[name].items():
                print(f"{name:5s} {what:10s} median {statistics.median(xs):.3f} s  (min {min(xs):.3f}, n={len(xs)})")
        if old_path:
            for what in ("ingest", "re-ingest"):
                r = statistics.median(times["this"][what]) / statistics.median(times["old"][what])
                print(f"ratio {what:10s} this/old = {r:.3f}")
        rec = _records(work / "records", a.records)
        print(f"record check before a build, {a.records} runs x 12 files: {rec * 1000:.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
