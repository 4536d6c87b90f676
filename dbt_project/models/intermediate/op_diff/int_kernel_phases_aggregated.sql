-- grain: run × side × rank × phase × phase_source × pass × op_type × kernel_name × dtype/format/HF32
-- signature × context module: kernel rows with their phase (macros/phases.sql, seeds/phase_rules.csv) and the
-- module their context names (macros/contexts.sql, seeds/context_rules.csv). The only model that reads kernel
-- rows; incremental by run (a run is read again only when it is new or re-ingested).
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %},
phased as (
    {{ tilake_kernel_phases(
        '(select k.* from ' ~ tilake_staged('kernels', due) ~ ' k join todo on todo.run_id = k.run_id)',
        tilake_staged('mstx_ranges', due)) }}
),
placed as (
    {{ tilake_kernel_contexts('phased', tilake_staged('call_stacks', due), tilake_staged('mstx_ranges', due)) }}
)
select
    k.run_id, k.side, k.rank, k.phase, k.phase_source, k.pass, k.op_type, k.kernel_name, k.context_module,
    {{ tilake_dtype_sig('k.input_dtypes') }} as input_dtypes,
    {{ tilake_format_sig('k.input_formats') }} as input_formats,
    {{ tilake_dtype_sig('k.output_dtypes') }} as output_dtypes,
    {{ tilake_format_sig('k.output_formats') }} as output_formats,
    case when upper(k.hf32_eligible) in ('YES', 'NO') then upper(k.hf32_eligible) end as hf32_eligible,
    any_value(todo.registered_at) as registered_at,
    sum(k.call_count) as calls,
    count(*) as kernel_rows,
    sum(coalesce(k.dur_ns, 0)) as total_dur_ns,
    bool_or(k.op_type_derived) as op_type_derived,
    string_agg(distinct k.source_kind, ',' order by k.source_kind) as source_kinds,
    -- task type (AI_CORE, AI_VECTOR_CORE, MIX_AIV, AI_CPU, COMMUNICATION, GPU, CPU): the catalog fallback
    min(k.accelerator) as accelerator,
    min(k.input_shapes) as example_input_shapes,
    min(k.phase_mark) as example_phase_mark,
    min(k.context_rule) as context_rule
from placed k
join todo on todo.run_id = k.run_id
group by all
