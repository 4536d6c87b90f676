-- grain: run × comparison module. The core train-vs-infer table of the operator diff report.
-- Incremental by run: grades only new or re-ingested runs (macros/trends_incremental.sql).
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},
{%- set due = tilake_todo_run_ids() %}
c as (
    select * from {{ ref('int_comparisons_graded') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),
ev as (
    select run_id,
           max(evidence) filter (where side = 'train') as train_evidence,
           max(evidence) filter (where side = 'infer') as infer_evidence,
           max(reasons) filter (where side = 'train') as train_reasons,
           max(reasons) filter (where side = 'infer') as infer_reasons
    from {{ ref('int_sides_evidenced') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
    group by run_id
),
notes as (
    select run_id, module,
           max(path) filter (where side = 'train') as train_code_path,
           max(function_name) filter (where side = 'train') as train_code_function,
           max(path) filter (where side = 'infer') as infer_code_path,
           max(function_name) filter (where side = 'infer') as infer_code_function
    from {{ tilake_staged('source_notes', due) }}
    where run_id in (select run_id from todo)
    group by run_id, module
),
stack_paths as (
    -- innermost runtime frame of the row's most-called op that has a call stack, site-packages stripped
    select s.run_id, s.side, o.display_module as module,
           regexp_replace(regexp_replace(split_part(s.stack, chr(10), 1), '^.*(site|dist)-packages/', ''),
                          '\([0-9]+\):.*$', '') as path
    from {{ ref('fct_op_call_stacks') }} s
    join {{ ref('int_side_ops_fused_joined') }} o
      on o.run_id = s.run_id and o.side = s.side and o.op_type = s.op_type
    where {{ tilake_run_filter('s.run_id', due) }} and s.run_id in (select run_id from todo)
    qualify row_number() over (partition by s.run_id, s.side, o.display_module order by o.calls desc, s.op_type) = 1
),
graded as (
    -- evidence gate: no grade without device evidence on both sides; a host-side fallback side may
    -- still show differences, but never "no difference"
    select c.*, ev.train_evidence, ev.infer_evidence,
           case when ev.train_evidence = 'evidence_missing' or ev.infer_evidence = 'evidence_missing'
                then 'evidence_missing'
                when (ev.train_evidence = 'host_fallback' or ev.infer_evidence = 'host_fallback')
                     and rr.grade = 'green'
                then 'host_fallback_unconfirmed'
                else c.rule_id end as final_rule
    from c join ev using (run_id)
    left join {{ ref('grading_rules') }} rr on rr.rule_id = c.rule_id
)
select
    g.run_id,
    todo.registered_at,
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
    case when r.grade = 'evidence_missing' then r.diff_type_zh
         when g.only_side = 'train' then '训练独有' || case when r.grade = 'yellow' then '（推理有等价实现）' else '' end
         when g.only_side = 'infer' then '推理独有' || case when r.grade = 'yellow' then '（训练有等价实现）' else '' end
         else r.diff_type_zh end as diff_type_zh,
    case when r.grade = 'evidence_missing' then r.diff_type_en
         when g.only_side = 'train'
             then 'training only' || case when r.grade = 'yellow' then ' (equivalent in inference)' else '' end
         when g.only_side = 'infer'
             then 'inference only' || case when r.grade = 'yellow' then ' (equivalent in training)' else '' end
         else r.diff_type_en end as diff_type_en,
    r.rule_zh,
    r.rule_en,
    m.seed_table_grade,
    (m.seed_table_grade is not null and m.seed_table_grade <> '' and r.grade <> 'evidence_missing'
     and m.seed_table_grade <> r.grade) as differs_from_seed_table,
    g.train_evidence,
    g.infer_evidence,
    n.train_code_path,
    n.train_code_function,
    n.infer_code_path,
    n.infer_code_function,
    sp_t.path as train_stack_path,
    sp_i.path as infer_stack_path,
    coalesce(rm.priority, rd.priority) as priority,
    coalesce(rm.action_zh, rd.action_zh) as action_zh,
    coalesce(rm.action_en, rd.action_en) as action_en,
    g.rule_detail,
    -- per rank and per layer (docs/phases.md): sums over ranks mislead when the sides run a different
    -- number of ranks; *_tp_norm = per rank × TP (the work of one model replica) where TP is recorded
    g.train_ranks,
    g.infer_ranks,
    g.train_dur_ns,
    g.infer_dur_ns,
    g.train_calls / nullif(g.train_ranks, 0) as train_calls_per_rank,
    g.infer_calls / nullif(g.infer_ranks, 0) as infer_calls_per_rank,
    g.train_dur_ns / nullif(g.train_ranks, 0) as train_dur_ns_per_rank,
    g.infer_dur_ns / nullif(g.infer_ranks, 0) as infer_dur_ns_per_rank,
    g.train_calls / nullif(g.train_ranks, 0) / nullif(par.layers, 0) as train_calls_per_rank_per_layer,
    g.infer_calls / nullif(g.infer_ranks, 0) / nullif(par.layers, 0) as infer_calls_per_rank_per_layer,
    g.train_dur_ns / nullif(g.train_ranks, 0) * par.train_tp as train_dur_ns_tp_norm,
    g.infer_dur_ns / nullif(g.infer_ranks, 0) * par.infer_tp as infer_dur_ns_tp_norm
from graded g
left join {{ ref('int_runs_parallelism') }} par on par.run_id = g.run_id
join todo on todo.run_id = g.run_id
left join {{ ref('grading_rules') }} r on r.rule_id = g.final_rule
left join {{ ref('grades') }} gr on gr.grade = coalesce(r.grade, 'evidence_missing')
left join {{ ref('modules') }} m on m.module = g.module
left join notes n on n.run_id = g.run_id and n.module = g.module
left join stack_paths sp_t on sp_t.run_id = g.run_id and sp_t.module = g.module and sp_t.side = 'train'
left join stack_paths sp_i on sp_i.run_id = g.run_id and sp_i.module = g.module and sp_i.side = 'infer'
left join {{ ref('recommendations') }} rm on rm.module = g.module and rm.grade = coalesce(r.grade, 'evidence_missing')
left join {{ ref('recommendations') }} rd on rd.module = '*' and rd.grade = coalesce(r.grade, 'evidence_missing')
