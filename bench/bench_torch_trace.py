"""Torch-trace ingest benchmark (issue 14, "Benchmark"): ingest of a ~1 GB Chrome trace, time and peak
RSS, against loading the same file with ``json.load``.

Prints figures, asserts nothing. Steps, all in one run:

1. make a *real* template trace on this machine: one training step of the tiny Qwen3 workload
   (:func:`tilake.workloads.rl_step.run_rl_step`, torch.profiler with shapes and stacks);
2. write ``bench.pt.trace.json`` of about ``--size-mb`` by repeating the template's events with
   shifted ``ts`` / ``External id`` / ``Python id`` (exact event schema of the template). With
   ``--device`` (default) every compute ``cpu_op`` of a copy also gets a ``cuda_runtime`` launch, a
   ``kernel`` and an ``ac2g`` flow pair in Kineto's CUDA schema, so the device-kernel path is measured;
3. ``tilake ingest --lake L --run-id bench --train FILE --allow-missing`` as a subprocess, then
   ``python -c json.load(FILE)`` as a subprocess, optionally (``--duckdb``) DuckDB's ``read_json`` of the
   same file. Peak RSS of each is its own ``os.wait4`` rusage ``ru_maxrss`` (KiB on Linux).

Usage::

    python bench/bench_torch_trace.py [--size-mb 1024] [--no-device] [--duckdb] [--keep] [--workdir DIR]
    python bench/bench_torch_trace.py --trace DIR/bench.pt.trace.json --workdir DIR --keep   # reuse
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

COMPUTE = ("aten::mm", "aten::bmm", "aten::_softmax", "aten::mul", "aten::add", "aten::silu", "aten::copy_",
           "aten::cat", "aten::rsqrt", "aten::pow", "aten::_log_softmax", "aten::index_select")
KERNEL = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def template(workdir: Path) -> dict:
    """A real trace made here: the training step of the tiny Qwen3 workload (CPU, shapes + stacks)."""
    from tilake.workloads.rl_step import run_rl_step

    traces = run_rl_step(workdir / "template", device="cpu")
    return json.load(gzip.open(traces.train))


def _shift(e: dict, dt: float, dext: int, dpy: int, dcorr: int) -> dict:
    e = dict(e)
    if "ts" in e:
        e["ts"] = round(e["ts"] + dt, 3)
    if "id" in e and isinstance(e["id"], int):
        e["id"] += dcorr
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        if isinstance(a.get("External id"), int) and a["External id"]:
            a["External id"] += dext
        for k in ("Python id", "Python parent id"):
            if isinstance(a.get(k), int):
                a[k] += dpy
        e["args"] = a
    return e


def write_big_trace(path: Path, doc: dict, size_mb: int, device: bool) -> dict:
    """Write ``path`` of about ``size_mb`` MiB by repeating ``doc``'s events; returns events per cat."""
    events = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    xs = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - t0 + 1.0
    max_ext = max((e.get("args", {}).get("External id") or 0) for e in events) + 1
    max_py = max((e.get("args", {}).get("Python id") or 0) for e in events) + 1
    head = {k: v for k, v in doc.items() if k not in ("traceEvents", "traceName")}
    if device:
        head["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
                                     "computeMajor": 9, "computeMinor": 0, "numSms": 132}]
    counts: dict = {}
    target = size_mb * 1024 * 1024
    corr = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        f.write(",\n".join(json.dumps(m) for m in meta))
        copy = 0
        while f.tell() < target:
            chunk = []
            for e in events:
                s = _shift(e, copy * span, copy * max_ext, copy * max_py, copy * 1_000_000)
                chunk.append(s)
                if device and s.get("cat") == "cpu_op" and s["name"] in COMPUTE:
                    corr += 1
                    ext = s["args"].get("External id")
                    ts = s["ts"]
                    chunk.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": s["pid"],
                                  "tid": s["tid"], "ts": ts, "dur": 3.1,
                                  "args": {"External id": ext, "cbid": 211, "correlation": corr}})
                    chunk.append({"ph": "s", "id": corr, "pid": s["pid"], "tid": s["tid"], "ts": ts,
                                  "cat": "ac2g", "name": "ac2g"})
                    chunk.append({"ph": "X", "cat": "kernel", "name": KERNEL, "pid": 0, "tid": 7, "ts": ts + 4.0,
                                  "dur": 9.5, "args": {"External id": ext, "device": 0, "context": 1, "stream": 7,
                                                       "correlation": corr, "registers per thread": 128,
                                                       "shared memory": 0, "grid": [1, 8, 1], "block": [128, 1, 1]}})
                    chunk.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": ts + 4.0, "cat": "ac2g",
                                  "name": "ac2g", "bp": "e"})
            for e in chunk:
                c = e.get("cat") or e.get("ph")
                counts[c] = counts.get(c, 0) + 1
            f.write(",\n" + ",\n".join(json.dumps(e) for e in chunk))
            copy += 1
        f.write('\n], "traceName": "bench"}\n')
    counts["copies"] = copy
    return counts


def measure(cmd: list, env=None) -> tuple:
    """(seconds, peak RSS MiB, stdout) of one subprocess, its own rusage via ``os.wait4``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = p.stdout.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    if p.returncode:
        print(out[-2000:])
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}")
    return dt, ru.ru_maxrss / 1024, out


def main() -> None:
    """Run the benchmark and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--no-device", dest="device", action="store_false")
    ap.add_argument("--duckdb", action="store_true", help="also time DuckDB read_json of the whole file")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--trace", type=Path, help="reuse a trace written by an earlier --keep run")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="tilake-bench-trace-"))
    work.mkdir(parents=True, exist_ok=True)
    trace = args.trace or work / "bench.pt.trace.json"
    try:
        if not args.trace:
            t0 = time.perf_counter()
            counts = write_big_trace(trace, template(work), args.size_mb, args.device)
            print(f"trace: {trace} {trace.stat().st_size / 2**20:.0f} MiB written in "
                  f"{time.perf_counter() - t0:.1f} s; events: {json.dumps(counts, sort_keys=True)}")
        shutil.rmtree(work / "lake", ignore_errors=True)
        exe = Path(sys.executable).with_name("tilake")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "tilake.cli"]
        dt, rss, out = measure(cmd + ["ingest", "--lake", str(work / "lake"), "--run-id", "bench",
                                      "--train", str(trace), "--allow-missing"])
        print(f"tilake ingest (ijson stream → CSV → DuckDB → Parquet): {dt:.1f} s, peak RSS {rss:.0f} MiB")
        print("  " + out.strip().splitlines()[-1])
        dt, rss, out = measure([sys.executable, "-c", "import json,sys; d=json.load(open(sys.argv[1])); "
                                "print(len(d['traceEvents']), 'events')", str(trace)])
        print(f"json.load (whole document in memory, no tables written): {dt:.1f} s, peak RSS {rss:.0f} MiB "
              f"({out.strip()})")
        if args.duckdb:
            code = ("import duckdb,sys; c=duckdb.connect(); c.execute(\"SET memory_limit='8GB'\"); "
                    "print(c.execute(\"SELECT len(traceEvents) FROM read_json(?, maximum_object_size=2000000000, "
                    "records=true)\", [sys.argv[1]]).fetchone()[0], 'events')")
            try:
                dt, rss, out = measure([sys.executable, "-c", code, str(trace)])
                print(f"duckdb read_json (one top-level object): {dt:.1f} s, peak RSS {rss:.0f} MiB ({out.strip()})")
            except SystemExit as exc:
                print(f"duckdb read_json failed: {exc}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
