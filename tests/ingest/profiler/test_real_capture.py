"""The real 4-rank Megatron training capture (issue 12 item 8, discovery part).

Input: ``fixtures/real_public/msinsight_st_level2`` (text export, Level2, TP1 PP2 DP2, torch_npu 2.7.1,
CANN 8.3.RC1; see ``fixtures/real_public/PROVENANCE.md``). Ranks 0 and 2 hold ``kernel_details.csv``
(2,463 + 2,587 rows, Step Id 13); ranks 1 and 3 hold only ``analysis.db``, ``communication*.json`` and
``step_trace_time.csv`` (their kernel data was not in the public snapshot).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from profiler_helpers import raw

from tilake.ingest.profiler.metadata import parallel_groups, parallel_layout, read_metadata
from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile

REAL = "fixtures/real_public/msinsight_st_level2"


def _csv_truth(root: Path):
    rows, types = 0, set()
    for kd in sorted(root.glob("rank_*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")):
        with open(kd, newline="", encoding="utf-8-sig") as f:
            for r in csv.DictReader(f):
                rows += 1
                types.add(r["Type"])
    return rows, types


@pytest.fixture(scope="module")
def real_run(shared_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    lake = Lake(tmp / "lake")
    res = run_profile(None, lake, "real", tmp / "out", lang="en", train=[shared_dir / REAL], allow_missing=True,
                      progress=False)
    return lake, res


def test_counts_match_the_csvs_exactly(real_run, shared_dir):
    lake, res = real_run
    rows, types = _csv_truth(shared_dir / REAL)
    got = raw(lake.root, "kernels", "true").aggregate("sum(call_count), count(DISTINCT op_type)").fetchone()
    assert got == (rows, len(types)) == (5050, 53)
    assert set(raw(lake.root, "kernels", "true").aggregate("list(DISTINCT op_type)").fetchone()[0]) == types
    per = sorted(raw(lake.root, "kernels", "true").aggregate("rank, step, sum(call_count)").fetchall())
    assert per == [(0, 13, 2463), (2, 13, 2587)]  # Step Id 13 on both ranks with kernel data


def test_ranks_without_kernel_data_say_what_they_hold(real_run):
    lake, res = real_run
    cols = raw(lake.root, "captures", "false").columns
    caps = {r[cols.index("rank")]: dict(zip(cols, r)) for r in raw(lake.root, "captures", "true").fetchall()}
    assert [caps[r]["status"] for r in range(4)] == ["ok", "evidence_missing", "ok", "evidence_missing"]
    for r in (1, 3):
        why = caps[r]["reason"]
        assert "empty" not in why and why.startswith("kernel data missing")
        for f in ("analysis.db", "communication.json", "communication_matrix.json", "step_trace_time.csv"):
            assert f"ASCEND_PROFILER_OUTPUT/{f}" in why
        assert "step_trace_time.csv Step lists step(s) [13]" in why


def test_parallel_layout_is_read_from_profiler_metadata(real_run, shared_dir):
    lake, res = real_run
    cfg = json.loads(raw(lake.root, "runs", "true").aggregate("any_value(parallel_config)").fetchone()[0])
    assert cfg == {"tp": 1, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "sp": False, "world_size": 4}
    groups = dict(raw(lake.root, "captures", "true").aggregate("rank, parallel_groups").fetchall())
    assert json.loads(groups[2]) == {"default_group": [0, 1, 2, 3], "dp": [2, 3], "dp_cp": [2, 3], "mp": [0, 2],
                                     "tp": [2], "pp": [0, 2], "embd": [0, 2]}
    report = res.report_path.read_text(encoding="utf-8")
    assert "| Parallel config | TP=1, PP=2, EP=1, DP=2, CP=1, SP=False, WORLD_SIZE=4 |" in report
    assert "kernel data missing" in report


def test_metadata_of_the_8_rank_example(shared_dir):
    md = read_metadata(shared_dir / "fixtures/profiler/msinsight/server/src/test/test_data/metadata")
    assert parallel_layout(md)["tp"] == 2 and parallel_layout(md)["pp"] == 2
    assert parallel_groups(md) is not None and parallel_layout({}) is None and read_metadata(None) == {}
