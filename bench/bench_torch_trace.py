"""Torch-trace ingest benchmark (issue 14 and issue 21 "Speed and memory"): ``tilake ingest`` of real and
generated Chrome traces, time and peak RSS, side by side with HolisticTraceAnalysis (HTA) 0.5.0.

Prints figures, asserts nothing. Issue 21 mode (``--hta-python``; default source ``real`` when
``../shared/fixtures/real_gpu_traces`` is there):

1. the **largest real trace** there (HTA's V100 DDP ``df_index_resolver.json.gz``);
2. a **generated trace** of about ``--size-mb`` with the real traces' event mix: every real trace's events
   (all categories, flows, metadata) laid one after another on one clock, ids (External id, correlation,
   flow id, Python id) and ``ProfilerStep#N`` made unique per copy, repeated until the size is reached;
   the header keys follow ``traceEvents`` (as the HF/TraceLens exporters write them);
3. per trace: ``tilake ingest --train FILE --allow-missing`` and, in the side venv, HTA's
   ``TraceAnalysis(trace_dir, include_last_profiler_step=True)`` + ``get_gpu_kernel_breakdown(visualize=False)``,
   each a subprocess with its own peak RSS (``os.wait4``), and both kernel counts;
4. the **fixed start-up** of each (the same two commands on the smallest real trace, 6 KB: imports, dbt-free
   CLI start, lake registry / pandas + HTA imports) printed apart, and the ratios with it taken off.

Issue 14 mode (``--source workload``), steps all in one run:

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

    python bench/bench_torch_trace.py --hta-python /work/wt/venv-hta/bin/python [--size-mb 1024] [--workdir DIR] [--keep]
    python bench/bench_torch_trace.py --source workload [--size-mb 1024] [--no-device] [--duckdb] [--keep]
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

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "real_gpu_traces"
HTA_CODE = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
kt, kd = a.get_gpu_kernel_breakdown(visualize=False)
t2 = time.perf_counter()
n = 0
for r in a.t.get_ranks():
    df = a.t.get_trace(r)
    sym = a.t.symbol_table.get_sym_id_map()
    n += int(sum(int((df["cat"] == sym[c]).sum()) for c in ("kernel", "Kernel") if c in sym))
print(json.dumps({"import_s": round(t1 - t0, 2), "analysis_s": round(t2 - t1, 2), "kernels": n}))
"""
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


def real_traces() -> list:
    """The real GPU traces of ``../shared/fixtures/real_gpu_traces`` (one path per distinct file), largest first."""
    seen, out = set(), []
    for p in sorted(REAL.glob("*/*/*.json.gz"), key=lambda q: -q.stat().st_size):
        key = (p.name, p.stat().st_size)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


_ID_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx", "Record function id")


def mix_template(paths: list) -> tuple:
    """(header, events, span µs, id span) of the real traces laid one after another on one clock: each
    trace's ``ts`` shifted to start where the previous ended, its ids offset to stay unique."""
    head, events, t_end, id_off = {}, [], 0.0, 0
    for p in paths:
        doc = json.load(gzip.open(p))
        if not head:
            head = {k: v for k, v in doc.items() if k not in ("traceEvents", "traceName", "metadata")}
        evs = doc["traceEvents"]
        ts = [e["ts"] for e in evs if isinstance(e.get("ts"), (int, float))]
        t0, t1 = min(ts), max(e["ts"] + (e.get("dur") or 0) for e in evs if isinstance(e.get("ts"), (int, float)))
        top = 0
        for e in evs:
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            for k in _ID_ARGS:
                if isinstance(a.get(k), int):
                    top = max(top, a[k])
            if isinstance(e.get("id"), int):
                top = max(top, e["id"])
        for e in evs:
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = round(e["ts"] - t0 + t_end, 3)
            if isinstance(e.get("id"), int):
                e["id"] += id_off
            if isinstance(e.get("args"), dict):
                e["args"] = {k: (v + id_off if k in _ID_ARGS and isinstance(v, int) and v > 0 else v)
                             for k, v in e["args"].items()}
            events.append(e)
        t_end += (t1 - t0) + 1000.0
        id_off += top + 1
    return head, events, t_end, id_off


def write_mix_trace(path: Path, paths: list, size_mb: int) -> dict:
    """Write ``path`` of about ``size_mb`` MiB by repeating :func:`mix_template`; header keys after
    ``traceEvents``. Returns events per category and the copies made."""
    head, events, span, id_span = mix_template(paths)
    head["baseTimeNanoseconds"] = 1_750_000_000_000_000_000
    counts: dict = {}
    target = size_mb * 1024 * 1024
    copy = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"traceEvents": [\n')
        first = True
        while f.tell() < target:
            out = []
            for e in events:
                e = dict(e)
                if copy:
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = round(e["ts"] + copy * span, 3)
                    if isinstance(e.get("id"), int):
                        e["id"] += copy * id_span
                    if isinstance(e.get("args"), dict):
                        e["args"] = {k: (v + copy * id_span if k in _ID_ARGS and isinstance(v, int) and v > 0 else v)
                                     for k, v in e["args"].items()}
                name = e.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{copy * 100000 + int(name.split('#')[1] or 0)}"
                c = e.get("cat") or e.get("ph")
                counts[c] = counts.get(c, 0) + 1
                out.append(json.dumps(e))
            f.write(("" if first else ",\n") + ",\n".join(out))
            first = False
            copy += 1
        f.write("\n], " + json.dumps(head)[1:-1] + ', "traceName": "bench"}\n')
    counts["copies"] = copy
    return counts


def run_tilake(trace: Path, work: Path) -> tuple:
    """(seconds, peak RSS MiB, kernels) of ``tilake ingest --train trace --allow-missing`` into a fresh lake."""
    shutil.rmtree(work / "lake", ignore_errors=True)
    exe = Path(sys.executable).with_name("tilake")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "tilake.cli"]
    dt, rss, out = measure(cmd + ["ingest", "--lake", str(work / "lake"), "--run-id", "bench",
                                  "--train", str(trace), "--allow-missing"])
    import duckdb

    files = list((work / "lake").glob("raw/kernels/run_id=bench/**/*.parquet"))
    kernels = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet({[str(f) for f in files]})").fetchone()[0] if files else 0
    return dt, rss, kernels


def run_hta(trace: Path, work: Path, python: str) -> tuple:
    """(seconds, peak RSS MiB, facts) of HTA's TraceAnalysis + get_gpu_kernel_breakdown on a folder
    holding only ``trace`` (a symlink)."""
    d = work / "hta_in"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / trace.name).symlink_to(trace.resolve())
    dt, rss, out = measure([python, "-c", HTA_CODE, str(d)], check=False)
    try:
        facts = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        facts = {"error": out.strip().splitlines()[-1][:200] if out.strip() else "no output"}
    return dt, rss, facts


def compare(label: str, trace: Path, work: Path, hta: str, start: dict) -> None:
    """Print tilake vs HTA on one trace, with the fixed start-up taken off too."""
    tt, tr, tk = run_tilake(trace, work)
    tc = CPU[0]
    ht, hr, hf = run_hta(trace, work, hta)
    hc = CPU[0]
    size = trace.stat().st_size / 2**20
    print(f"{label}: {trace.name} ({size:.1f} MiB on disk)")
    print(f"  tilake ingest: {tt:.2f} s, peak RSS {tr:.0f} MiB, kernels {tk}")
    print(f"  HTA 0.5.0 TraceAnalysis(include_last_profiler_step=True) + get_gpu_kernel_breakdown: {ht:.2f} s, "
          f"peak RSS {hr:.0f} MiB, {json.dumps(hf)}")
    print(f"  CPU time (user+sys): tilake {tc:.2f} s, HTA {hc:.2f} s = {hc / max(tc, 1e-3):.2f}x")
    print(f"  ratio: HTA/tilake time {ht / tt:.2f}x (target >= 3), tilake/HTA peak RSS {tr / hr:.2f} (target <= 0.33)")
    if start:
        net_t, net_h = max(tt - start["tilake_s"], 1e-3), max(ht - start["hta_s"], 1e-3)
        print(f"  without the fixed start-up (tilake {start['tilake_s']:.2f} s / {start['tilake_rss']:.0f} MiB, "
              f"HTA {start['hta_s']:.2f} s / {start['hta_rss']:.0f} MiB): tilake {net_t:.2f} s vs HTA {net_h:.2f} s "
              f"= {net_h / net_t:.2f}x; RSS above start-up {tr - start['tilake_rss']:.0f} vs {hr - start['hta_rss']:.0f} MiB")


def compile_tilake() -> None:
    """Byte-compile tilake's modules first, as ``pip install`` does (HTA's venv has its ``.pyc``): a checkout
    run with ``PYTHONDONTWRITEBYTECODE=1`` otherwise compiles ~100 modules from source in every process."""
    import compileall
    import re

    import tilake

    root = Path(tilake.__file__).parent
    ok = compileall.compile_dir(str(root), quiet=1, rx=re.compile(r"[/\\](tests|bench|e2e|examples|docs|dbt_project|\.venv[^/\\]*|site-packages)[/\\]"))
    print(f"tilake modules byte-compiled under {root} ({'ok' if ok else 'some failed'})")


def main_real(args, work: Path) -> None:
    """Issue 21: tilake vs HTA on the largest real trace and a generated one with the real event mix."""
    paths = real_traces()
    if not paths:
        raise SystemExit(f"no real traces under {REAL}")
    compile_tilake()
    for small in reversed(paths):  # the smallest real trace HTA reads (HTA 0.5 fails on the Inductor one)
        tt, tr, _ = run_tilake(small, work)
        tc = CPU[0]
        ht, hr, hf = run_hta(small, work, args.hta_python)
        if "error" not in hf:
            break
    start = {"tilake_s": tt, "tilake_rss": tr, "hta_s": ht, "hta_rss": hr}
    print(f"fixed start-up (smallest real trace {small.name}, {small.stat().st_size / 1024:.0f} KiB): "
          f"tilake ingest {tt:.2f} s ({tc:.2f} CPU-s) / {tr:.0f} MiB, HTA {ht:.2f} s ({CPU[0]:.2f} CPU-s) / "
          f"{hr:.0f} MiB ({json.dumps(hf)})")
    compare("largest real trace", paths[0], work, args.hta_python, start)
    trace = args.trace or work / "mix.pt.trace.json"
    if not args.trace:
        t0 = time.perf_counter()
        counts = write_mix_trace(trace, paths, args.size_mb)
        print(f"generated: {trace} {trace.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t0:.1f} s; "
              f"events: {json.dumps(counts, sort_keys=True)}")
    compare("generated trace (real event mix)", trace, work, args.hta_python, start)


def measure(cmd: list, env=None, check: bool = True) -> tuple:
    """(seconds, peak RSS MiB, stdout) of one subprocess, its own rusage via ``os.wait4``."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = p.stdout.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    if p.returncode and check:
        print(out[-2000:])
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}")
    CPU[0] = ru.ru_utime + ru.ru_stime  # CPU seconds of the last command (less load-sensitive than wall time)
    return dt, ru.ru_maxrss / 1024, out


CPU = [0.0]


def main() -> None:
    """Run the benchmark and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--no-device", dest="device", action="store_false")
    ap.add_argument("--duckdb", action="store_true", help="also time DuckDB read_json of the whole file")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--trace", type=Path, help="reuse a trace written by an earlier --keep run")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--source", choices=("real", "workload"),
                    help="template of the generated trace: the real GPU traces (default when present) or the tiny "
                         "Qwen3 workload profiled on this CPU (issue 14)")
    ap.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis 0.5.0 (issue 21 comparison)")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="tilake-bench-trace-"))
    work.mkdir(parents=True, exist_ok=True)
    source = args.source or ("real" if REAL.is_dir() and args.hta_python else "workload")
    if source == "real":
        if not args.hta_python:
            raise SystemExit("--source real compares with HTA: give --hta-python (a venv with HolisticTraceAnalysis 0.5.0)")
        try:
            main_real(args, work)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        return
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
