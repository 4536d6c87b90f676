{#- The SELECT of each staging model over any relation of its raw table, so an incremental model can
    apply it to one run's files (macros/lake_scan.sql) and the staging view to all of them. -#}

{% macro tilake_stage_select(table, rel) %}
{%- if table == 'kernels' -%}
select
    run_id, side, rank, capture_id, source_kind, global_task_id, device_id, stream_id, task_id,
    start_ns, end_ns,
    -- a duration outside 0 .. 1 h per call (tilake.lake.schema.KERNEL_MAX_NS) is a damaged row that an older
    -- ingest let in (endNs = INT64_MAX: 237-year kernels): no timing, so no sum can overflow
    case when dur_ns >= 0 and cast(dur_ns as hugeint) <= 3600000000000 * cast(coalesce(call_count, 1) as hugeint)
        then dur_ns end as dur_ns,
    kernel_name, op_type, op_type_derived, accelerator, device_task_type,
    block_dim, input_shapes, input_dtypes, input_formats, output_shapes, output_dtypes,
    output_formats, connection_id, cann_api_name, host_op_id, host_op_name, callchain_id,
    coalesce(call_count, 1) as call_count, hf32_eligible
from {{ rel }}
{%- elif table == 'host_ops' -%}
select
    run_id, side, rank, capture_id, source_kind, host_op_id, name as host_op_name, start_ns, end_ns,
    global_tid, connection_id, sequence_number, input_shapes, input_dtypes, callchain_id,
    kernel_count, coalesce(call_count, 1) as call_count
from {{ rel }}
{%- elif table == 'call_stacks' -%}
select run_id, side, rank, capture_id, callchain_id, depth, frame
from {{ rel }}
{%- elif table == 'mstx_ranges' -%}
select run_id, side, rank, capture_id, message, start_ns, end_ns, global_tid
from {{ rel }}
{%- elif table == 'captures' -%}
select
    run_id, side, rank, capture_id, path, source_kind, sha256, size_bytes, schema_variant,
    profiler_level, schema_version, truncated, session_start_ns, session_end_ns, table_rows,
    kernel_count, host_op_count, status, reason, backend, step_source, steps_kept, invalid_rows, rank_source, worker
from {{ rel }}
{%- elif table == 'run_metrics' -%}
select run_id, step, metric, value, source_path, line_no, format
from {{ rel }}
{%- elif table == 'source_notes' -%}
select run_id, model_family, module, side, path, "function" as function_name, kernel
from {{ rel }}
{%- elif table == 'runs' -%}
-- one row per run (latest registration wins if a run folder holds several files)
select
    run_id, model_id, coalesce(model_family, 'unknown') as model_family, step, script_path,
    collection_method, train_backend, infer_backend, parallel_config, rl_config, tool_versions,
    tags, host, source_path, kind, created_at, phases, settings, log_path
from {{ rel }}
qualify row_number() over (partition by run_id order by created_at desc nulls last) = 1
{%- else -%}
{{ exceptions.raise_compiler_error("tilake_stage_select: no staging SELECT for lake table " ~ table) }}
{%- endif -%}
{% endmacro %}
