-- grain: one row per run × layer × aligned group (training kernels ↔ inference kernels of one layer
-- pair), with the comparison row of its module. The alignment itself (Needleman-Wunsch with fused spans)
-- is computed once, in Python (tilake.diagnosis.kernel_align); this mart reads those rows and adds the
-- module's labels and grade. A view: pipeline/align.py writes the rows after each build.
{{ config(materialized='view') }}

with al as (
    select * from {{ ref('stg_alignment__kernel_alignment') }}
),

cmp as (
    select run_id, module, grade, grade_emoji, rule_id
    from {{ ref('fct_op_comparison') }}
)

select
    al.run_id,
    al.phase_pair,
    al.train_rank,
    al.infer_rank,
    al.layer,
    al.position,
    al.relation,
    al.confidence,
    al.evidence,
    al.fused_side,
    al.module,
    al.category,
    al.train_first,
    al.train_last,
    al.infer_first,
    al.infer_last,
    al.train_kernels,
    al.infer_kernels,
    al.train_kernel_names,
    al.infer_kernel_names,
    al.train_shapes,
    al.infer_shapes,
    al.odd_layer,
    al.odd_reason,
    m.label_en as module_label_en,
    m.label_zh as module_label_zh,
    cmp.grade as comparison_grade,
    cmp.grade_emoji as comparison_grade_emoji,
    cmp.rule_id as comparison_rule_id,
    row_number() over (partition by al.run_id, al.layer, al.module order by al.position) as module_ordinal,
    al.relation <> 'same' as differs
from al
left join {{ ref('modules') }} as m on al.module = m.module
left join cmp on al.run_id = cmp.run_id and al.module = cmp.module
