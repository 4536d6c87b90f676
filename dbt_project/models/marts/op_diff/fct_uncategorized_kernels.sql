-- grain: run × side × op_type × kernel_name for kernels that match no op_catalog entry: uncategorized
-- ones (category_source = none) and those the fallback placed by kernel-name family or task type.
select run_id, side, op_type, kernel_name, calls, ranks, category_source,
       case when category_source = 'fallback' then category end as fallback_category
from {{ ref('fct_side_kernel_names') }}
where category_source <> 'catalog'
