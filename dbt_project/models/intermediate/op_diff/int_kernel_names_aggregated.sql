-- grain: run × side × op_type × kernel_name: kernel rows summed over ranks. The only foundation model
-- that reads kernel rows; incremental by run (a run is read again only when it is new or re-ingested,
-- see macros/trends_incremental.sql), so adding one run to a lake of N reads one run's kernels.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select
    k.run_id, k.side, k.op_type, k.kernel_name,
    any_value(todo.registered_at) as registered_at,
    sum(k.call_count) as calls,
    count(*) as kernel_rows,
    sum(coalesce(k.dur_ns, 0)) as total_dur_ns,
    count(distinct k.rank) as ranks,
    bool_or(k.op_type_derived) as op_type_derived,
    string_agg(distinct k.source_kind, ',' order by k.source_kind) as source_kinds,
    -- task type (AI_CORE, AI_VECTOR_CORE, MIX_AIV, AI_CPU, COMMUNICATION, GPU, CPU): the catalog fallback
    min(k.accelerator) as accelerator
from {{ tilake_staged('kernels', due) }} k
join todo on todo.run_id = k.run_id
group by k.run_id, k.side, k.op_type, k.kernel_name
