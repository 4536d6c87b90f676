-- grain: run × side × kernel_name (× op_type): runtime kernel counts (*_runtime_ops.json).
select run_id, side, kernel_name, op_type, category, module,
       sum(call_count) as calls, sum(coalesce(dur_ns, 0)) as total_dur_ns, count(distinct rank) as ranks
from {{ ref('int_kernels_categorised') }}
group by run_id, side, kernel_name, op_type, category, module
