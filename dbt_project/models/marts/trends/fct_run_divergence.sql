-- grain: one run with a dump analysis: the first divergence of round 0 (boundary, position, class,
-- status none | undetermined | found), the number of independent difference points (all rounds),
-- the max tensor-scale ULP over the boundaries compared in round 0, and how many were compared.
-- Incremental, keyed by run (dump_runs.created_at is the version); removed runs are deleted.
{{ tilake_per_run_incremental('dumps_registered_at', 'has_dumps', ['dump_verdict', 'dump_consistency']) }},

b as (
    select * from {{ ref('fct_boundary_diffs') }}
    where run_id in (select run_id from todo)
),

first_round as (
    select run_id, min(round) as round from b group by run_id
),

r0 as (
    select b.* from b join first_round f on f.run_id = b.run_id and f.round = b.round
),

summary as (
    select run_id,
           max(first_divergence_status) as first_divergence_status,
           max(boundary) filter (where is_first_divergence) as first_divergence_boundary,
           max(position) filter (where is_first_divergence) as first_divergence_position,
           max(layer) filter (where is_first_divergence) as first_divergence_layer,
           max(diff_class) filter (where is_first_divergence) as first_divergence_class,
           max(status) filter (where is_first_divergence) as first_divergence_exact_status,
           max(tensor_ulp) as max_tensor_ulp,
           count(*) as boundaries_compared,
           count(*) filter (where status <> 'EXACT') as boundaries_differing
    from r0
    group by run_id
),

points as (
    select run_id, count(*) as difference_points
    from {{ ref('fct_difference_points') }}
    where run_id in (select run_id from todo)
    group by run_id
)

select
    todo.run_id,
    todo.registered_at,
    todo.dump_verdict,
    todo.dump_consistency,
    coalesce(s.first_divergence_status, 'evidence_missing') as first_divergence_status,
    s.first_divergence_boundary,
    s.first_divergence_position,
    s.first_divergence_layer,
    s.first_divergence_class,
    s.first_divergence_exact_status,
    coalesce(p.difference_points, 0) as difference_points,
    s.max_tensor_ulp,
    coalesce(s.boundaries_compared, 0) as boundaries_compared,
    coalesce(s.boundaries_differing, 0) as boundaries_differing
from todo
left join summary s on s.run_id = todo.run_id
left join points p on p.run_id = todo.run_id
