-- grain: run × side × op_type. Counts sum call_count (text rows from op_statistic are aggregates).
-- Built from the per-kernel-name aggregate (never from kernel rows) with the catalog match.
select
    a.run_id, a.side, a.op_type,
    any_value(c.category) as category,
    any_value(c.module) as module,
    bool_or(c.fused) as fused,
    any_value(c.fusion_scope) as fusion_scope,
    any_value(c.replaces) as replaces,
    any_value(c.base_op) as base_op,
    any_value(c.backend) as backend,
    any_value(c.equiv_class) as equiv_class,
    any_value(c.direction) as direction,
    sum(a.calls) as calls,
    sum(a.kernel_rows) as kernel_rows,
    sum(a.total_dur_ns) as total_dur_ns,
    max(a.ranks) as ranks,
    count(distinct a.kernel_name) as kernel_names,
    min(a.kernel_name) as example_kernel,
    bool_or(a.op_type_derived) as op_type_derived,
    string_agg(distinct a.source_kinds, ',') as source_kinds
from {{ ref('int_kernel_names_aggregated') }} a
left join {{ ref('int_op_types_catalogued') }} c
  on c.op_type is not distinct from a.op_type and c.kernel_name is not distinct from a.kernel_name
group by a.run_id, a.side, a.op_type
