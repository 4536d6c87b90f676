-- grain: one run id, registered by a profiler ingest (raw `runs`) and/or a dump analysis
-- (raw `dump_runs`). The registration timestamps are the run's version: a re-ingest writes a new
-- created_at, so the incremental trend marts reprocess exactly the runs whose version changed.
-- A table (not a view): the raw runs/dump_runs Parquet (one file per run) is scanned once per build,
-- and every trend model reads this table instead.
{{ config(materialized='table') }}
with p as (
    select * from {{ ref('stg_profiler__runs') }}
),

d as (
    select run_id, created_at, map_name, verdict, consistency
    from {{ ref('stg_msprobe__dump_runs') }}
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
    -- family as recorded; when only the model id is known, its leading name (Qwen/Qwen3-0.6B → qwen3),
    -- the same rule as ingest/runs_registry.model_family_for
    case when coalesce(p.model_family, 'unknown') <> 'unknown' then p.model_family
         when coalesce(p.model_id, 'unknown') <> 'unknown'
              and regexp_extract(lower(regexp_extract(p.model_id, '[^/]*$')), '^[a-z]+(\d+(\.\d+)?)?') <> ''
             then regexp_extract(lower(regexp_extract(p.model_id, '[^/]*$')), '^[a-z]+(\d+(\.\d+)?)?')
         else 'unknown' end as model_family,
    case when coalesce(p.model_family, 'unknown') <> 'unknown' then 'recorded'
         when coalesce(p.model_id, 'unknown') <> 'unknown' then 'model id'
         else 'unknown' end as model_family_source,
    -- step as recorded (scan), else a `--tag step=N` given at ingest
    coalesce(p.step, try_cast(json_extract_string(p.tags, '$.step') as integer)) as step,
    p.host,
    p.kind,
    p.train_backend,
    p.infer_backend,
    p.collection_method,
    p.tool_versions,
    p.tags,
    p.rl_config,
    p.settings,
    p.phases,
    p.created_at as profile_registered_at,
    d.created_at as dumps_registered_at,
    coalesce(least(p.created_at, d.created_at), p.created_at, d.created_at) as created_at,
    d.map_name as dump_map,
    d.verdict as dump_verdict,
    d.consistency as dump_consistency
from ids
left join p on p.run_id = ids.run_id
left join d on d.run_id = ids.run_id
