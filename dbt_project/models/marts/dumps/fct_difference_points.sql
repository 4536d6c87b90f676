-- one row per independent difference point: a compared, differing activation boundary whose declared
-- inputs were all bitwise equal (EXACT, or isolated by an earlier round's stub). Incremental by dump run.
-- One home for each dump fact: which boundaries are independent points (role) and their downstream
-- amplification are computed once, by the Python analysis (tilake.diagnosis.analyze, written by
-- diagnosis/lake_rows.py); this mart reads them and only numbers the points.
{{ tilake_per_run_incremental('dumps_registered_at', 'has_dumps') }},
{%- set due = tilake_todo_run_ids() %}

points as (
    select *
    from {{ ref('fct_boundary_diffs') }}
    where
        role = 'independent_point'
        and {{ tilake_run_filter('run_id', due) }}
        and run_id in (select todo.run_id from todo)
)

select
    points.run_id,
    todo.registered_at,
    points.round,
    points.position,
    points.boundary,
    points.op,
    points.status,
    points.diff_class,
    points.max_abs_diff,
    points.tensor_ulp,
    points.mismatch_fraction,
    points.pattern,
    points.systematic_bias,
    points.is_first_divergence,
    points.downstream_differing,
    points.downstream_max_abs_diff,
    points.amplification,
    row_number() over (partition by points.run_id order by points.round, points.position) as point_no
from points
inner join todo on points.run_id = todo.run_id
