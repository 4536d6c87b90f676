-- grain: run × side (train, infer). Evidence for the side: device | cpu_ops | host_fallback | evidence_missing,
-- with rank coverage (ranks with usable captures vs all ranks seen), the reasons otherwise, and the number of
-- rollout replicas its captures come from (each replica's engine repeats rank 0: counted per replica).
-- The evidence rule has one home: the profiler ingest decides it per side (ingest/profiler/load.py,
-- ingest_profile; it must, to refuse a side without evidence before the lake changes) and records it in
-- runs.rl_config._evidence.side_evidence; this model reads that decision and never re-derives it.
with sides as (
    select r.run_id, s.side,
           json_extract_string(r.rl_config, '$._evidence.side_evidence.' || s.side) as evidence
    from {{ ref('int_runs_versioned') }} r
    cross join (values ('train'), ('infer')) s (side)
    where r.has_profile
),
caps as (
    select run_id, side,
           count(distinct rank) as ranks_seen,
           count(distinct rank) filter (where status in ('ok', 'host_fallback')) as ranks_usable,
           list_sort(list(distinct rank) filter (where status not in ('ok', 'host_fallback'))) as ranks_missing,
           string_agg(distinct status || ': ' || reason, ' | ' order by status || ': ' || reason)
               filter (where status not in ('ok')) as reasons,
           count(*) as captures,
           bool_or(coalesce(truncated, false)) as any_truncated,
           string_agg(distinct profiler_level, ',' order by profiler_level) as profiler_levels,
           -- rollout replicas: verl's agent_loop_rollout_replica_<r>/ folders or relocated rollout-replica<r>_ names
           count(distinct nullif(
               regexp_extract(path, '(?:agent_loop_rollout_replica_|rollout-replica)([0-9]+)', 1), '')) as replicas
    from {{ ref('int_captures_collected') }}
    group by run_id, side
)
select
    s.run_id, s.side,
    -- a runs row ingest did not write (no recorded decision) has no evidence to show
    coalesce(s.evidence, 'evidence_missing') as evidence,
    coalesce(c.ranks_seen, 0) as ranks_seen,
    coalesce(c.ranks_usable, 0) as ranks_usable,
    c.ranks_missing,
    coalesce(c.reasons, case when c.run_id is null then 'no ' || s.side || ' capture was found' end) as reasons,
    coalesce(c.captures, 0) as captures,
    coalesce(c.any_truncated, false) as any_truncated,
    c.profiler_levels,
    coalesce(c.replicas, 0) as replicas
from sides s
left join caps c using (run_id, side)
