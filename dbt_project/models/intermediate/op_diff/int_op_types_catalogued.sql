-- grain: one row per distinct (op_type, kernel_name) seen in the lake, with its best catalog match.
-- Matching happens on distinct names (small), never per kernel row. Catalog = op_catalog (Ascend)
-- plus op_catalog_torch (CUDA kernel names, aten ops of torch-profiler traces).
-- Order of evidence: the aclnn API family of the kernel name (aclnn<Api>_<Impl>_<OpType>: the
-- `aclnn_api` rows, e.g. every kernel of aclnnEmbeddingDenseBackward is backward) before the bare op
-- type at equal priority; then, only for names no catalog row matches, op_catalog_fallback by kernel-name
-- family and task type (AI_VECTOR_CORE → elementwise, ...), labelled category_source = 'fallback'.
-- own_regex catalog rows and every fallback name_regex match the kernel's own name (tilake_kernel_own_name:
-- no namespaces, template arguments or parameters), so text inside template arguments never decides.
with names as (
    select op_type, kernel_name, min(accelerator) as accelerator
    from {{ ref('int_kernel_names_aggregated') }}
    group by op_type, kernel_name
),
named as (
    select *, {{ tilake_kernel_own_name("kernel_name") }} as own_name
    from names
),
catalog as (
    select * from {{ ref('op_catalog') }}
    union all by name
    select * from {{ ref('op_catalog_torch') }}
),
matched as (
    select
        n.op_type, n.kernel_name, c.*,
        row_number() over (
            partition by n.op_type, n.kernel_name
            order by c.priority,
                     case c.pattern_kind
                         when 'aclnn_api' then 0 when 'op_type' then 1
                         when 'own_regex' then 2 when 'name_regex' then 2 else 3
                     end,
                     c.pattern
        ) as rn
    from named n
    join catalog c
      on (c.pattern_kind = 'op_type' and n.op_type = c.pattern)
      or (c.pattern_kind = 'op_regex' and regexp_matches(coalesce(n.op_type, ''), c.pattern))
      or (c.pattern_kind = 'name_regex' and regexp_matches(coalesce(n.kernel_name, ''), c.pattern))
      or (c.pattern_kind = 'own_regex' and regexp_matches(coalesce(n.own_name, ''), c.pattern))
      or (c.pattern_kind = 'aclnn_api' and regexp_matches(
              regexp_extract(coalesce(n.kernel_name, ''), '^aclnn([A-Za-z0-9]+)_[A-Za-z0-9]+_', 1), c.pattern))
),
fallback as (
    select
        n.op_type, n.kernel_name, f.*,
        row_number() over (
            partition by n.op_type, n.kernel_name
            order by f.priority, case f.pattern_kind when 'name_regex' then 0 else 1 end, f.pattern
        ) as rn
    from named n
    join {{ ref('op_catalog_fallback') }} f
      on (f.pattern_kind = 'name_regex' and regexp_matches(coalesce(n.own_name, ''), f.pattern))
      or (f.pattern_kind = 'accelerator' and upper(coalesce(n.accelerator, '')) = f.pattern)
)
select
    n.op_type,
    n.kernel_name,
    coalesce(m.category, fb.category, 'uncategorized') as category,
    coalesce(m.module, fb.module, 'uncategorized') as module,
    coalesce(m.fused, false) as fused,
    m.fusion_scope,
    m.replaces,
    coalesce(m.base_op, n.op_type) as base_op,
    coalesce(m.backend, fb.backend, 'unknown') as backend,
    m.equiv_class,
    coalesce(m.direction, 'fwd') as direction,
    coalesce(m.pattern_kind || ':' || m.pattern, 'fallback:' || fb.pattern_kind || ':' || fb.pattern)
        as matched_pattern,
    case when m.pattern is not null then 'catalog' when fb.pattern is not null then 'fallback' else 'none' end
        as category_source,
    n.accelerator,
    coalesce(m.source_note, fb.source_note) as source_note
from names n
left join matched m
  on m.rn = 1 and m.op_type is not distinct from n.op_type and m.kernel_name is not distinct from n.kernel_name
left join fallback fb
  on fb.rn = 1 and fb.op_type is not distinct from n.op_type and fb.kernel_name is not distinct from n.kernel_name
