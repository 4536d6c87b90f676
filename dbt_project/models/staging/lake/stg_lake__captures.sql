select
    run_id, side, rank, capture_id, path, source_kind, sha256, size_bytes, schema_variant,
    profiler_level, schema_version, truncated, session_start_ns, session_end_ns, table_rows,
    kernel_count, host_op_count, status, reason
from {{ source('lake', 'captures') }}
