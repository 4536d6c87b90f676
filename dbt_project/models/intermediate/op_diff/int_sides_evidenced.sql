-- grain: run × side (train, infer). Evidence for the side: device | cpu_ops | host_fallback | evidence_missing,
-- with rank coverage (ranks with usable captures vs all ranks seen) and the reasons otherwise.
with sides as (
    select r.run_id, s.side
    from {{ ref('int_runs_versioned') }} r
    cross join (values ('train'), ('infer')) s (side)
    where r.has_profile
),
caps as (
    select run_id, side,
           count(distinct rank) as ranks_seen,
           count(distinct rank) filter (where status in ('ok', 'host_fallback')) as ranks_usable,
           -- CPU-only torch traces (schema_variant …+cpu_only): CPU ops stand for kernels, labelled cpu_ops
           bool_or(status = 'ok' and coalesce(schema_variant, '') not like '%+cpu_only%') as any_device,
           bool_or(status = 'ok') as any_ok,
           bool_or(status = 'host_fallback') as any_host_fallback,
           list_sort(list(distinct rank) filter (where status not in ('ok', 'host_fallback'))) as ranks_missing,
           string_agg(distinct status || ': ' || reason, ' | ' order by status || ': ' || reason)
               filter (where status not in ('ok')) as reasons,
           count(*) as captures,
           bool_or(coalesce(truncated, false)) as any_truncated,
           string_agg(distinct profiler_level, ',' order by profiler_level) as profiler_levels
    from {{ ref('int_captures_collected') }}
    group by run_id, side
)
select
    s.run_id, s.side,
    case when c.any_device then 'device'
         when c.any_ok then 'cpu_ops'
         when c.any_host_fallback then 'host_fallback'
         else 'evidence_missing' end as evidence,
    coalesce(c.ranks_seen, 0) as ranks_seen,
    coalesce(c.ranks_usable, 0) as ranks_usable,
    c.ranks_missing,
    coalesce(c.reasons, case when c.run_id is null then 'no ' || s.side || ' capture was found' end) as reasons,
    coalesce(c.captures, 0) as captures,
    coalesce(c.any_truncated, false) as any_truncated,
    c.profiler_levels
from sides s
left join caps c using (run_id, side)
