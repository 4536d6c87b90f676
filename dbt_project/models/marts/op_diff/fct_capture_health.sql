-- grain: one ingested capture (profiler DB file or text export) per run, side and rank.
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
select
    c.run_id, c.side, c.rank, c.capture_id, c.path, c.source_kind, c.sha256, c.size_bytes,
    c.schema_variant, c.profiler_level, c.schema_version, c.truncated, c.table_rows,
    c.kernel_count, c.host_op_count, c.status, c.reason,
    c.session_start_ns, c.session_end_ns, c.step_source, c.steps_kept, c.invalid_rows,
    c.rank_source, c.worker as role
from {{ ref('int_captures_collected') }} c
