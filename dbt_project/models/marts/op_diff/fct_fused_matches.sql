-- grain: run × fused op on one side × module: which unfused ops of the other side it was joined to.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},
{%- set due = tilake_todo_run_ids() %}
fused as (
    select run_id, side as fused_side, op_type as fused_op, display_module as module, replaces, calls as fused_calls
    from {{ ref('int_side_ops_fused_joined') }}
    where fused and replaces is not null and replaces <> ''
      and {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),
other as (
    select run_id, side, display_module as module, op_type, base_op, fused, calls
    from {{ ref('int_side_ops_fused_joined') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),
agg as (
select
    f.run_id, f.fused_side, f.fused_op, f.module, f.replaces, f.fused_calls,
    case f.fused_side when 'train' then 'infer' else 'train' end as other_side,
    list_sort(list(distinct o.op_type) filter (where o.op_type is not null and not o.fused)) as other_unfused_ops,
    list_sort(list(distinct o.op_type) filter (where o.op_type is not null and o.fused)) as other_fused_ops,
    coalesce(sum(o.calls) filter (where not o.fused), 0) as other_unfused_calls,
    list_sort(list(distinct o.base_op) filter (where o.base_op is not null)) as other_base_ops
from fused f
left join other o
  on o.run_id = f.run_id and o.module = f.module and o.side <> f.fused_side
group by all
)
select agg.*, todo.registered_at,
       len(list_filter(string_split(replaces, '+'), x -> list_contains(other_base_ops, x))) as replaced_steps_present,
       len(string_split(replaces, '+')) as replaced_steps
from agg
join todo using (run_id)
