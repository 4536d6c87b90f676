-- grain: run × side × kernel_name (× op_type): runtime kernel counts (*_runtime_ops.json).
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select a.run_id, todo.registered_at, a.side, a.kernel_name, a.op_type, c.category, c.module,
       a.calls, a.total_dur_ns, a.ranks, c.category_source, a.op_type_derived
from {{ ref('int_kernel_names_aggregated') }} a
left join {{ ref('int_op_types_catalogued') }} c
  on c.op_type is not distinct from a.op_type and c.kernel_name is not distinct from a.kernel_name
join todo using (run_id)
where {{ tilake_run_filter('a.run_id', due) }}
