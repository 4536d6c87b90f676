-- grain: run × side × op_type × kernel_name for kernels that match no op_catalog entry: uncategorized
-- ones (category_source = none) and those the fallback placed by kernel-name family or task type.
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
select run_id, side, op_type, kernel_name, calls, ranks, category_source,
       case when category_source = 'fallback' then category end as fallback_category
from {{ ref('fct_side_kernel_names') }}
where category_source <> 'catalog'
