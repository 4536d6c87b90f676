-- grain: one ingested capture. The raw `captures` files (one tiny file per capture) are read once
-- per new or re-ingested run (incremental by run); capture health and side evidence read this table.
{{ config(
    materialized='incremental',
    unique_key='run_id',
    incremental_strategy='delete+insert',
    post_hook="{{ tilake_delete_removed_runs('has_profile') }}"
) }}
with todo as (
    {{ tilake_runs_to_build('profile_registered_at', 'has_profile') }}
)
select c.*, todo.registered_at
from {{ ref('stg_lake__captures') }} c
join todo on todo.run_id = c.run_id
