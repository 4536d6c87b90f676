-- grain: (base run, run) pair, one per run that has an earlier run of the same model family:
-- each run against the previous run of its family in registration order (created_at, then run id).
-- pair_kind says which registration ordered them: 'profile' pairs runs with profiler captures,
-- 'dumps' pairs runs with a dump analysis (so a dump-only run still has a predecessor).
with v as (
    select * from {{ ref('int_runs_versioned') }}
),

profile_pairs as (
    select lag(run_id) over (partition by model_family order by created_at, run_id) as base_run_id,
           run_id, model_family, 'profile' as pair_kind
    from v
    where has_profile
),

dump_pairs as (
    select lag(run_id) over (partition by model_family order by created_at, run_id) as base_run_id,
           run_id, model_family, 'dumps' as pair_kind
    from v
    where has_dumps
)

select * from profile_pairs where base_run_id is not null
union all
select * from dump_pairs where base_run_id is not null
