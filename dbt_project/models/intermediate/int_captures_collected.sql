-- grain: one ingested capture. The raw `captures` files (one tiny file per capture) are read once
-- per new or re-ingested run (incremental by run); capture health and side evidence read this table.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
select c.*, todo.registered_at
from {{ ref('stg_lake__captures') }} c
join todo on todo.run_id = c.run_id
