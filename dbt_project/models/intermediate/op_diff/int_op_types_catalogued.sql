-- grain: one row per distinct (op_type, kernel_name) seen in the lake, with its best catalog match.
-- Matching happens on distinct names (small), never per kernel row. Catalog = op_catalog (Ascend)
-- plus op_catalog_torch (CUDA kernel names, aten ops of torch-profiler traces).
with names as (
    select distinct op_type, kernel_name from {{ ref('int_kernel_names_aggregated') }}
),
matched as (
    select
        n.op_type, n.kernel_name, c.*,
        row_number() over (
            partition by n.op_type, n.kernel_name
            order by c.priority,
                     case c.pattern_kind when 'op_type' then 0 when 'name_regex' then 1 else 2 end,
                     c.pattern
        ) as rn
    from names n
    join (select * from {{ ref('op_catalog') }}
          union all by name select * from {{ ref('op_catalog_torch') }}) c
      on (c.pattern_kind = 'op_type' and n.op_type = c.pattern)
      or (c.pattern_kind = 'op_regex' and regexp_matches(coalesce(n.op_type, ''), c.pattern))
      or (c.pattern_kind = 'name_regex' and regexp_matches(coalesce(n.kernel_name, ''), c.pattern))
)
select
    n.op_type,
    n.kernel_name,
    coalesce(m.category, 'uncategorized') as category,
    coalesce(m.module, 'uncategorized') as module,
    coalesce(m.fused, false) as fused,
    m.fusion_scope,
    m.replaces,
    coalesce(m.base_op, n.op_type) as base_op,
    coalesce(m.backend, 'unknown') as backend,
    m.equiv_class,
    coalesce(m.direction, 'fwd') as direction,
    m.pattern_kind || ':' || m.pattern as matched_pattern,
    m.source_note
from names n
left join matched m
  on m.rn = 1 and m.op_type is not distinct from n.op_type and m.kernel_name is not distinct from n.kernel_name
