-- grain: run × side × op_type × kernel_name for kernels that match no op_catalog entry.
select run_id, side, op_type, kernel_name, calls, ranks
from {{ ref('fct_side_kernel_names') }}
where module = 'uncategorized'
