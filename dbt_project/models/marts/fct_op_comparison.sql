-- grain: run × comparison module. The core train-vs-infer table of the operator diff report.
with c as (
    select * from {{ ref('int_comparisons_graded') }}
),
ev as (
    select run_id,
           max(evidence) filter (where side = 'train') as train_evidence,
           max(evidence) filter (where side = 'infer') as infer_evidence,
           max(reasons) filter (where side = 'train') as train_reasons,
           max(reasons) filter (where side = 'infer') as infer_reasons
    from {{ ref('int_sides_evidenced') }}
    group by run_id
),
notes as (
    select run_id, module,
           max(path) filter (where side = 'train') as train_code_path,
           max(function_name) filter (where side = 'train') as train_code_function,
           max(path) filter (where side = 'infer') as infer_code_path,
           max(function_name) filter (where side = 'infer') as infer_code_function
    from {{ ref('stg_lake__source_notes') }}
    group by run_id, module
),
graded as (
    select c.*, ev.train_evidence, ev.infer_evidence,
           case when ev.train_evidence = 'evidence_missing' or ev.infer_evidence = 'evidence_missing'
                then 'evidence_missing' else c.rule_id end as final_rule
    from c join ev using (run_id)
)
select
    g.run_id,
    g.module,
    m.label_zh as module_label_zh,
    m.label_en as module_label_en,
    coalesce(m.display_order, 900) as display_order,
    g.train_ops,
    g.train_op_calls,
    g.train_calls,
    g.infer_ops,
    g.infer_op_calls,
    g.infer_calls,
    g.train_fused,
    g.infer_fused,
    g.joined_by,
    g.only_side,
    g.final_rule as rule_id,
    coalesce(r.grade, 'evidence_missing') as grade,
    gr.emoji as grade_emoji,
    gr.label_zh as grade_label_zh,
    gr.label_en as grade_label_en,
    gr.color as grade_color,
    gr.severity_rank,
    case when g.final_rule = 'evidence_missing' then '证据缺失'
         when g.only_side = 'train' then '训练独有' || case when r.grade = 'yellow' then '（推理有等价实现）' else '' end
         when g.only_side = 'infer' then '推理独有' || case when r.grade = 'yellow' then '（训练有等价实现）' else '' end
         else r.diff_type_zh end as diff_type_zh,
    case when g.final_rule = 'evidence_missing' then 'evidence missing'
         when g.only_side = 'train' then 'training only' || case when r.grade = 'yellow' then ' (equivalent in inference)' else '' end
         when g.only_side = 'infer' then 'inference only' || case when r.grade = 'yellow' then ' (equivalent in training)' else '' end
         else r.diff_type_en end as diff_type_en,
    case when g.final_rule = 'evidence_missing'
         then '一侧缺少 device 证据，不判定差异等级' else r.rule_zh end as rule_zh,
    case when g.final_rule = 'evidence_missing'
         then 'one side has no device evidence: no grade is given' else r.rule_en end as rule_en,
    m.seed_table_grade,
    (m.seed_table_grade is not null and m.seed_table_grade <> '' and m.seed_table_grade <> coalesce(r.grade, 'evidence_missing')) as differs_from_seed_table,
    g.train_evidence,
    g.infer_evidence,
    n.train_code_path,
    n.train_code_function,
    n.infer_code_path,
    n.infer_code_function,
    coalesce(rm.priority, rd.priority) as priority,
    coalesce(rm.action_zh, rd.action_zh) as action_zh,
    coalesce(rm.action_en, rd.action_en) as action_en
from graded g
left join {{ ref('grading_rules') }} r on r.rule_id = g.final_rule
left join {{ ref('grades') }} gr on gr.grade = coalesce(r.grade, 'evidence_missing')
left join {{ ref('modules') }} m on m.module = g.module
left join notes n on n.run_id = g.run_id and n.module = g.module
left join {{ ref('recommendations') }} rm on rm.module = g.module and rm.grade = coalesce(r.grade, 'evidence_missing')
left join {{ ref('recommendations') }} rd on rd.module = '*' and rd.grade = coalesce(r.grade, 'evidence_missing')
