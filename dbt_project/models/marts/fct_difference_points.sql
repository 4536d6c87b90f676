-- one row per independent difference point: a compared, differing activation boundary whose declared
-- inputs were all bitwise equal (EXACT, or isolated by an earlier round's stub). Incremental by dump run.
{{ tilake_per_run_incremental('dumps_registered_at', 'has_dumps') }},
{%- set due = tilake_todo_run_ids() %}
diffs as (
    select * exclude (registered_at) from {{ ref('fct_boundary_diffs') }}
    where status in ('NOT_EXACT', 'DTYPE_DIFF', 'NONFINITE')
      and {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),

inputs as (
    select * from {{ ref('int_boundary_inputs_joined') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),

downstream as (
    -- amplification: largest difference after the point in the same round
    select d.run_id, d.round, d.boundary,
           max(x.max_abs_diff) as downstream_max_abs_diff,
           count(x.boundary) as downstream_differing
    from diffs d
    left join diffs x on x.run_id = d.run_id and x.round = d.round and x.position > d.position
    group by d.run_id, d.round, d.boundary
)

select
    d.run_id,
    todo.registered_at,
    d.round,
    d.position,
    d.boundary,
    d.op,
    d.status,
    d.diff_class,
    d.max_abs_diff,
    d.tensor_ulp,
    d.mismatch_fraction,
    d.pattern,
    d.systematic_bias,
    d.is_first_divergence,
    s.downstream_differing,
    s.downstream_max_abs_diff,
    case when d.max_abs_diff > 0 then s.downstream_max_abs_diff / d.max_abs_diff end as amplification,
    row_number() over (partition by d.run_id order by d.round, d.position) as point_no
from diffs d
join todo on todo.run_id = d.run_id
join inputs i on i.run_id = d.run_id and i.round = d.round and i.boundary = d.boundary
left join downstream s on s.run_id = d.run_id and s.round = d.round and s.boundary = d.boundary
where i.inputs_all_equal
