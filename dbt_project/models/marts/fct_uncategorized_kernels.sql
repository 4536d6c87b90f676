-- grain: run × side × op_type × kernel_name for kernels that match no op_catalog entry.
select run_id, side, op_type, kernel_name, sum(call_count) as calls, count(distinct rank) as ranks
from {{ ref('int_kernels_categorised') }}
where module = 'uncategorized'
group by run_id, side, op_type, kernel_name
