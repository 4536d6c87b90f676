-- grain: run × side × op_type × kernel_name: kernel rows of the compared phases (int_phases_selected:
-- by default the actor's log-prob forward and the rollout prefill) summed over ranks. Built from the
-- phase aggregate (int_kernel_phases_aggregated, the only model reading kernel rows); incremental by run.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select
    k.run_id, k.side, k.op_type, k.kernel_name,
    {{ tilake_kernel_sums() }},
    bool_or(k.op_type_derived) as op_type_derived,
    string_agg(distinct k.source_kinds, ',' order by k.source_kinds) as source_kinds,
    -- task type (AI_CORE, AI_VECTOR_CORE, MIX_AIV, AI_CPU, COMMUNICATION, GPU, CPU): the catalog fallback
    min(k.accelerator) as accelerator
{{ tilake_compared_kernels(due) }}
group by k.run_id, k.side, k.op_type, k.kernel_name
