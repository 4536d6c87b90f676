"""Across-runs benchmark (issue 5, "Benchmark"): a lake of N generated small runs.

Prints figures, asserts nothing. Steps:

1. **Templates** — two tiny LLM-shaped runs are ingested for real (``ingest_profile`` on DBs
   written by ``synth_db.write_profiler_db``; 1 layer, batch 1, one rollout step, ~180 kernels):
   ``base`` and ``fused-changed`` (inference attention unfused into BatchMatMulV2+SoftmaxV2+BatchMatMulV2).
2. **Clone N runs** without ingesting N databases (N × ~2 s would dominate): for every raw table,
   one DuckDB ``COPY (SELECT … REPLACE (run_id, created_at, …) FROM template × range(N)) TO raw/<table>
   (FORMAT parquet, PARTITION_BY (run_id[, side, rank]))`` (partition columns only in the path) — the same
   Hive layout the Lake writer produces. Runs alternate the two
   templates, two model families (qwen3/llama) and two vllm-ascend versions (tag ``tool.vllm-ascend``),
   steps 1..N/2, and each carries a 3-boundary dump analysis whose first divergence moves.
3. **Builds**, all with ``tilake.lake.warehouse.dbt_build`` (what ``tilake build`` runs):
   the empty lake (twice: cold parse, then warm = the reference), the N-run lake (first build),
   the same lake with nothing new (no-op incremental), then one more run ingested through the real
   Lake writer (``ingest_profile``) and the **incremental build** (the target: ≤ 2 × the warm
   empty-lake build), then ``build_swapped`` (copy + atomic swap, used by ``tilake runs rm``) and a
   ``--full-refresh`` for comparison.
4. **Queries** — every named trend (``compute_trend``, read-only connection included) and every
   cookbook query, ``tilake runs`` listing and ``runs diff`` on two runs: latency each (target < 1 s).

Usage::

    python bench/bench_runs.py [--runs 1000] [--workdir DIR] [--keep]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tilake.ingest.profiler.load import ingest_profile
from tilake.lake import schema
from tilake.lake.duck import connect, sql_str
from tilake.lake.registry import diff_runs, list_runs
from tilake.lake.store import Lake
from tilake.lake.warehouse import build_swapped, dbt_build
from tilake.pipeline.profile import collect_captures
from tilake.reports import trends
from tilake.synth.db import write_profiler_db
from tilake.synth.population import JobConfig, infer_population, train_population

JOB = JobConfig(layers=1, train_batch_size=1, rollout_n=1, infer_steps=1)
QUERIES = Path(__file__).resolve().parents[1] / "reports" / "queries"


def _db(root: Path, side: str, pop) -> None:
    host = "host_1_1" if side == "train" else "host_2_2"
    write_profiler_db(root / side / f"{host}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db", pop)


def ingest_small(lake: Lake, work: Path, run_id: str, changed: bool, meta: dict) -> None:
    """Ingest one tiny generated run for real (the path every user run takes)."""
    tp, ip = train_population(JOB), infer_population(JOB)
    if changed:
        ip.replace_op_type("FusedInferAttentionScore", ["BatchMatMulV2", "SoftmaxV2", "BatchMatMulV2"])
    cap = work / f"cap-{run_id}"
    _db(cap, "train", tp)
    _db(cap, "infer", ip)
    caps = collect_captures(None, [cap / "train"], [cap / "infer"])
    ingest_profile(lake, run_id, caps, meta, progress=False)


def clone_runs(lake: Lake, template: Lake, n: int) -> None:
    """Write N runs into ``lake/raw`` from the two template runs with one partitioned COPY per table."""
    lake.ensure()
    con = connect()
    # the partitioned COPY keeps a buffer per open partition file: at 1,000 runs it ran out of memory
    # under the 512 MiB default limit (2026-12-01); row order inside a clone does not matter
    con.execute("SET preserve_insertion_order = false")
    try:
        for table, cols in schema.TABLES.items():
            src = template.raw / table
            if not any(src.glob("run_id=*")):
                continue
            parts = ["run_id", *schema.PARTITIONS[table]]
            repl = {"run_id": "'bench-' || lpad(g.i::varchar, 5, '0')"}
            names = {c for c, _ in cols}
            if "created_at" in names:
                repl["created_at"] = "TIMESTAMP '2026-01-01' + to_seconds(g.i::bigint)"
            if table == "runs":
                repl["model_family"] = "CASE WHEN g.i % 2 = 0 THEN 'qwen3' ELSE 'llama' END"
                repl["step"] = "(g.i // 2 + 1)::INTEGER"
                repl["tags"] = ("'{\"tool.vllm-ascend\": \"' || CASE WHEN g.i < " + str(n // 2) +
                                " THEN '0.9.0' ELSE '0.9.1' END || '\"}'")
            select = ", ".join(f'CAST({repl[c]} AS {t}) AS "{c}"' if c in repl else f't."{c}"' for c, t in cols)
            glob = sql_str(str(src / "**" / "*.parquet"))
            staged = lake.root / ".bench-staging" / table
            staged.parent.mkdir(parents=True, exist_ok=True)
            con.execute(
                f"COPY (SELECT {select} FROM read_parquet({glob}, hive_partitioning=true, "
                f"hive_types={schema.hive_types_sql(table)}, union_by_name=true) t "
                f"JOIN range({n}) g(i) ON t.run_id = CASE WHEN g.i % 3 = 2 THEN 'tmpl-changed' ELSE 'tmpl-base' END) "
                f"TO {sql_str(staged)} (FORMAT parquet, PARTITION_BY ({', '.join(parts)}), "
                "COMPRESSION zstd)")   # partition columns only in the path (tilake.lake.schema)
            for d in staged.iterdir():
                d.rename(lake.raw / table / d.name)
        # dump analyses: b0 → b1 → b2, first divergence at position i % 3
        staged = lake.root / ".bench-staging"
        con.execute(
            f"COPY (SELECT 'bench-' || lpad(i::varchar, 5, '0') AS run_id, 'qwen3_hf_vllm' AS map_name, 'train' AS reference_side, "
            "NULL AS train_path, NULL AS infer_path, 1 AS rounds, 'nonzero' AS verdict, 'rounding_only' AS consistency, "
            "NULL AS verdict_reason, NULL AS task_card, TIMESTAMP '2026-01-01' + to_seconds(i::bigint) AS created_at "
            f"FROM range({n}) r(i)) TO {sql_str(staged / 'dump_runs')} (FORMAT parquet, PARTITION_BY (run_id))")
        bcols = schema.TABLES["boundary_results"]
        fixed = {"run_id": "'bench-' || lpad(r.i::varchar, 5, '0')", "round": "0", "kind": "'activation'",
                 "boundary": "'layers.0.b' || p.pos", "position": "p.pos", "layer": "0", "op": "'op'",
                 "inputs": "CASE WHEN p.pos = 0 THEN '[]' ELSE '[\"layers.0.b' || (p.pos - 1) || '\"]' END",
                 "status": "CASE WHEN p.pos < r.i % 3 THEN 'EXACT' ELSE 'NOT_EXACT' END",
                 "tensor_ulp": "CASE WHEN p.pos < r.i % 3 THEN 0 ELSE 2.0 * (p.pos + 1) END",
                 "max_abs_diff": "CASE WHEN p.pos < r.i % 3 THEN 0 ELSE 0.01 * (p.pos + 1) END",
                 "class": "CASE WHEN p.pos < r.i % 3 THEN NULL ELSE 'rounding-level' END",
                 # the verdict facts the Python analysis writes with each row (diagnosis/lake_rows.py)
                 "first_divergence_status": "'found'", "is_first_divergence": "p.pos = r.i % 3",
                 "role": "CASE WHEN p.pos < r.i % 3 THEN NULL WHEN p.pos = r.i % 3 THEN 'independent_point' "
                         "ELSE 'propagated' END"}
        sel = ", ".join(f'CAST({fixed.get(c, "NULL")} AS {t}) AS "{c}"' for c, t in bcols)
        con.execute(f"COPY (SELECT {sel} FROM range({n}) r(i), range(3) p(pos)) TO {sql_str(staged / 'boundary_results')} "
                    "(FORMAT parquet, PARTITION_BY (run_id))")
        for table in ("dump_runs", "boundary_results"):
            for d in (staged / table).iterdir():
                d.rename(lake.raw / table / d.name)
        shutil.rmtree(lake.root / ".bench-staging", ignore_errors=True)
    finally:
        con.close()


def node_times(lake: Lake, top: int = 6) -> None:
    """Where the last dbt invocation spent its time (``run_results.json``): trend marts vs the rest."""
    import json

    f = lake.root / ".dbt" / "target" / "run_results.json"
    if not f.is_file():   # tilake's builds run dbt with --no-write-json (issue 35)
        print("    (no run_results.json: tilake builds do not write it; node times not shown)")
        return
    rr = json.loads(f.read_text())
    res = [(r["unique_id"], r["execution_time"]) for r in rr["results"]]
    mine = [t for u, t in res if any(k in u for k in (".fct_run_", ".fct_change_", ".int_run_", ".int_runs_versioned"))]
    print(f"    dbt wall {rr['elapsed_time']:.1f} s; node time: trend models {sum(mine):.1f} s, "
          f"other nodes {sum(t for _, t in res) - sum(mine):.1f} s (4 threads)")
    for u, t in sorted(res, key=lambda x: -x[1])[:top]:
        print(f"    {t:6.2f} s  {u}")


def timed(label: str, fn, figures: dict):
    t = time.perf_counter()
    out = fn()
    figures[label] = time.perf_counter() - t
    ok = getattr(out, "success", True)
    print(f"  {label:52s} {figures[label]:8.2f} s" + ("" if ok else "  (dbt reported failures)"), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="tilake-bench-runs-"))
    work.mkdir(parents=True, exist_ok=True)
    f: dict = {}
    try:
        print(f"workdir {work}; N = {a.runs} runs")
        tmpl = Lake(work / "template")
        meta = {"model_id": "Qwen/Qwen3-0.6B", "model_family": "qwen3"}
        ingest_small(tmpl, work, "tmpl-base", False, dict(meta))
        ingest_small(tmpl, work, "tmpl-changed", True, dict(meta))

        empty = Lake(work / "empty")
        print("builds:")
        timed("empty lake, cold (full parse)", lambda: dbt_build(empty), f)
        timed("empty lake, warm (reference)", lambda: dbt_build(empty), f)

        lake = Lake(work / "lake")
        timed(f"clone {a.runs} runs into raw/ (partitioned COPY)", lambda: clone_runs(lake, tmpl, a.runs), f)
        files = sum(1 for _ in lake.raw.rglob("*.parquet"))
        print(f"  raw Parquet files: {files}")
        timed(f"{a.runs}-run lake, first build", lambda: dbt_build(lake), f)
        timed(f"{a.runs}-run lake, nothing new", lambda: dbt_build(lake), f)
        node_times(lake)
        timed("ingest one more run (real ingest)",
              lambda: ingest_small(lake, work, "bench-new", True,
                                   dict(meta, tags={"tool.vllm-ascend": "0.9.2"})), f)
        res = timed(f"incremental build after one more run (N={a.runs})", lambda: dbt_build(lake), f)
        import duckdb
        con = duckdb.connect(str(lake.warehouse), read_only=True)
        n_reg = con.execute("select count(*) from fct_run_registry").fetchone()[0]
        n_new = con.execute("select count(*) from fct_run_op_kernels where run_id = 'bench-new'").fetchone()[0]
        con.close()
        print(f"  registry runs {n_reg}, new run's op-kernel rows {n_new}, dbt success {res.success}")
        print(f"  warehouse.duckdb {lake.warehouse.stat().st_size / 2**20:.1f} MiB; raw/ "
              f"{sum(p.stat().st_size for p in lake.raw.rglob('*.parquet')) / 2**20:.1f} MiB in "
              f"{sum(1 for _ in lake.raw.rglob('*.parquet'))} Parquet files")
        node_times(lake)
        timed("same, build_swapped (copy + atomic swap)", lambda: build_swapped(lake), f)
        timed("full refresh (for comparison)", lambda: dbt_build(lake, full_refresh=True), f)

        print("queries (read-only connection opened per query):")
        lat = {}
        for name in trends.trend_defs():
            t = time.perf_counter()
            r = trends.compute_trend(lake, name, "model_family", "run")
            lat[f"trend {name}"] = time.perf_counter() - t
            print(f"  trend {name:40s} {lat[f'trend {name}']*1000:8.1f} ms  ({sum(len(s.points) for s in r.series)} points)")
        t = time.perf_counter()
        trends.compute_trend(lake, "red_rows", "model_family,tool:vllm-ascend", "step")
        lat["trend red_rows by family+tool, x=step"] = time.perf_counter() - t
        print(f"  trend red_rows by model_family,tool:vllm-ascend x=step {lat['trend red_rows by family+tool, x=step']*1000:8.1f} ms")
        from tilake.lake.sql import query
        for q in sorted(QUERIES.glob("cookbook_*.sql")):
            t = time.perf_counter()
            cols, rows = query(lake, q.read_text(encoding="utf-8"))
            lat[q.stem] = time.perf_counter() - t
            print(f"  {q.stem:46s} {lat[q.stem]*1000:8.1f} ms  ({len(rows)} rows)")
        t = time.perf_counter()
        runs = list_runs(lake)
        lat["tilake runs (warehouse current)"] = time.perf_counter() - t
        print(f"  tilake runs, warehouse current ({len(runs)} runs){'':8s} {lat['tilake runs (warehouse current)']*1000:8.1f} ms")
        t = time.perf_counter()
        runs = list_runs(lake, "raw")
        listing_raw = time.perf_counter() - t
        print(f"  tilake runs, raw tables after an ingest ({len(runs)} runs) {listing_raw*1000:8.1f} ms  (not a query target)")
        t = time.perf_counter()
        d = diff_runs(lake, "bench-00001", "bench-new")
        lat["runs diff (any-pair views)"] = time.perf_counter() - t
        print(f"  runs diff bench-00001 bench-new{'':21s} {lat['runs diff (any-pair views)']*1000:8.1f} ms  "
              f"({len(d['kernels'][1])} kernel changes)")

        print("the same questions through DuckDB over the raw Hive lake (no warehouse; partition columns pruned):")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_fleet import hive_query
        ten = ", ".join(f"'bench-{i:05d}'" for i in range(0, a.runs, max(1, a.runs // 10)))
        for label, table, sel, where, group in (
                ("infer kernels per run, every run (side pruned)", "kernels", "run_id, count(*)", "side = 'infer'",
                 "run_id"),
                ("device time per op type, 10 runs (run_id pruned)", "kernels", "run_id, op_type, sum(dur_ns)",
                 f"run_id IN ({ten})", "run_id, op_type"),
                ("one run, train rank 0 (all three pruned)", "kernels", "count(*)",
                 "run_id = 'bench-00500' AND side = 'train' AND rank = 0", ""),
                ("capture health, every run (no pruning)", "captures", "status, count(*)", "true", "status")):
            ms, rows, scanned = hive_query(lake, table, sel, where, group)
            lat[f"hive {label}"] = ms / 1000
            print(f"  {label:52s} {ms:8.1f} ms  ({len(rows)} rows; files scanned {scanned})")

        ref = f["empty lake, warm (reference)"]
        inc = f[f"incremental build after one more run (N={a.runs})"]
        print("\nsummary:")
        print(f"  incremental build / empty-lake build = {inc:.2f} s / {ref:.2f} s = {inc / ref:.2f}x  (target <= 2x)")
        print(f"  slowest query: {max(lat, key=lat.get)} {max(lat.values())*1000:.0f} ms  (target < 1000 ms)")
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
