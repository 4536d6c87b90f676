-- grain: one run. Metadata plus the evidence of each side. Incremental by run.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}
{%- set due = tilake_todo_run_ids() %}
select
    r.*,
    todo.registered_at,
    b.train_backend_detected, b.infer_backend_detected,
    t.evidence as train_evidence, t.ranks_seen as train_ranks_seen, t.ranks_usable as train_ranks_usable,
    t.ranks_missing as train_ranks_missing, t.reasons as train_reasons, t.any_truncated as train_truncated,
    t.profiler_levels as train_profiler_levels,
    i.evidence as infer_evidence, i.ranks_seen as infer_ranks_seen, i.ranks_usable as infer_ranks_usable,
    i.ranks_missing as infer_ranks_missing, i.reasons as infer_reasons, i.any_truncated as infer_truncated,
    i.profiler_levels as infer_profiler_levels,
    t.replicas as train_replicas, i.replicas as infer_replicas
from {{ tilake_staged('runs', due) }} r
join todo on todo.run_id = r.run_id
left join (select * from {{ ref('int_sides_evidenced') }} where {{ tilake_run_filter('run_id', due) }}) t
  on t.run_id = r.run_id and t.side = 'train'
left join (select * from {{ ref('int_sides_evidenced') }} where {{ tilake_run_filter('run_id', due) }}) i
  on i.run_id = r.run_id and i.side = 'infer'
left join (select * from {{ ref('int_runs_backends_detected') }} where {{ tilake_run_filter('run_id', due) }}) b
  on b.run_id = r.run_id
