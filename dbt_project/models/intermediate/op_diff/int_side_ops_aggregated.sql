-- grain: run × side × op_type. Counts sum call_count (text rows from op_statistic are aggregates).
-- Built from the per-kernel-name aggregate (never from kernel rows) with the catalog match; catalog
-- facts come from the catalog entry that covers most of the op type's calls (then its most-called kernel
-- name, then the first by name), so the result never depends on scan order, and a few MemSet/Cast/TransData
-- kernels inside an aclnn *Backward API do not move their op type out of its main module.
with named as (
    select
        a.*, c.category, c.module, c.fused, c.fusion_scope, c.replaces, c.base_op, c.backend, c.equiv_class,
        c.direction, c.category_source,
        struct_pack(
            entry := -sum(a.calls) over (partition by a.run_id, a.side, a.op_type, c.matched_pattern),
            name_calls := -a.calls, name := a.kernel_name
        ) as pick
    from {{ ref('int_kernel_names_aggregated') }} a
    left join {{ ref('int_op_types_catalogued') }} c
      on c.op_type is not distinct from a.op_type and c.kernel_name is not distinct from a.kernel_name
)
select
    a.run_id, a.side, a.op_type,
    arg_min_null(a.category, a.pick) as category,
    arg_min_null(a.module, a.pick) as module,
    bool_or(a.fused) as fused,
    arg_min_null(a.fusion_scope, a.pick) as fusion_scope,
    arg_min_null(a.replaces, a.pick) as replaces,
    arg_min_null(a.base_op, a.pick) as base_op,
    arg_min_null(a.backend, a.pick) as backend,
    arg_min_null(a.equiv_class, a.pick) as equiv_class,
    arg_min_null(a.direction, a.pick) as direction,
    sum(a.calls) as calls,
    sum(a.kernel_rows) as kernel_rows,
    sum(a.total_dur_ns) as total_dur_ns,
    max(a.ranks) as ranks,
    count(distinct a.kernel_name) as kernel_names,
    min(a.kernel_name) as example_kernel,
    bool_or(a.op_type_derived) as op_type_derived,
    string_agg(distinct a.source_kinds, ',' order by a.source_kinds) as source_kinds,
    arg_min_null(a.category_source, a.pick) as category_source
from named a
group by a.run_id, a.side, a.op_type
