-- grain: run × side × op_type. Ranked kernel population of each path (report sections 3 and 4).
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select
    o.run_id, todo.registered_at, o.side, o.op_type, o.category, o.module, o.display_module, o.fused, o.backend,
    o.calls, o.kernel_rows, o.total_dur_ns, o.ranks, o.kernel_names, o.example_kernel,
    o.op_type_derived, o.source_kinds, o.joined_by,
    row_number() over (
        partition by o.run_id, o.side order by o.calls desc, o.total_dur_ns desc, o.op_type
    ) as rank_in_side,
    o.calls * 1.0 / sum(o.calls) over (partition by o.run_id, o.side) as call_share,
    o.category_source
from {{ ref('int_side_ops_fused_joined') }} o
join todo using (run_id)
where {{ tilake_run_filter('o.run_id', due) }}
