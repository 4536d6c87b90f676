"""Across runs: registry, incremental trend marts, change marts, runs rm, concurrent reader, trends, cookbook.

One lake with generated LLM-shaped runs across two model families (qwen3, llama) and two
vllm-ascend versions (0.9.0, 0.9.1), plus dump analyses written as lake rows for two qwen3 runs.
Builds: base (4 runs) → one more run (incremental, with a reader process holding the warehouse
open) → full refresh (equality) → `runs rm` (rebuild). Each dbt build costs ~10–25 s, so all tests
share this module's lake and run in file order.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from profiler_helpers import llm_pair, mart

from tilake.cli import main
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.registry import list_runs, warehouse_is_current
from tilake.lake.store import Lake
from tilake.lake.warehouse import build_swapped
from tilake.pipeline.profile import collect_captures
from tilake.reports import trends
from tilake.synth.population import JobConfig, infer_population, train_population

JOB = JobConfig(layers=1, train_batch_size=1, rollout_n=1, infer_steps=1)
INCREMENTAL = ["fct_run_grade_counts", "fct_run_op_kernels", "fct_run_capture_health", "fct_run_divergence"]
QUERIES = Path(__file__).resolve().parents[2] / "reports" / "queries"


def _ingest(lake: Lake, tmp: Path, run_id: str, family: str, step: int, vllm_ascend: str,
            train_edit=None, infer_edit=None, via_tag: bool = False):
    tp, ip = train_population(JOB), infer_population(JOB)
    if train_edit:
        train_edit(tp)
    if infer_edit:
        infer_edit(ip)
    llm_pair(tmp / run_id, tp, ip)
    caps = collect_captures(None, [tmp / run_id / "train"], [tmp / run_id / "infer"])
    meta = {"model_id": "Qwen/Qwen3-0.6B" if family == "qwen3" else "meta-llama/Llama-3.2-1B",
            "model_family": family, "step": step, "tags": {"team": "rl"},
            # every kernel of the step (the synthetic DBs carry verl MSTX marks: the default would keep the
            # actor log-prob forward only; docs/phases.md)
            "phases": "all"}
    if via_tag:
        meta["tags"]["tool.vllm-ascend"] = vllm_ascend
    else:
        meta["tool_versions"] = {"vllm-ascend": vllm_ascend, "torch_npu": "2.5.1"}
    ingest_profile(lake, run_id, caps, meta, progress=False)


def _dumps(lake: Lake, run_id: str, first_div: int, ulp: float) -> None:
    """Round-0 boundary results of a 3-boundary chain b0 → b1 → b2; the first NOT_EXACT is at ``first_div``."""
    rows = []
    for pos in range(3):
        st = "EXACT" if pos < first_div else "NOT_EXACT"
        rows.append({"run_id": run_id, "round": 0, "kind": "activation", "boundary": f"layers.0.b{pos}",
                     "position": pos, "layer": 0, "op": "op", "inputs": [f"layers.0.b{pos - 1}"] if pos else [],
                     "status": st, "tensor_ulp": (ulp * (pos + 1)) if st != "EXACT" else 0.0,
                     "max_abs_diff": 0.01 * (pos + 1) if st != "EXACT" else 0.0,
                     "class": "rounding-level" if st != "EXACT" else None,
                     # the verdict facts the Python analysis writes with each row (diagnosis/lake_rows.py)
                     "first_divergence_status": "found", "is_first_divergence": pos == first_div,
                     "role": None if st == "EXACT" else "independent_point" if pos == first_div else "propagated",
                     "growth_vs_first": (pos + 1) / (first_div + 1) if pos >= first_div else None})
    with lake.write_run(run_id, ["dump_runs", "boundary_results"]) as w:
        w.write_rows("dump_runs", [{"run_id": run_id, "map_name": "qwen3_hf_vllm", "rounds": 1, "verdict": "nonzero",
                                    "consistency": "rounding_only", "created_at": datetime.utcnow()}])
        w.write_rows("boundary_results", rows)


def _snapshot(lake: Lake, table: str):
    cols = [r[0] for r in mart(lake.root, f"select column_name from information_schema.columns "
                                          f"where table_name = '{table}' order by ordinal_position")]
    return cols, sorted(mart(lake.root, f"select * from {table}"), key=repr)


READER = textwrap.dedent("""
    import duckdb, json, sys, time
    wh = sys.argv[1]
    held = duckdb.connect(wh, read_only=True)
    before = held.execute("select count(*) from fct_run_registry").fetchone()[0]
    print("ready", flush=True)
    opens, errors = [], []
    sys.stdin = open(sys.stdin.fileno())
    import select
    while True:
        r, _, _ = select.select([sys.stdin], [], [], 0.05)
        if r:
            break
        try:
            c = duckdb.connect(wh, read_only=True)
            opens.append(c.execute("select count(*) from fct_run_registry").fetchone()[0])
            c.close()
        except Exception as e:
            errors.append(str(e).splitlines()[0])
    after_held = held.execute("select count(*) from fct_run_registry").fetchone()[0]
    held.close()
    c = duckdb.connect(wh, read_only=True)
    fresh = c.execute("select count(*) from fct_run_registry").fetchone()[0]
    print(json.dumps({"before": before, "held_after": after_held, "fresh": fresh,
                      "opens": len(opens), "open_counts": sorted(set(opens)), "errors": errors[:3]}), flush=True)
""")


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    lk = Lake(tmp / "lake")
    _ingest(lk, tmp / "cap", "q1", "qwen3", 1, "0.9.0")
    _ingest(lk, tmp / "cap", "l1", "llama", 1, "0.9.0", via_tag=True)
    _ingest(lk, tmp / "cap", "q2", "qwen3", 2, "0.9.0")
    _ingest(lk, tmp / "cap", "l2", "llama", 2, "0.9.1", via_tag=True,
            infer_edit=lambda p: p.insert_after("SwiGlu", "Swish"))
    _dumps(lk, "q2", first_div=1, ulp=2.0)
    res = build_swapped(lk)
    assert res.success, res.failures
    lk.tmp = tmp
    return lk


def test_every_ingest_registers_a_run(lake):
    raw = list_runs(lake, "raw")
    assert list_runs(lake, "warehouse") == raw          # the fast path agrees with the raw tables
    runs = {r["run_id"]: r for r in raw}
    assert list(runs) == ["q1", "l1", "q2", "l2"]
    assert runs["q1"]["tool_versions"] == {"vllm-ascend": "0.9.0", "torch-npu": "2.5.1"}
    assert runs["l2"]["tool_versions"] == {"vllm-ascend": "0.9.1"}          # from --tag tool.vllm-ascend=0.9.1
    assert runs["l2"]["tags"] == {"team": "rl"} and runs["l2"]["model_family"] == "llama"
    assert runs["q2"]["step"] == 2 and runs["q2"]["host"] and runs["q2"]["created_at"] is not None
    assert runs["q2"]["has_dumps"] and not runs["q1"]["has_dumps"]
    reg = mart(lake.root, "select run_id, model_family, vllm_ascend, family_seq, previous_run_id "
                          "from fct_run_registry order by run_seq")
    assert reg == [("q1", "qwen3", "0.9.0", 1, None), ("l1", "llama", "0.9.0", 1, None),
                   ("q2", "qwen3", "0.9.0", 2, "q1"), ("l2", "llama", "0.9.1", 2, "l1")]


def test_change_marts_report_exactly_the_changed_kernels_base(lake):
    rows = mart(lake.root, "select base_run_id, run_id, side, op_type, change from fct_change_kernels")
    assert sorted(rows) == [("l1", "l2", "infer", "Swish", "added")]
    assert mart(lake.root, "select count(*) from fct_change_grades where run_id = 'q2'")[0][0] == 0


def test_one_more_run_is_incremental_and_safe_beside_a_reader(lake):
    # prove the next build does not recompute old runs: tamper one old row, it must survive
    con = duckdb.connect(str(lake.warehouse))
    con.execute("update fct_run_op_kernels set kernel_rows = kernel_rows + 1000000 where run_id = 'q1'")
    con.close()
    _ingest(lake, lake.tmp / "cap", "q3", "qwen3", 3, "0.9.1",
            train_edit=lambda p: p.drop_op_type("RotaryMul"),
            infer_edit=lambda p: p.replace_op_type("FusedInferAttentionScore",
                                                   ["BatchMatMulV2", "SoftmaxV2", "BatchMatMulV2"]))
    _dumps(lake, "q3", first_div=0, ulp=4.0)
    assert not warehouse_is_current(lake)               # listing falls back to the raw tables
    assert [r["run_id"] for r in list_runs(lake)][-1] == "q3"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(lake.warehouse)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready"
        res = build_swapped(lake)        # a reader holds warehouse.duckdb read-only the whole time
        time.sleep(0.3)
        out, err = reader.communicate("stop\n", timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert res.success, res.failures
    assert res.plan == "rows"   # the same project built the warehouse: dbt's recorded SELECTs, no dbt run
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["errors"] == [], seen                  # new read-only opens never failed during the build
    assert seen["before"] == 4 and seen["held_after"] == 4   # the held connection keeps its snapshot
    assert seen["fresh"] == 5 and seen["opens"] > 0 and set(seen["open_counts"]) <= {4, 5}
    assert warehouse_is_current(lake)
    tampered = mart(lake.root, "select min(kernel_rows) from fct_run_op_kernels where run_id = 'q1'")[0][0]
    assert tampered >= 1000000                          # q1 was not recomputed
    assert mart(lake.root, "select count(*) from fct_run_op_kernels where run_id = 'q3'")[0][0] > 0
    con = duckdb.connect(str(lake.warehouse))
    con.execute("update fct_run_op_kernels set kernel_rows = kernel_rows - 1000000 where run_id = 'q1'")
    con.close()


def test_change_marts_report_exactly_the_changed_kernels(lake):
    rows = mart(lake.root, "select base_run_id, run_id, side, op_type, change, base_calls, run_calls "
                           "from fct_change_kernels")
    got = sorted(r[:5] for r in rows)
    assert got == [("l1", "l2", "infer", "Swish", "added"),
                   ("q2", "q3", "infer", "BatchMatMulV2", "added"),
                   ("q2", "q3", "infer", "FusedInferAttentionScore", "removed"),
                   ("q2", "q3", "train", "RotaryMul", "removed")]
    t = train_population(JOB).op_type_counts()
    by = {r[3]: r for r in rows}
    assert by["RotaryMul"][5] == t["RotaryMul"] and by["RotaryMul"][6] is None
    assert by["BatchMatMulV2"][6] == 2 * infer_population(JOB).op_type_counts()["FusedInferAttentionScore"]
    # the any-pair view gives the same answer for the same pair, and also for non-adjacent pairs
    anyv = mart(lake.root, "select base_run_id, run_id, side, op_type, change from fct_change_kernels_any "
                           "where base_run_id = 'q1' and run_id = 'q3'")
    assert sorted(anyv) == [("q1", "q3", "infer", "BatchMatMulV2", "added"),
                            ("q1", "q3", "infer", "FusedInferAttentionScore", "removed"),
                            ("q1", "q3", "train", "RotaryMul", "removed")]
    g1 = mart(lake.root, "select module, base_grade, run_grade, change from fct_change_grades where run_id = 'q3'")
    g2 = mart(lake.root, "select module, base_grade, run_grade, change from fct_change_grades_any "
                         "where base_run_id = 'q2' and run_id = 'q3'")
    assert sorted(g1) == sorted(g2)
    cmp2 = dict(mart(lake.root, "select module, grade from fct_op_comparison where run_id = 'q2'"))
    cmp3 = dict(mart(lake.root, "select module, grade from fct_op_comparison where run_id = 'q3'"))
    expected = {m for m in set(cmp2) | set(cmp3) if cmp2.get(m) != cmp3.get(m)}
    assert {r[0] for r in g1} == expected


def test_first_divergence_moved_earlier(lake):
    d = mart(lake.root, "select run_id, first_divergence_status, first_divergence_boundary, first_divergence_position, "
                        "difference_points, max_tensor_ulp from fct_run_divergence order by run_id")
    assert d == [("q2", "found", "layers.0.b1", 1, 1, 6.0), ("q3", "found", "layers.0.b0", 0, 1, 12.0)]
    mv = mart(lake.root, "select base_run_id, run_id, base_boundary, run_boundary, position_delta, movement "
                         "from fct_change_divergence")
    assert mv == [("q2", "q3", "layers.0.b1", "layers.0.b0", -1, "earlier")]


def test_every_raw_file_carries_the_full_table_schema(lake):
    """The dbt sources read raw/ with union_by_name=false: every file must have every file column, and
    no partition column (those live in the path only: pyarrow refuses a column in both)."""
    from tilake.lake import schema
    files = list(lake.raw.glob("*/**/*.parquet"))
    assert len(files) > 20
    for f in files:
        have = [r[0] for r in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{f}', hive_partitioning=false)").fetchall()]
        assert have == [c for c, _ in schema.file_columns(f.relative_to(lake.raw).parts[0])], f


def test_incremental_equals_full_refresh_row_for_row(lake, monkeypatch):
    # every table dbt materialised (trend, change, per-run foundation and dump marts, incremental
    # intermediates, seeds), after incremental builds, equals a full refresh
    tables = [r[0] for r in mart(lake.root, "select table_name from information_schema.tables "
                                            "where table_type = 'BASE TABLE' and table_name <> 'tilake_project_state' "
                                            "order by 1")]
    assert {"fct_op_comparison", "fct_side_ops", "fct_op_call_stacks", "dim_runs"} <= set(tables)
    before = {t: _snapshot(lake, t) for t in tables}
    assert all(before[t][1] for t in INCREMENTAL + ["fct_change_kernels", "fct_run_registry", "fct_op_comparison"])
    from tilake.lake import warehouse as build_mod
    assert mart(lake.root, "select project_sha256 from tilake_project_state")[0][0] == build_mod.project_fingerprint()
    # a changed dbt project (tilake upgrade, edited seeds) makes `tilake build` refresh by itself
    monkeypatch.setattr(build_mod, "project_fingerprint", lambda project=None: "a-changed-project")
    res = build_swapped(lake)
    assert res.success, res.failures
    assert res.full_refresh
    assert mart(lake.root, "select project_sha256 from tilake_project_state")[0][0] == "a-changed-project"
    after = {t: _snapshot(lake, t) for t in before}
    for t in before:
        assert before[t][0] == after[t][0], t
        assert before[t][1] == after[t][1], (t, "incremental only:", sorted(set(before[t][1]) - set(after[t][1]), key=repr)[:3],
                                             "full refresh only:", sorted(set(after[t][1]) - set(before[t][1]), key=repr)[:3])


def test_trend_red_rows_by_family_and_tool_version(lake):
    red = dict(mart(lake.root, "select run_id, count(*) filter (where grade = 'red') from fct_op_comparison group by 1"))
    res = trends.compute_trend(lake, "red_rows", "model_family", "run")
    got = {s.label: [(p[0], p[1], p[3]) for p in s.points] for s in res.series}
    assert got == {"llama": [(2, red["l1"], "l1"), (4, red["l2"], "l2")],
                   "qwen3": [(1, red["q1"], "q1"), (3, red["q2"], "q2"), (5, red["q3"], "q3")]}
    res = trends.compute_trend(lake, "infer_kernels", "tool:vllm-ascend", "run")
    assert {s.label: len(s.points) for s in res.series} == {"vllm-ascend 0.9.0": 3, "vllm-ascend 0.9.1": 2}
    res = trends.compute_trend(lake, "first_divergence", "model_family", "step")
    assert [(s.label, [(p[0], p[1]) for p in s.points]) for s in res.series] == [("qwen3", [(2, 1.0), (3, 0.0)])]
    res = trends.compute_trend(lake, "kernel_changes", "tag:team", "run")
    assert [(s.label, [p[1] for p in s.points]) for s in res.series] == [("team=rl", [0.0, 1.0, 3.0])]


def test_every_named_trend_runs_standalone_and_through_the_cli(lake, tmp_path):
    for name, d in trends.trend_defs().items():
        rows = mart(lake.root, d.sql)
        assert all(r[0] in {"q1", "q2", "q3", "l1", "l2"} for r in rows), name
    r = CliRunner().invoke(main, ["trend", "--metric", "red_rows", "--by", "model_family", "--lake", str(lake.root),
                                  "-o", str(tmp_path / "red.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "red.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "qwen3" in r.output and "llama" in r.output and "chart:" in r.output
    r = CliRunner().invoke(main, ["trend", "--metric", "first_divergence", "--x", "step", "--lake", str(lake.root),
                                  "-o", str(tmp_path / "fd.html")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "fd.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in page and "<td>qwen3</td><td>2</td><td>1</td>" in page
    assert "<td>qwen3</td><td>3</td><td>0</td>" in page
    r = CliRunner().invoke(main, ["trend", "--metric", "nope", "--lake", str(lake.root)])
    assert r.exit_code == 2 and "unknown trend 'nope'" in r.output


def test_runs_list_and_diff_commands(lake):
    r = CliRunner().invoke(main, ["runs", "--lake", str(lake.root)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    for rid in ("q1", "q2", "q3", "l1", "l2"):
        assert re.search(rf"│ {rid} ", r.output)
    assert "vllm-ascend 0.9.1" in r.output and "team=rl" in r.output
    r = CliRunner().invoke(main, ["runs", "diff", "q2", "q3", "--lake", str(lake.root)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "FusedInferAttentionScore" in r.output and "RotaryMul" in r.output and "earlier" in r.output
    r = CliRunner().invoke(main, ["runs", "diff", "q2", "zz", "--lake", str(lake.root)])
    assert r.exit_code == 2 and "run 'zz' is not in the warehouse" in r.output


COOKBOOK_EXPECT = {
    "cookbook_01_runs_per_family_and_version": lambda rows: sorted(rows) == [
        ("llama", "0.9.0", 1), ("llama", "0.9.1", 1), ("qwen3", "0.9.0", 2), ("qwen3", "0.9.1", 1)],
    "cookbook_02_red_rows_by_family": lambda rows: [r[0] for r in rows] == ["qwen3", "llama"] and rows[0][1] == 3,
    "cookbook_03_fused_kernels_changed_after_upgrade": lambda rows: sorted((r[0], r[1], r[3], r[4]) for r in rows) == [
        ("q2", "q3", "FusedInferAttentionScore", "removed"), ("q2", "q3", "RotaryMul", "removed")],
    "cookbook_04_first_divergence_over_steps": lambda rows: [(r[0], r[1], r[3]) for r in rows] == [
        ("qwen3", 2, 1), ("qwen3", 3, 0)],
    "cookbook_05_grade_changes_vs_previous_run": None,   # checked against fct_op_comparison below
    "cookbook_06_top_device_time_ops_latest_run": lambda rows: len(rows) == 10 and rows[0][0] == "q3"
        and rows[0][3] >= rows[-1][3],
    "cookbook_07_capture_health_problems": lambda rows: rows == [],
    "cookbook_08_op_types_only_in_one_family": lambda rows: ("infer", "Swish", "llama") in [tuple(r[:3]) for r in rows],
    "cookbook_09_attention_share_of_device_time": lambda rows: len(rows) == 10 and all(
        (r[3] == 0) if (r[0], r[1]) == ("q3", "infer") else (0 < r[3] < 1) for r in rows),
    "cookbook_10_latest_run_per_family": lambda rows: sorted((r[0], r[1]) for r in rows) == [
        ("llama", "l2"), ("qwen3", "q3")],
}


def test_cookbook_queries_run_and_return_expected_rows(lake):
    files = sorted(QUERIES.glob("cookbook_*.sql"))
    assert [f.stem for f in files] == sorted(COOKBOOK_EXPECT)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text(encoding="utf-8")
    grades = {}
    for run_id, module, grade in mart(lake.root, "select run_id, module, grade from fct_op_comparison"):
        grades.setdefault(run_id, {})[module] = grade
    changed = {(b, r, m) for b, r in (("q1", "q2"), ("l1", "l2"), ("q2", "q3"))
               for m in set(grades[b]) | set(grades[r]) if grades[b].get(m) != grades[r].get(m)}
    for f in files:
        rows = mart(lake.root, f.read_text(encoding="utf-8"))
        if f.stem.startswith("cookbook_05"):
            assert {tuple(r[:3]) for r in rows} == changed and len(rows) == len(changed), rows
            continue
        assert COOKBOOK_EXPECT[f.stem](rows), (f.stem, rows)
        assert f.name in readme, f"{f.name} missing from the cookbook in docs/sql.md"


def test_runs_rm_removes_partitions_and_rebuilds(lake):
    # the installed project's state again (test_incremental_equals_full_refresh_row_for_row recorded another)
    assert build_swapped(lake).success
    reader = subprocess.Popen([sys.executable, "-c", READER, str(lake.warehouse)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready"
        r = CliRunner().invoke(main, ["runs", "rm", "l2", "--lake", str(lake.root)])
        out, _err = reader.communicate("stop\n", timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert r.exit_code == 0, r.output
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["errors"] == [] and seen["before"] == 5 and seen["held_after"] == 5 and seen["fresh"] == 4, seen
    assert "removed run l2" in r.output and "the run's rows removed" in r.output   # no rebuild
    assert not list(lake.raw.glob("*/run_id=l2"))
    assert mart(lake.root, "select count(*) from fct_run_registry where run_id = 'l2'")[0][0] == 0
    for t in INCREMENTAL + ["fct_op_comparison"]:
        assert mart(lake.root, f"select count(*) from {t} where run_id = 'l2'")[0][0] == 0, t
    assert mart(lake.root, "select count(*) from fct_change_kernels where run_id = 'l2'")[0][0] == 0
    assert mart(lake.root, "select count(*) from fct_run_op_kernels where run_id = 'q3'")[0][0] > 0
    r = CliRunner().invoke(main, ["runs", "rm", "l2", "--lake", str(lake.root)])
    assert r.exit_code == 2 and "no run 'l2' in this lake" in r.output
    # the rows-only removal equals a rebuild from scratch, table for table (the change marts re-pair l1's family)
    tables = [t for (t,) in mart(lake.root, "select table_name from information_schema.tables where table_type = "
                                            "'BASE TABLE' and table_name <> 'tilake_project_state' order by 1")]
    removed = {t: _snapshot(lake, t) for t in tables}
    assert build_swapped(lake, full_refresh=True).success
    for t in tables:
        assert _snapshot(lake, t) == removed[t], t


def test_select_builds_ancestors_so_a_reingested_run_is_fresh(lake):
    """`tilake build --select fct_op_comparison` after a re-ingest: the mart shows the new content
    (its incremental ancestors and the run registry are built too, see build.with_ancestors)."""
    from tilake.lake.warehouse import with_ancestors
    assert with_ancestors(["fct_op_comparison", "+dim_runs", "@fct_side_ops", "2+fct_x"]) == \
        ["+fct_op_comparison", "+dim_runs", "@fct_side_ops", "2+fct_x"]
    before = mart(lake.root, "select infer_ops from fct_op_comparison where run_id = 'q3' and module = 'attention'")
    assert "FusedInferAttentionScore" not in before[0][0]            # q3 ran attention unfused
    _ingest(lake, lake.tmp / "cap2", "q3", "qwen3", 3, "0.9.1")         # same id, stock population
    r = CliRunner().invoke(main, ["build", "--lake", str(lake.root), "--select", "fct_op_comparison"])
    assert r.exit_code == 0, r.output
    after = mart(lake.root, "select infer_ops from fct_op_comparison where run_id = 'q3' and module = 'attention'")
    assert after[0][0] == ["FusedInferAttentionScore"]
