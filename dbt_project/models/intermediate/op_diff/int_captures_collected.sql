-- grain: one ingested capture. The raw `captures` files (one tiny file per capture) are read once
-- per new or re-ingested run (incremental by run); capture health and side evidence read this table.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select c.*, todo.registered_at
from {{ tilake_staged('captures', due) }} c
join todo on todo.run_id = c.run_id
