-- trend: red_rows
-- title: 🔴 comparison rows per run (one side fused where the other runs separate kernels, or two different fused kernels)
-- unit: rows
-- worse: higher
-- grain: one value per run with profiler captures (fct_run_grade_counts)
select r.run_id, coalesce(sum(g.comparison_rows) filter (where g.grade = 'red'), 0) as value
from fct_run_registry r
left join fct_run_grade_counts g on g.run_id = r.run_id
where r.has_profile
group by r.run_id
