-- cookbook: the latest run of each model family with its 🔴/🟠 row counts and tool versions
select r.model_family, r.run_id, r.created_at, r.vllm_ascend, r.torch_npu,
       coalesce(sum(g.comparison_rows) filter (where g.grade = 'red'), 0) as red_rows,
       coalesce(sum(g.comparison_rows) filter (where g.grade = 'orange'), 0) as orange_rows
from fct_run_registry r
left join fct_run_grade_counts g on g.run_id = r.run_id
where r.family_seq = (select max(x.family_seq) from fct_run_registry x where x.model_family = r.model_family)
group by all
order by r.model_family
