-- one row per analysed dump pair (latest write wins)
select
    run_id,
    map_name,
    reference_side,
    train_path,
    infer_path,
    rounds,
    verdict,
    consistency,
    verdict_reason,
    task_card,
    created_at
from {{ source('msprobe', 'dump_runs') }}
qualify row_number() over (partition by run_id order by created_at desc nulls last) = 1
