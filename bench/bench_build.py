"""Build-time benchmark (issue 35): CPU seconds of `tilake build`, `tilake runs rm` and `tilake run`.

Prints figures, asserts nothing. Every figure is **CPU seconds** (user + sys of the command's process
and its children, ``resource.getrusage(RUSAGE_CHILDREN)`` around one subprocess), so it holds on a
loaded machine better than wall time. Each command runs as ``python bench/bench_build.py --child
<tilake args>`` (the CLI in-process, as ``tilake`` runs it) which also prints where its seconds went:

- ``start``: interpreter, tilake and the lazy imports up to the build (before dbt is imported);
- ``dbt import``: ``import dbt.cli.main`` (mashumaro/pydantic classes: a fixed cost of every dbt call);
- ``dbt parse``: dbt start-up to its first node (profile, adapter, the partial-parse manifest load);
- ``dbt nodes``: the first node start to the last node end (N nodes; DuckDB work and dbt's per-node
  overhead — on a small lake the SQL itself is milliseconds);
- ``rest``: copy/checkpoint/swap of the warehouse, kernel alignment, report, and the ingest for ``run``.

Measures (the issue's anchors: 13–15 s for a build of a one-run lake, 15–16 s for ``runs rm``, 20 s
for ``tilake run`` on the real verl step, all before this work):

1. a lake of one small generated run (``bench_runs.ingest_small``: the real ingest of ~180 kernels),
   first build (every model and seed, no tests), then **one new run + `tilake build`** (target ≤ 3);
2. the same build with ``--check`` (data and unit tests: what the plain build no longer runs);
3. **`tilake runs rm`** of that new run (target ≤ 1.5);
4. a lake of 100 runs (``bench_runs.clone_runs``), first build, then **one new run + `tilake build`**
   (target ≤ 5);
5. **`tilake run`** on the real verl step's traces (``../shared/verl-cpu/traces``, as
   tests/pipeline/test_verl_real_step.py runs them) into a fresh lake, and again as a second run into
   that lake (target ≤ 6; skipped when the shared folder is absent).

Usage::

    python bench/bench_build.py [--runs 100] [--workdir DIR] [--keep] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared"
# the HF config shared/verl-cpu/make_assets.py writes for the tiny Qwen2 (tests/pipeline/test_verl_real_step.py)
TINY_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "head_dim": 32, "vocab_size": 512, "tie_word_embeddings": True}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(argv) -> int:
    """Run ``tilake <argv>`` in this process and print the phase split as one ``PHASES {json}`` line (stderr)."""
    marks = {"start": _cpu()}
    from tilake.lake import warehouse

    real_progress = warehouse.DbtProgress

    class Timed(real_progress):
        def __call__(self, ev):
            name = ev.info.name
            if name == "MainReportVersion" and "dbt_start" not in marks:
                marks["dbt_start"] = _cpu()
            elif name in ("NodeStart", "LogStartLine") and "nodes_start" not in marks:
                marks["nodes_start"] = _cpu()
            elif name == "NodeFinished":
                marks["nodes_end"] = _cpu()
                marks["nodes"] = marks.get("nodes", 0) + 1
            return super().__call__(ev)

    warehouse.DbtProgress = Timed
    import builtins

    real_import = builtins.__import__

    def hooked(name, *a, **kw):
        if name == "dbt.cli.main" and "dbt_import_start" not in marks:
            marks["dbt_import_start"] = _cpu()
            mod = real_import(name, *a, **kw)
            marks["dbt_import_end"] = _cpu()
            return mod
        return real_import(name, *a, **kw)

    builtins.__import__ = hooked
    from tilake.cli import main
    rc = 0
    try:
        main.main(list(argv), prog_name="tilake", standalone_mode=False)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    except Exception as exc:   # the figure is still printed; the parent reports the failure
        print(f"error: {exc}", file=sys.stderr)
        rc = 2
    marks["end"] = _cpu()
    print("PHASES " + json.dumps(marks), file=sys.stderr)
    return rc


def split(marks: dict) -> dict:
    """CPU seconds per phase from the child's marks (phases it never reached are absent)."""
    out = {}
    end = marks["end"]
    if "dbt_import_start" in marks:
        out["start"] = marks["dbt_import_start"]
        out["dbt import"] = marks["dbt_import_end"] - marks["dbt_import_start"]
    if "dbt_start" in marks and "nodes_start" in marks:
        out["dbt parse"] = marks["nodes_start"] - marks["dbt_start"]
    if "nodes_start" in marks and "nodes_end" in marks:
        out["dbt nodes"] = marks["nodes_end"] - marks["nodes_start"]
        out["nodes"] = marks.get("nodes", 0)
    out["rest"] = end - sum(v for k, v in out.items() if k != "nodes")
    return out


def measure(label: str, args, env=None, figures=None) -> dict:
    """``tilake <args>`` as a child; CPU s (process + children), wall s and the phase split, printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    marks = next((json.loads(x[7:]) for x in p.stderr.splitlines() if x.startswith("PHASES ")), None)
    ph = split(marks) if marks else {}
    ok = p.returncode == 0
    parts = "  ".join(f"{k} {v:.2f}" if k != "nodes" else f"({v} nodes)" for k, v in ph.items())
    print(f"  {label:46s} {cpu:6.2f} CPU s  {wall:6.2f} s wall  | {parts}" + ("" if ok else "  FAILED"), flush=True)
    if not ok:
        print("    " + "\n    ".join((p.stdout + p.stderr).strip().splitlines()[-5:]))
    rec = {"cpu": cpu, "wall": wall, "ok": ok, **ph}
    if figures is not None:
        figures.setdefault(label, []).append(rec)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="runs in the larger lake (default 100)")
    ap.add_argument("--repeats", type=int, default=1, help="new-run builds per lake (median printed)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--skip-verl", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from bench_runs import clone_runs, ingest_small

    from tilake.lake.store import Lake

    work = Path(a.workdir or tempfile.mkdtemp(prefix="tilake-bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    meta = {"model_id": "Qwen/Qwen3-0.6B", "model_family": "qwen3"}
    f: dict = {}
    quiet = ["--quiet"]
    try:
        print(f"workdir {work}; CPU s = user+sys of the command and its children; phases: start, dbt import, "
              "dbt parse, dbt nodes, rest")
        print("one-run lake:")
        lake = Lake(work / "one")
        ingest_small(lake, work, "r0000", False, dict(meta))
        measure("first build (every model and seed)", ["build", *quiet, "--lake", lake.root], figures=f)
        measure("nothing new", ["build", *quiet, "--lake", lake.root], figures=f)
        for i in range(a.repeats):
            ingest_small(lake, work, f"new{i}", True, dict(meta))
            measure("one new run + build (lake of 1 run)", ["build", *quiet, "--lake", lake.root], figures=f)
        measure("same lake, build --check (data + unit tests)", ["build", "--check", *quiet, "--lake", lake.root],
                figures=f)
        for i in range(a.repeats):
            measure("runs rm (the new run)", ["runs", "rm", f"new{i}", "--lake", lake.root], figures=f)

        print(f"{a.runs}-run lake:")
        tmpl = Lake(work / "template")
        ingest_small(tmpl, work, "tmpl-base", False, dict(meta))
        ingest_small(tmpl, work, "tmpl-changed", True, dict(meta))
        big = Lake(work / "big")
        clone_runs(big, tmpl, a.runs)
        measure(f"first build ({a.runs} runs)", ["build", *quiet, "--lake", big.root], figures=f)
        for i in range(a.repeats):
            ingest_small(big, work, f"bnew{i}", True, dict(meta, tags={"tool.vllm-ascend": "0.9.2"}))
            measure(f"one new run + build (lake of {a.runs} runs)", ["build", *quiet, "--lake", big.root], figures=f)
        measure(f"runs rm (lake of {a.runs} runs)", ["runs", "rm", "bnew0", "--lake", big.root], figures=f)

        traces = SHARED / "verl-cpu" / "traces"
        if not a.skip_verl and traces.is_dir():
            print("real verl step (shared/verl-cpu/traces, 2 traces):")
            vw = work / "verl-work"
            (vw / "tiny-qwen2").mkdir(parents=True, exist_ok=True)
            (vw / "tiny-qwen2" / "config.json").write_text(json.dumps(TINY_QWEN2), encoding="utf-8")
            env = {"VERLCPU_WORK": str(vw)}
            vl = work / "verl-lake"
            for rid, label in (("verl-1", "tilake run, fresh lake (first build)"),
                               ("verl-2", "tilake run, second run into that lake")):
                measure(label, ["run", traces, "--run-id", rid, "--lake", vl, "--out", work / f"out-{rid}",
                                "--lang", "en", "--script", SHARED / "verl-cpu" / "run_grpo.sh", *quiet],
                        env=env, figures=f)
        else:
            print("real verl step: skipped (no ../shared/verl-cpu/traces, or --skip-verl)")

        def med(label):
            xs = [r["cpu"] for r in f.get(label, []) if r["ok"]]
            return statistics.median(xs) if xs else float("nan")

        rows = [("build of one new run, lake of 1 run", "one new run + build (lake of 1 run)", "13–15", 3.0),
                (f"build of one new run, lake of {a.runs} runs", f"one new run + build (lake of {a.runs} runs)",
                 "–", 5.0),
                ("tilake runs rm, lake of 2 runs", "runs rm (the new run)", "15–16", 1.5),
                (f"tilake runs rm, lake of {a.runs + 1} runs", f"runs rm (lake of {a.runs} runs)", "–", 1.5),
                ("tilake run, real verl step (second run)", "tilake run, second run into that lake", "20", 6.0),
                ("tilake run, real verl step (fresh lake)", "tilake run, fresh lake (first build)", "20", 6.0)]
        print("\nsummary (CPU s; median of the repeats):")
        print(f"  {'measure':44s} {'before':>8s} {'now':>7s} {'target':>7s}")
        for name, label, anchor, target in rows:
            v = med(label)
            state = "" if v != v else ("met" if v <= target else "NOT met")
            print(f"  {name:44s} {anchor:>8s} {v:7.2f} {'≤ ' + format(target, 'g'):>7s}  {state}")
        print(f"  {'data + unit tests (build --check minus build)':44s} {'':>8s} "
              f"{med('same lake, build --check (data + unit tests)') - med('one new run + build (lake of 1 run)'):7.2f}")
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2:]))
    sys.exit(main())
