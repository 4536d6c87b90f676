"""A dbt build outcome as records: counted from dbt's result objects (``RunResult.status``), not its text."""
from __future__ import annotations

from types import SimpleNamespace

from dbt.artifacts.schemas.results import RunStatus, TestStatus

from tilake.lake.store import Lake
from tilake.lake.warehouse import BuildResult, DbtCounts, DbtNode, build_swapped
from tilake.pipeline.example import run_example


def _result(name, kind, status, message=None):
    """A dbt ``RunResult`` as ``dbtRunnerResult.result.results`` holds it (node + status enum + message)."""
    return SimpleNamespace(node=SimpleNamespace(name=name, resource_type=kind), status=status, message=message)


def test_counts_come_from_dbt_statuses():
    results = [_result("stg_a", "model", RunStatus.Success, "OK"), _result("fct_b", "model", RunStatus.Error, "boom"),
               _result("fct_c", "model", RunStatus.Skipped), _result("t1", "test", TestStatus.Pass),
               _result("t2", "test", TestStatus.Fail, "Got 3 results"), _result("t3", "test", TestStatus.Warn),
               _result("t4", "test", TestStatus.Error)]
    res = BuildResult(False, [DbtNode.of(r) for r in results])
    assert res.nodes[1] == DbtNode("fct_b", "model", "error", "boom") and res.nodes[2].message == ""
    assert res.counts == DbtCounts(passed=2, failed=1, errored=2, skipped=1, warned=1)
    assert [n.name for n in res.failures] == ["fct_b", "t2", "t4"] and [n.name for n in res.warnings] == ["t3"]
    # a node's message says "Got 3 results"; the counts never read it
    assert res.failure_summary() == "fct_b: boom; t2: Got 3 results; t4: error"


def test_plain_tuples_still_become_nodes():
    res = BuildResult(True, [("m", "model", "success", "")])
    assert isinstance(res.nodes[0], DbtNode) and res.nodes[0][0] == "m" and res.counts.passed == 1


def test_a_real_build_counts_every_node(tmp_path):
    run_example(tmp_path)
    res = build_swapped(Lake(tmp_path / "lake"), progress=False, check=True)   # every node, tests included
    c = res.counts
    assert res.success and c.failed == c.errored == c.skipped == 0
    assert c.passed + c.warned == len(res.nodes) > 50
    assert {n.resource_type for n in res.nodes} >= {"model", "seed", "test"}
