-- one row per stub round
select
    run_id,
    round,
    isolated_boundary,
    source_side,
    target_side,
    available,
    instruction,
    verified,
    verification,
    outcome
from {{ source('msprobe', 'stub_rounds') }}
