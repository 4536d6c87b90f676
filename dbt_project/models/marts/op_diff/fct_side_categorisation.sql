-- grain: run × side: how the side's kernel calls got their category (catalog row, fallback, none) and
-- how many op types were derived from kernel names (level 0). The report's uncategorized share.
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
select
    run_id, side,
    sum(calls) as calls,
    coalesce(sum(calls) filter (where category_source = 'none'), 0) as uncategorized_calls,
    coalesce(sum(calls) filter (where category_source = 'fallback'), 0) as fallback_calls,
    coalesce(sum(calls) filter (where category_source = 'none'), 0) * 1.0 / nullif(sum(calls), 0)
        as uncategorized_share,
    coalesce(sum(calls) filter (where category_source = 'fallback'), 0) * 1.0 / nullif(sum(calls), 0)
        as fallback_share,
    count(*) as op_types,
    count(*) filter (where category_source = 'none') as uncategorized_op_types,
    count(*) filter (where category_source = 'fallback') as fallback_op_types,
    count(*) filter (where op_type_derived) as derived_op_types
from {{ ref('fct_side_ops') }}
group by run_id, side
