"""A run whose training DB lost its host links and its last kernel times (issue #12 items 4, 5) goes
through ingest → dbt build → report; the build stays green for this and every later run.

Input: ``tilake.synth`` LLM-shaped DBs (Megatron call stacks on the training side) edited as a parser
that lost the flow events (CONNECTION_IDS empty, TASK.connectionId NULL) and a capture cut while
recording (BR-24: three kernels with end < start or NULL, session end NULL) leave them.
"""
from __future__ import annotations

import sqlite3

from profiler_helpers import llm_pair, mart

from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile
from tilake.synth.population import JobConfig, infer_population, train_population


def test_unlinked_cut_capture_builds_and_keeps_backend(tmp_path):
    one = JobConfig(layers=1)
    info = llm_pair(tmp_path / "cap", train_population(one), infer_population(one))
    c = sqlite3.connect(info["train"]["path"])
    c.execute("DELETE FROM CONNECTION_IDS")
    c.execute("UPDATE TASK SET connectionId = NULL")
    c.execute("UPDATE SESSION_TIME_INFO SET endTimeNs = NULL")
    c.execute("UPDATE TASK SET endNs = startNs - 1000 WHERE rowid IN (SELECT t.rowid FROM TASK t JOIN COMPUTE_TASK_INFO "
              "USING (globalTaskId) ORDER BY t.startNs DESC LIMIT 3)")
    c.commit()
    c.close()
    lake = Lake(tmp_path / "lake")
    # the build's data tests pass with the bad rows in the lake (before: tilake_not_negative failed
    # this and every later build until the run was removed)
    res = run_profile(None, lake, "b", tmp_path / "b", train=[tmp_path / "cap" / "train"],
                      infer=[tmp_path / "cap" / "infer"], progress=False,
                      run_meta={"phases": "all"})   # every kernel of the step (the DBs carry verl phase marks)
    assert res.report_path.exists()
    backend, = mart(lake.root, "SELECT train_backend_detected FROM int_runs_backends_detected WHERE run_id = 'b'")[0]
    assert backend == "megatron"  # from the call stacks the order-matched host ops carry
    neg = mart(lake.root, "SELECT count(*) FROM fct_run_op_kernels WHERE total_dur_ns < 0")[0][0]
    assert neg == 0
    kernels = mart(lake.root, "SELECT sum(calls) FROM fct_side_ops WHERE run_id = 'b' AND side = 'train'")[0][0]
    assert kernels == info["train"]["kernels"]
