-- grain: run × side × op_type × context_module: kernel calls of the compared phases (int_phases_selected)
-- summed over ranks and kernel names, split by the module the kernels' context names (macros/contexts.sql;
-- NULL context_module = unknown). int_side_ops_fused_joined shows a basic op in the row its context names.
-- Built from the phase aggregate (int_kernel_phases_aggregated, the only model reading kernel rows);
-- incremental by run.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select
    k.run_id, k.side, k.op_type, k.context_module,
    {{ tilake_kernel_sums() }},
    min(k.context_rule) as context_rule
{{ tilake_compared_kernels(due) }}
group by k.run_id, k.side, k.op_type, k.context_module
