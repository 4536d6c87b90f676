-- Each 🔴/🟠 comparison row → its aligned kernel groups that differ (each distinct instance once, at the
-- first layer it occurs, with the number of layers holding it) and the dump boundary that would confirm
-- it (seeds/boundary_modules.csv: the stub target to collect). Parameters: $run_id
with graded as (
    select module, module_label_en, module_label_zh, grade, grade_emoji, display_order
    from main.fct_op_comparison
    where run_id = $run_id and grade in ('red', 'orange')
),
inst as (
    select k.*,
           count(*) over (partition by k.module, k.relation, coalesce(k.train_kernels, ''),
                          coalesce(k.infer_kernels, ''), k.module_ordinal) as layers_with
    from main.fct_kernel_alignment as k
    where k.run_id = $run_id and k.differs
),
firsts as (
    select * from inst
    qualify row_number() over (partition by module, relation, coalesce(train_kernels, ''),
                               coalesce(infer_kernels, ''), module_ordinal order by layer, position) = 1
)
select g.module, g.module_label_en, g.module_label_zh, g.grade, g.grade_emoji, f.layer, f.position, f.relation,
       f.confidence, f.train_kernels, f.infer_kernels, f.train_first, f.train_last, f.infer_first, f.infer_last,
       f.train_shapes, f.infer_shapes, f.layers_with,
       (select string_agg(distinct 'L' || f.layer || '.' || bm.boundary_suffix, ', ')
        from main.boundary_modules as bm
        where bm.per_layer and bm.module = g.module
          and (bm.module_ordinal is null or bm.module_ordinal = f.module_ordinal))
           as confirm_boundary
from graded as g
left join firsts as f using (module)
order by g.display_order, f.layer, f.position
