-- grain: one run id, registered by a profiler ingest (raw `runs`) and/or a dump analysis
-- (raw `dump_runs`). The registration timestamps are the run's version: a re-ingest writes a new
-- created_at, so the incremental trend marts reprocess exactly the runs whose version changed.
with p as (
    select * from {{ ref('stg_lake__runs') }}
),

d as (
    select run_id, created_at, map_name, verdict, consistency
    from {{ ref('stg_lake_dumps__dump_runs') }}
),

ids as (
    select run_id from p
    union
    select run_id from d
)

select
    ids.run_id,
    p.run_id is not null as has_profile,
    d.run_id is not null as has_dumps,
    coalesce(p.model_id, 'unknown') as model_id,
    coalesce(p.model_family, 'unknown') as model_family,
    p.step,
    p.host,
    p.kind,
    p.train_backend,
    p.infer_backend,
    p.collection_method,
    p.tool_versions,
    p.tags,
    p.rl_config,
    p.created_at as profile_registered_at,
    d.created_at as dumps_registered_at,
    coalesce(least(p.created_at, d.created_at), p.created_at, d.created_at) as created_at,
    d.map_name as dump_map,
    d.verdict as dump_verdict,
    d.consistency as dump_consistency
from ids
left join p on p.run_id = ids.run_id
left join d on d.run_id = ids.run_id
