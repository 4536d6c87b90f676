-- activation boundaries compared in their round, in execution order, with what came before them
with compared as (
    select *
    from {{ ref('stg_lake_dumps__boundary_results') }}
    where kind = 'activation'
      and status not in ('ISOLATED', 'not_compared')
)

select
    *,
    status not in ('EXACT', 'evidence_missing', 'MISSING') as is_compared_difference,
    status in ('evidence_missing', 'MISSING') as is_uncompared,
    coalesce(count(*) filter (where status <> 'EXACT' and status not in ('evidence_missing', 'MISSING')) over w, 0)
        as prior_differences,
    coalesce(count(*) filter (where status in ('evidence_missing', 'MISSING')) over w, 0)
        as prior_uncompared
from compared
window w as (partition by run_id, round order by position rows between unbounded preceding and 1 preceding)
