-- grain: run × side × op_type × context_module: kernel calls of the compared phases (int_phases_selected)
-- summed over ranks and kernel names, split by the module the kernels' context names (macros/contexts.sql;
-- NULL context_module = unknown). int_side_ops_fused_joined shows a basic op in the row its context names.
-- Built from the phase aggregate (int_kernel_phases_aggregated, the only model reading kernel rows);
-- incremental by run.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select
    k.run_id, k.side, k.op_type, k.context_module,
    any_value(todo.registered_at) as registered_at,
    sum(k.calls) as calls,
    sum(k.kernel_rows) as kernel_rows,
    sum(k.total_dur_ns) as total_dur_ns,
    count(distinct k.rank) as ranks,
    min(k.context_rule) as context_rule
from {{ ref('int_kernel_phases_aggregated') }} k
join todo on todo.run_id = k.run_id
join {{ ref('int_phases_selected') }} s on s.run_id = k.run_id and s.side = k.side
where {{ tilake_run_filter('k.run_id', due) }}
  and (s.compares_all or list_contains(s.compared_phases, k.phase))
group by k.run_id, k.side, k.op_type, k.context_module
