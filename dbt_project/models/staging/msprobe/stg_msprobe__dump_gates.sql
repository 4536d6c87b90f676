-- one row per gated run (tilake dumps gate; the latest gate of the run)
select
    run_id,
    outcome,
    passed,
    line,
    map_name,
    train_path,
    infer_path,
    budget_path,
    budget_sha256,
    budget,
    mapped,
    exact,
    within_budget,
    failing,
    uncompared,
    not_mapped,
    first_failing_boundary,
    first_failing_status,
    first_failing_max_elem_ulp,
    max_elem_ulp,
    failures,
    gated_at
from {{ source('msprobe', 'dump_gates') }}
qualify row_number() over (partition by run_id order by gated_at desc nulls last) = 1
