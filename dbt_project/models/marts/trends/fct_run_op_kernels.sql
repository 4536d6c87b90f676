-- grain: run × side × op_type: kernel calls and total device time (ns) of each op type on each
-- path. Incremental, keyed by run (runs.created_at is the version); removed runs are deleted.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }}

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
