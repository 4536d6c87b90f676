-- grain: run × side × op_type. Ranked kernel population of each path (report sections 3 and 4). An op type
-- whose kernels sit in several comparison modules by their context (int_side_ops_fused_joined) is one row:
-- display_module is the module holding most of its calls, display_split lists every module with its calls.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},
{%- set due = tilake_todo_run_ids() %}
o as (
    select
        run_id, side, op_type,
        any_value(category) as category, any_value(module) as module,
        arg_max(display_module, struct_pack(c := calls, m := display_module)) as display_module,
        case when count(*) > 1
             then string_agg(display_module || ' ' || calls, ', ' order by calls desc, display_module) end
            as display_split,
        bool_or(fused) as fused, any_value(backend) as backend,
        sum(calls) as calls, sum(kernel_rows) as kernel_rows, sum(total_dur_ns) as total_dur_ns, max(ranks) as ranks,
        any_value(kernel_names) as kernel_names, any_value(example_kernel) as example_kernel,
        bool_or(op_type_derived) as op_type_derived, any_value(source_kinds) as source_kinds,
        min(joined_by) as joined_by, any_value(category_source) as category_source
    from {{ ref('int_side_ops_fused_joined') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
    group by run_id, side, op_type
)
select
    o.run_id, todo.registered_at, o.side, o.op_type, o.category, o.module, o.display_module, o.fused, o.backend,
    o.calls, o.kernel_rows, o.total_dur_ns, o.ranks, o.kernel_names, o.example_kernel,
    o.op_type_derived, o.source_kinds, o.joined_by,
    row_number() over (
        partition by o.run_id, o.side order by o.calls desc, o.total_dur_ns desc, o.op_type
    ) as rank_in_side,
    o.calls * 1.0 / sum(o.calls) over (partition by o.run_id, o.side) as call_share,
    o.category_source,
    o.display_split
from o
join todo using (run_id)
