"""msprof's own export ``PROF_*/mindstudio_profiler_output/msprof_<ts>.db`` (service profiling of vllm-ascend:
no torch_npu layer, CANN tables only, ``RANK_DEVICE_MAP.rankId`` -1).

No real msprof export is in ``shared/``: the input is the real torch_npu DB of
``fixtures/profiler/msinsight/test/data/pytorch/db/level2`` with its framework tables dropped (``PYTORCH_API``,
``CONNECTION_IDS``, ``PYTORCH_CALLCHAINS``, ``MEMORY_RECORD``, ``OP_MEMORY``, ``STEP_TIME``) and ``rankId`` set to
-1, which is what msprof writes (its DB holds the CANN tables ``TASK``, ``COMPUTE_TASK_INFO``, ``CANN_API``,
``COMMUNICATION_OP``, ``STRING_IDS``, ``RANK_DEVICE_MAP`` …).
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import duckdb
from profiler_helpers import FIXTURE_DB

from tilake.ingest.profiler.discover import discover
from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile

SRC = FIXTURE_DB + "/level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
FRAMEWORK = ("PYTORCH_API", "CONNECTION_IDS", "PYTORCH_CALLCHAINS", "MEMORY_RECORD", "OP_MEMORY", "STEP_TIME")


def _msprof_db(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    for t in FRAMEWORK:
        con.execute(f"DROP TABLE IF EXISTS {t}")
    con.execute("UPDATE RANK_DEVICE_MAP SET rankId = -1")
    con.commit()
    con.close()
    return dst


def test_msprof_export_is_found_and_ingested_without_host_ops(shared_dir, tmp_path):
    src = shared_dir / SRC
    root = tmp_path / "po"
    pt = root / "e2e" / "host_1_20250101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    pt.mkdir(parents=True)
    shutil.copyfile(src, pt / "ascend_pytorch_profiler_0.db")
    _msprof_db(src, root / "agent_loop_rollout_replica_0" / "PROF_000001_20250101000000000_ABCDEF" /
               "mindstudio_profiler_output" / "msprof_20250101000000.db")
    caps = discover(root)
    infer = [c for c in caps if c.side == "infer"]
    assert [(c.kind, c.rank_source, c.worker, c.device_id) for c in infer] == [
        ("db", "none", "PROF_000001_20250101000000000_ABCDEF", 0)]
    lake = Lake(tmp_path / "lake")
    res = run_profile(root, lake, "msprof", tmp_path / "out", lang="en", progress=False)
    assert res.evidence["infer"] == "device"
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    side, kernels, hosts, reason = con.execute(
        "select side, kernel_count, host_op_count, reason from fct_capture_health where side='infer'").fetchone()
    train_k = con.execute("select kernel_count from fct_capture_health where side='train'").fetchone()[0]
    assert kernels == train_k > 0 and hosts == 0
    assert "host ops (PYTORCH_API) and call stacks are absent" in reason
