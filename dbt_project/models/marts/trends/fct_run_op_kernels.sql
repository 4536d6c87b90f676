-- grain: run × side × op_type: kernel calls and total device time (ns) of each op type on each
-- path. Incremental, keyed by run (runs.created_at is the version); removed runs are deleted.
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
    o.run_id,
    todo.registered_at,
    o.side,
    o.op_type,
    o.category,
    o.module,
    o.fused,
    o.backend,
    o.calls,
    o.kernel_rows,
    o.total_dur_ns
from {{ ref('fct_side_ops') }} o
join todo on todo.run_id = o.run_id
