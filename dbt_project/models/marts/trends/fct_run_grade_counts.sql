-- grain: run × comparison module (category) × grade. Incremental, keyed by run: only runs whose
-- profile registration (runs.created_at) is new or changed are recomputed; removed runs are deleted.
{{ config(
    materialized='incremental',
    unique_key='run_id',
    incremental_strategy='delete+insert',
    post_hook="delete from {{ this }} where run_id not in (select run_id from {{ ref('int_runs_versioned') }} where has_profile)"
) }}
with todo as (
    select run_id, profile_registered_at as registered_at
    from {{ ref('int_runs_versioned') }} v
    where has_profile
    {% if is_incremental() %}
      and not exists (select 1 from {{ this }} t
                      where t.run_id = v.run_id and t.registered_at = v.profile_registered_at)
    {% endif %}
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
