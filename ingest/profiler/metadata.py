"""What a capture folder says about the job beyond its kernels: parallel layout and leftover files.

Format facts (``reference/ascend-profiler-format.md`` §2.3; real files in
``fixtures/real_public/msinsight_st_level2/rank_*_ascend_pt/profiler_metadata.json`` and
``fixtures/profiler/msinsight/server/src/test/test_data/metadata/profiler_metadata.json``):
``profiler_metadata.json`` sits in the ``*_ascend_pt`` folder and holds ``distributed_args``
(Megatron: ``tensor_model_parallel_size``, ``pipeline_model_parallel_size``, ``data_parallel_size``,
``context_parallel_size``, ``expert_model_parallel_size``, ``sequence_parallel``, ``rank``,
``world_size``) and ``parallel_group_info`` (HCCL group id → ``group_name`` tp/pp/dp_cp/mp/…,
``group_rank``, ``global_ranks``), also copied into the DB's ``META_DATA`` by torch_npu.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from tilake.ingest.inputs import skip_special

# distributed_args key → short name used in runs.parallel_config
_ARGS = (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
         ("data_parallel_size", "dp"), ("context_parallel_size", "cp"), ("expert_model_parallel_size", "ep"),
         ("sequence_parallel", "sp"), ("world_size", "world_size"))
# files torch_npu writes beside the kernel data that hold no kernels (reference §3.1 tree)
_NO_KERNELS = ("analysis.db", "communication.json", "communication_matrix.json", "step_trace_time.csv",
               "memory_record.csv", "operator_memory.csv", "npu_module_mem.csv", "static_op_mem.csv",
               "trace_view.json", "l2_cache.csv", "data_preprocess.csv", "task_time.csv")


def read_metadata(pt_dir: Optional[Path]) -> Dict[str, Any]:
    """The ``profiler_metadata.json`` of a ``*_ascend_pt`` folder as a dict; ``{}`` when absent or unreadable
    (the metadata is optional: torch_npu writes it only when ``add_metadata`` or Megatron/MindSpeed did)."""
    if pt_dir is None:
        return {}
    p = Path(pt_dir) / "profiler_metadata.json"
    if skip_special(p, "profiler_metadata.json sidecar"):
        return {}
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def parallel_layout(meta: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """``{"tp": 1, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "sp": False, "world_size": 4}`` from
    ``distributed_args`` (only the keys present); None when the metadata has none."""
    args = meta.get("distributed_args")
    if not isinstance(args, dict):
        return None
    out = {short: args[key] for key, short in _ARGS if key in args}
    return out or None


def parallel_groups(meta: Dict[str, Any]) -> Optional[Dict[str, List[int]]]:
    """``{"tp": [0], "pp": [0, 2], "dp_cp": [0, 1], …}``: this rank's communication groups by name
    (``parallel_group_info``); None when absent."""
    info = meta.get("parallel_group_info")
    if not isinstance(info, dict):
        return None
    out = {}
    for gid, g in sorted(info.items()):
        if isinstance(g, dict) and isinstance(g.get("global_ranks"), list):
            out[str(g.get("group_name") or gid)] = list(g["global_ranks"])
    return out or None


def leftover_files(pt_dir: Path) -> List[str]:
    """Names (relative to ``pt_dir``) of the files a capture folder without kernel data still holds,
    e.g. ``ASCEND_PROFILER_OUTPUT/analysis.db`` — communication and step summaries, no kernel rows."""
    out_dir = Path(pt_dir) / "ASCEND_PROFILER_OUTPUT"
    found = [f"ASCEND_PROFILER_OUTPUT/{n}" for n in _NO_KERNELS if (out_dir / n).is_file()]
    found += sorted(p.name for p in Path(pt_dir).glob("profiler_*.json"))
    return found


def empty_reason(pt_dir: Path) -> str:
    """The capture-health reason of a folder with no kernel data: what it holds instead, or that it is empty."""
    files = leftover_files(pt_dir)
    if not any(f.startswith("ASCEND_PROFILER_OUTPUT/") for f in files):
        return "empty *_ascend_pt folder (no DB, CSV or raw data)"
    return ("kernel data missing: no ascend_pytorch_profiler*.db, kernel_details.csv, op_statistic.csv or "
            "api_statistic.csv; the folder holds only " + ", ".join(files) +
            " (communication/step summaries, no kernels)")
