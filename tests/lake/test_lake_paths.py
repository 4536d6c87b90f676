"""A lake folder whose path has quote/Jinja/glob characters builds and reads only itself."""
from __future__ import annotations

import duckdb
from profiler_helpers import llm_pair

from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.lake.warehouse import build_swapped, dbt_lake_root
from tilake.pipeline.profile import collect_captures
from tilake.synth.population import JobConfig, infer_population, train_population

JOB = JobConfig(layers=1, train_batch_size=1, rollout_n=1, infer_steps=1)


def _ingest(lake: Lake, tmp, run_id: str) -> None:
    llm_pair(tmp / run_id, train_population(JOB), infer_population(JOB))
    caps = collect_captures(None, [tmp / run_id / "train"], [tmp / run_id / "infer"])
    ingest_profile(lake, run_id, caps, {"model_id": "Qwen/Qwen3-0.6B"}, progress=False)


def test_weird_lake_path_builds_and_never_reads_a_sibling(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # "l{a}'b[12]" as a DuckDB glob would also match the sibling "l{a}'b1"
    sibling = Lake(tmp_path / "l{a}'b1")
    weird = Lake(tmp_path / "l{a}'b[12]")
    _ingest(sibling, tmp_path / "cap", "from_sibling")
    _ingest(weird, tmp_path / "cap", "mine")
    res = build_swapped(weird)
    assert res.success, res.failures
    con = duckdb.connect(str(weird.warehouse), read_only=True)
    try:
        assert con.execute("select run_id from dim_runs").fetchall() == [("mine",)]
        assert con.execute("select distinct run_id from fct_op_comparison").fetchall() == [("mine",)]
        assert con.execute("select distinct run_id from stg_profiler__kernels").fetchall() == [("mine",)]
    finally:
        con.close()
    link = dbt_lake_root(weird.root)
    assert link != weird.root and link.is_symlink() and link.resolve() == weird.root.resolve()
    assert dbt_lake_root(tmp_path / "plain lake") == tmp_path / "plain lake"    # safe paths unchanged
