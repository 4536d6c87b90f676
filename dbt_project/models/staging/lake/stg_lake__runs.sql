-- one row per run (latest registration wins if a run folder holds several files)
select
    run_id,
    model_id,
    coalesce(model_family, 'unknown') as model_family,
    step,
    script_path,
    collection_method,
    train_backend,
    infer_backend,
    parallel_config,
    rl_config,
    tool_versions,
    tags,
    host,
    source_path,
    kind,
    created_at
from {{ source('lake', 'runs') }}
qualify row_number() over (partition by run_id order by created_at desc nulls last) = 1
