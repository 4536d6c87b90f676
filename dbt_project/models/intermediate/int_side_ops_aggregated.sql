-- grain: run × side × op_type. Counts sum call_count (text rows from op_statistic are aggregates).
select
    run_id, side, op_type,
    any_value(category) as category,
    any_value(module) as module,
    bool_or(fused) as fused,
    any_value(fusion_scope) as fusion_scope,
    any_value(replaces) as replaces,
    any_value(base_op) as base_op,
    any_value(backend) as backend,
    any_value(equiv_class) as equiv_class,
    any_value(direction) as direction,
    sum(call_count) as calls,
    count(*) as kernel_rows,
    sum(coalesce(dur_ns, 0)) as total_dur_ns,
    count(distinct rank) as ranks,
    count(distinct kernel_name) as kernel_names,
    min(kernel_name) as example_kernel,
    bool_or(op_type_derived) as op_type_derived,
    string_agg(distinct source_kind, ',') as source_kinds
from {{ ref('int_kernels_categorised') }}
group by run_id, side, op_type
