-- grain: run × comparison module (category) × grade. Incremental, keyed by run: only runs whose
-- profile registration (runs.created_at) is new or changed are recomputed; removed runs are deleted.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}

select
    c.run_id,
    todo.registered_at,
    c.module,
    c.grade,
    count(*) as comparison_rows,
    sum(c.train_calls) as train_calls,
    sum(c.infer_calls) as infer_calls
from {{ ref('fct_op_comparison') }} c
join todo on todo.run_id = c.run_id
group by all
