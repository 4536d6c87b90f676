"""Canonical schemas of the lake's ``raw/`` tables.

Each table is a folder ``raw/<table>/`` holding Hive-style partitions
``run_id=<id>[/side=<side>/rank=<rank>]/part-*.parquet`` plus one zero-row ``_empty.parquet``
that fixes the schema (so dbt sources resolve on an empty lake). The partition columns are
also stored inside every file; readers use ``hive_partitioning=false``.

Units: every time is integer nanoseconds (``*_ns``), sizes are bytes.
Adding a column: append it here; ``Lake.ensure`` rewrites older partitions with the column as NULL
(the dbt sources read with ``union_by_name=false`` and need every file to carry every column).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

Column = Tuple[str, str]

TABLES: Dict[str, List[Column]] = {
    # one row per run (partition: run_id)
    "runs": [
        ("run_id", "VARCHAR"), ("model_id", "VARCHAR"), ("model_family", "VARCHAR"),
        ("step", "INTEGER"), ("script_path", "VARCHAR"), ("collection_method", "VARCHAR"),
        ("train_backend", "VARCHAR"), ("infer_backend", "VARCHAR"),
        ("parallel_config", "VARCHAR"),  # JSON {"tp":..,"pp":..,"ep":..}
        ("rl_config", "VARCHAR"),        # JSON of the parsed launch-script config
        ("tool_versions", "VARCHAR"),    # JSON {"torch_npu":..,"cann":..,...}
        ("tags", "VARCHAR"),             # JSON {"key":"value"}
        ("host", "VARCHAR"), ("source_path", "VARCHAR"), ("kind", "VARCHAR"),
        ("created_at", "TIMESTAMP"),
    ],
    # one row per ingested source (DB file, text export folder, unparsed raw folder, torch trace)
    "captures": [
        ("run_id", "VARCHAR"), ("side", "VARCHAR"), ("rank", "INTEGER"),
        ("capture_id", "VARCHAR"), ("path", "VARCHAR"), ("source_kind", "VARCHAR"),
        ("sha256", "VARCHAR"), ("size_bytes", "BIGINT"), ("schema_variant", "VARCHAR"),
        ("profiler_level", "VARCHAR"), ("schema_version", "VARCHAR"),
        ("truncated", "BOOLEAN"), ("session_start_ns", "BIGINT"), ("session_end_ns", "BIGINT"),
        ("table_rows", "VARCHAR"),       # JSON {table: rows}
        ("kernel_count", "BIGINT"), ("host_op_count", "BIGINT"),
        ("status", "VARCHAR"),           # ok | evidence_missing | unparsed | error
        ("reason", "VARCHAR"),
        ("backend", "VARCHAR"),          # ascend_db | ascend_text | torch_trace
    ],
    # one row per device kernel (TASK ⋈ COMPUTE_TASK_INFO, plus COMMUNICATION_OP) or text row
    "kernels": [
        ("run_id", "VARCHAR"), ("side", "VARCHAR"), ("rank", "INTEGER"),
        ("capture_id", "VARCHAR"), ("source_kind", "VARCHAR"),
        ("global_task_id", "BIGINT"), ("device_id", "INTEGER"), ("stream_id", "INTEGER"),
        ("task_id", "BIGINT"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"), ("dur_ns", "BIGINT"),
        ("kernel_name", "VARCHAR"), ("op_type", "VARCHAR"), ("op_type_derived", "BOOLEAN"),
        ("accelerator", "VARCHAR"), ("device_task_type", "VARCHAR"), ("block_dim", "BIGINT"),
        ("input_shapes", "VARCHAR"), ("input_dtypes", "VARCHAR"), ("input_formats", "VARCHAR"),
        ("output_shapes", "VARCHAR"), ("output_dtypes", "VARCHAR"), ("output_formats", "VARCHAR"),
        ("connection_id", "BIGINT"), ("cann_api_name", "VARCHAR"),
        ("host_op_id", "BIGINT"), ("host_op_name", "VARCHAR"), ("callchain_id", "BIGINT"),
        ("call_count", "BIGINT"),        # 1 per device row; >1 for aggregated text rows
    ],
    # one row per framework op (PYTORCH_API type 50001) or host-side API statistic row
    "host_ops": [
        ("run_id", "VARCHAR"), ("side", "VARCHAR"), ("rank", "INTEGER"),
        ("capture_id", "VARCHAR"), ("source_kind", "VARCHAR"),
        ("host_op_id", "BIGINT"), ("name", "VARCHAR"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"),
        ("global_tid", "BIGINT"), ("connection_id", "BIGINT"), ("sequence_number", "BIGINT"),
        ("input_shapes", "VARCHAR"), ("input_dtypes", "VARCHAR"), ("callchain_id", "BIGINT"),
        ("kernel_count", "BIGINT"), ("call_count", "BIGINT"),
    ],
    # one row per frame of a PYTORCH_CALLCHAINS stack
    "call_stacks": [
        ("run_id", "VARCHAR"), ("side", "VARCHAR"), ("rank", "INTEGER"),
        ("capture_id", "VARCHAR"), ("callchain_id", "BIGINT"), ("depth", "INTEGER"),
        ("frame", "VARCHAR"),
    ],
    # one row per MSTX range (verl phase markers: update_actor, generate_sequences, ...)
    "mstx_ranges": [
        ("run_id", "VARCHAR"), ("side", "VARCHAR"), ("rank", "INTEGER"),
        ("capture_id", "VARCHAR"), ("message", "VARCHAR"), ("start_ns", "BIGINT"),
        ("end_ns", "BIGINT"), ("global_tid", "BIGINT"),
    ],
    # per-LLM-family source-path notes (models/callstack_notes.yaml) recorded with the run
    "source_notes": [
        ("run_id", "VARCHAR"), ("model_family", "VARCHAR"), ("module", "VARCHAR"),
        ("side", "VARCHAR"), ("path", "VARCHAR"), ("function", "VARCHAR"), ("kernel", "VARCHAR"),
    ],
}

# partition columns below run_id, per table
PARTITIONS: Dict[str, List[str]] = {
    "runs": [],
    "captures": ["side", "rank"],
    "kernels": ["side", "rank"],
    "host_ops": ["side", "rank"],
    "call_stacks": ["side", "rank"],
    "mstx_ranges": ["side", "rank"],
    "source_notes": [],
}

# the tables a profiler ingest owns (replaced together when a run is re-ingested)
PROFILE_TABLES = ["runs", "captures", "kernels", "host_ops", "call_stacks", "mstx_ranges", "source_notes"]


from tilake.lake.dump_schema import DUMP_PARTITIONS, DUMP_TABLES  # noqa: E402

TABLES.update(DUMP_TABLES)
PARTITIONS.update(DUMP_PARTITIONS)


def register(table: str, columns: List[Column], partitions: List[str]) -> None:
    """Register another raw table (used by the dump reader). Idempotent."""
    TABLES[table] = columns
    PARTITIONS[table] = partitions


def select_list(table: str) -> str:
    """``CAST(col AS type) AS col, ...`` for every column of ``table`` (schema enforcement)."""
    return ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in TABLES[table])


def null_list(columns: List[Column]) -> str:
    """``CAST(NULL AS type) AS col, ...`` for the given ``(name, type)`` columns (empty schema
    relations, columns added to old partitions)."""
    return ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in columns)


def ddl(table: str, name: str = None) -> str:
    """``CREATE TABLE`` statement for ``table`` (under ``name`` if given)."""
    cols = ", ".join(f'"{c}" {t}' for c, t in TABLES[table])
    return f'CREATE TABLE "{name or table}" ({cols})'
