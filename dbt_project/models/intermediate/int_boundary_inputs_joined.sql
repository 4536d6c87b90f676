-- each activation boundary with the statuses of its declared inputs in the same round
-- (an input isolated by a stub counts as equal)
with rows as (
    select run_id, round, boundary, position, status, inputs
    from {{ ref('stg_lake_dumps__boundary_results') }}
    where kind = 'activation'
),

edges as (
    select run_id, round, boundary, unnest(from_json(coalesce(inputs, '[]'), '["VARCHAR"]')) as input_boundary
    from rows
)

select
    r.run_id,
    r.round,
    r.boundary,
    count(e.input_boundary) as n_inputs,
    count(e.input_boundary) filter (where i.status in ('EXACT', 'ISOLATED')) as n_inputs_equal,
    count(e.input_boundary) = count(e.input_boundary) filter (where i.status in ('EXACT', 'ISOLATED'))
        as inputs_all_equal
from rows r
left join edges e on e.run_id = r.run_id and e.round = r.round and e.boundary = r.boundary
left join rows i on i.run_id = e.run_id and i.round = e.round and i.boundary = e.input_boundary
group by r.run_id, r.round, r.boundary
