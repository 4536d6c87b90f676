-- grain: one run. Metadata plus the evidence of each side.
select
    r.*,
    b.train_backend_detected, b.infer_backend_detected,
    t.evidence as train_evidence, t.ranks_seen as train_ranks_seen, t.ranks_usable as train_ranks_usable,
    t.ranks_missing as train_ranks_missing, t.reasons as train_reasons, t.any_truncated as train_truncated,
    t.profiler_levels as train_profiler_levels,
    i.evidence as infer_evidence, i.ranks_seen as infer_ranks_seen, i.ranks_usable as infer_ranks_usable,
    i.ranks_missing as infer_ranks_missing, i.reasons as infer_reasons, i.any_truncated as infer_truncated,
    i.profiler_levels as infer_profiler_levels
from {{ ref('stg_lake__runs') }} r
left join {{ ref('int_sides_evidenced') }} t on t.run_id = r.run_id and t.side = 'train'
left join {{ ref('int_sides_evidenced') }} i on i.run_id = r.run_id and i.side = 'infer'
left join {{ ref('int_runs_backends_detected') }} b on b.run_id = r.run_id
