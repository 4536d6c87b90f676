-- grain: run × side: capture health summed over ranks (captures by status, truncated sessions,
-- kernels and host ops) and the side's evidence (device | host_fallback | evidence_missing).
-- Incremental, keyed by run (runs.created_at is the version); removed runs are deleted.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},

caps as (
    select run_id, side,
           count(*) as captures,
           count(*) filter (where status = 'ok') as captures_ok,
           count(*) filter (where status = 'host_fallback') as captures_host_fallback,
           count(*) filter (where status = 'evidence_missing') as captures_evidence_missing,
           count(*) filter (where status = 'unparsed') as captures_unparsed,
           count(*) filter (where status = 'error') as captures_error,
           count(*) filter (where coalesce(truncated, false)) as captures_truncated,
           coalesce(sum(kernel_count), 0) as kernels,
           coalesce(sum(host_op_count), 0) as host_ops
    from {{ ref('fct_capture_health') }}
    where run_id in (select run_id from todo)
    group by run_id, side
),

sides as (
    -- the side's evidence as the operator diff judged it (dim_runs, from int_sides_evidenced)
    select d.run_id, s.side,
           case when s.side = 'train' then d.train_evidence else d.infer_evidence end as evidence,
           case when s.side = 'train' then d.train_ranks_seen else d.infer_ranks_seen end as ranks_seen,
           case when s.side = 'train' then d.train_ranks_usable else d.infer_ranks_usable end as ranks_usable
    from {{ ref('dim_runs') }} d
    cross join (values ('train'), ('infer')) s (side)
    where d.run_id in (select run_id from todo)
)

select
    e.run_id,
    todo.registered_at,
    e.side,
    e.evidence,
    e.ranks_seen,
    e.ranks_usable,
    coalesce(c.captures, 0) as captures,
    coalesce(c.captures_ok, 0) as captures_ok,
    coalesce(c.captures_host_fallback, 0) as captures_host_fallback,
    coalesce(c.captures_evidence_missing, 0) as captures_evidence_missing,
    coalesce(c.captures_unparsed, 0) as captures_unparsed,
    coalesce(c.captures_error, 0) as captures_error,
    coalesce(c.captures_truncated, 0) as captures_truncated,
    coalesce(c.kernels, 0) as kernels,
    coalesce(c.host_ops, 0) as host_ops
from sides e
join todo on todo.run_id = e.run_id
left join caps c on c.run_id = e.run_id and c.side = e.side
