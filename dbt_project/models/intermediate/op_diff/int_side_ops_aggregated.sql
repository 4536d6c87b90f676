-- grain: run × side × op_type. Counts sum call_count (text rows from op_statistic are aggregates).
-- Built from the per-kernel-name aggregate (never from kernel rows) with the catalog match; catalog
-- facts come from the op type's most-called kernel name (ties: first by name), so the result never
-- depends on scan order and a few Sort/MemSet/Cast kernels inside aclnnEmbeddingDenseBackward do not
-- move their op type out of its main module.
select
    a.run_id, a.side, a.op_type,
    arg_min_null(c.category, (-a.calls, a.kernel_name)) as category,
    arg_min_null(c.module, (-a.calls, a.kernel_name)) as module,
    bool_or(c.fused) as fused,
    arg_min_null(c.fusion_scope, (-a.calls, a.kernel_name)) as fusion_scope,
    arg_min_null(c.replaces, (-a.calls, a.kernel_name)) as replaces,
    arg_min_null(c.base_op, (-a.calls, a.kernel_name)) as base_op,
    arg_min_null(c.backend, (-a.calls, a.kernel_name)) as backend,
    arg_min_null(c.equiv_class, (-a.calls, a.kernel_name)) as equiv_class,
    arg_min_null(c.direction, (-a.calls, a.kernel_name)) as direction,
    sum(a.calls) as calls,
    sum(a.kernel_rows) as kernel_rows,
    sum(a.total_dur_ns) as total_dur_ns,
    max(a.ranks) as ranks,
    count(distinct a.kernel_name) as kernel_names,
    min(a.kernel_name) as example_kernel,
    bool_or(a.op_type_derived) as op_type_derived,
    string_agg(distinct a.source_kinds, ',' order by a.source_kinds) as source_kinds,
    arg_min_null(c.category_source, (-a.calls, a.kernel_name)) as category_source
from {{ ref('int_kernel_names_aggregated') }} a
left join {{ ref('int_op_types_catalogued') }} c
  on c.op_type is not distinct from a.op_type and c.kernel_name is not distinct from a.kernel_name
group by a.run_id, a.side, a.op_type
