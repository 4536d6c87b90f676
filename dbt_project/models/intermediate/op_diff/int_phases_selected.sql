-- grain: run × side (train, infer): the phases compared (runs.phases, docs/phases.md) and why.
-- Default (runs.phases NULL): train actor_log_prob, infer prefill — the pair whose numbers become the
-- log-prob mismatch. 'all': every kernel. 'side:phase,…': those phases (a side not named keeps its default).
-- A side where none of its chosen phases has a kernel (no phase marks, or none of that phase) compares
-- every kernel, and `scope` says so.
with runs as (
    select run_id, nullif(trim(coalesce(phases, '')), '') as phases
    from {{ ref('stg_profiler__runs') }}
),
sides as (
    select r.run_id, r.phases, s.side,
           case s.side when 'train' then 'actor_log_prob' else 'prefill' end as default_phase
    from runs r cross join (values ('train'), ('infer')) s (side)
),
asked as (
    select s.run_id, s.side, s.phases,
           coalesce(s.phases, 'default') = 'all' as ask_all,
           case when coalesce(s.phases, 'default') in ('default', 'all') then [s.default_phase]
                else coalesce(nullif(list_transform(
                         list_filter(string_split(s.phases, ','), x -> split_part(trim(x), ':', 1) = s.side),
                         x -> trim(split_part(trim(x), ':', 2))), []), [s.default_phase]) end as wanted
    from sides s
),
seen as (
    select run_id, side,
           list_sort(list(distinct phase) filter (where phase is not null)) as phases_seen,
           sum(calls) filter (where phase_source = 'mark') as mark_calls,
           sum(calls) as all_calls
    from {{ ref('int_kernel_phases_aggregated') }}
    group by run_id, side
),
hit as (
    select a.run_id, a.side, sum(p.calls) as wanted_calls
    from asked a
    join {{ ref('int_kernel_phases_aggregated') }} p
      on p.run_id = a.run_id and p.side = a.side and list_contains(a.wanted, p.phase)
    group by a.run_id, a.side
)
select
    a.run_id, a.side,
    coalesce(a.phases, 'default') as requested,
    a.wanted as wanted_phases,
    coalesce(s.phases_seen, []) as phases_seen,
    coalesce(s.mark_calls, 0) > 0 as has_marks,
    a.ask_all or coalesce(h.wanted_calls, 0) = 0 as compares_all,
    case when a.ask_all then 'all kernels (--phases all)'
         when coalesce(s.mark_calls, 0) = 0 and coalesce(h.wanted_calls, 0) = 0
             then 'all kernels: no phase marks on this side (' || array_to_string(a.wanted, ', ') || ' not marked)'
         when coalesce(h.wanted_calls, 0) = 0
             then 'all kernels: no ' || array_to_string(a.wanted, ', ') || ' kernels on this side (phases seen: '
                  || array_to_string(coalesce(s.phases_seen, []), ', ') || ')'
         else array_to_string(a.wanted, ', ') end as scope,
    case when a.ask_all or coalesce(h.wanted_calls, 0) = 0 then null else a.wanted end as compared_phases,
    coalesce(h.wanted_calls, 0) as wanted_calls,
    coalesce(s.all_calls, 0) as all_calls
from asked a
left join seen s using (run_id, side)
left join hit h using (run_id, side)
