-- grain: run × comparison module (category) × grade. Incremental, keyed by run: only runs whose
-- profile registration (runs.created_at) is new or changed are recomputed; removed runs are deleted.
{{ config(
    materialized='incremental',
    unique_key='run_id',
    incremental_strategy='delete+insert',
    post_hook="{{ tilake_delete_removed_runs('has_profile') }}"
) }}
with todo as (
    {{ tilake_runs_to_build('profile_registered_at', 'has_profile') }}
)

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
