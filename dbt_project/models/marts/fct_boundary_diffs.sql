-- one row per run × round × compared activation boundary: exact gate, ULP figures, first divergence,
-- amplification relative to the round's first divergence. Incremental by dump run.
{{ tilake_per_run_incremental('dumps_registered_at', 'has_dumps') }},
{%- set due = tilake_todo_run_ids() %}
ordered as (
    select * from {{ ref('int_boundaries_ordered') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),

first_div as (
    -- first non-EXACT boundary whose predecessors are all EXACT (and all compared)
    select run_id, round,
           min(position) filter (where is_compared_difference) as first_diff_position,
           min(position) filter (where is_compared_difference and prior_uncompared = 0 and prior_differences = 0)
               as first_divergence_position
    from ordered
    group by run_id, round
),

base as (
    select o.run_id, o.round, o.max_abs_diff as first_max_abs_diff, o.boundary as first_divergence
    from ordered o
    join first_div f on f.run_id = o.run_id and f.round = o.round and o.position = f.first_divergence_position
)

select
    o.run_id,
    todo.registered_at,
    o.round,
    o.position,
    o.boundary,
    o.layer,
    o.op,
    o.status,
    o.reason,
    o.train_source,
    o.infer_source,
    o.train_shape,
    o.infer_shape,
    o.train_dtype,
    o.mismatch_count,
    o.mismatch_fraction,
    o.max_abs_diff,
    o.tensor_ulp,
    o.max_elem_ulp_significant,
    o.signed_mean_ulp,
    o.pos_count,
    o.neg_count,
    o.ulp_hist,
    o.rows_differing,
    o.rows_total,
    o.pattern,
    o.systematic_bias,
    o.diff_class,
    coalesce(o.position = f.first_divergence_position, false) as is_first_divergence,
    case
        when f.first_diff_position is null then 'none'
        when f.first_divergence_position is null then 'undetermined'
        else 'found'
    end as first_divergence_status,
    b.first_divergence,
    case when o.position >= f.first_divergence_position and b.first_max_abs_diff > 0
         then o.max_abs_diff / b.first_max_abs_diff end as growth_vs_first
from ordered o
join todo on todo.run_id = o.run_id
left join first_div f on f.run_id = o.run_id and f.round = o.round
left join base b on b.run_id = o.run_id and b.round = o.round
