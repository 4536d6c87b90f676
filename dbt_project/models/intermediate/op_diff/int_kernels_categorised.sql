-- grain: one row per kernel (device task or aggregated text row) with category and module.
select k.*, c.category, c.module, c.fused, c.fusion_scope, c.replaces, c.base_op, c.backend,
       c.equiv_class, c.direction, c.matched_pattern
from {{ ref('stg_profiler__kernels') }} k
left join {{ ref('int_op_types_catalogued') }} c
  on c.op_type is not distinct from k.op_type and c.kernel_name is not distinct from k.kernel_name
