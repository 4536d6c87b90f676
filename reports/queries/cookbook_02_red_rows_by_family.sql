-- cookbook: which model family has the most 🔴 rows (and per run)?
select r.model_family,
       sum(g.comparison_rows) as red_rows,
       count(distinct r.run_id) as runs,
       round(sum(g.comparison_rows) / count(distinct r.run_id), 2) as red_rows_per_run
from fct_run_registry r
join fct_run_grade_counts g on g.run_id = r.run_id and g.grade = 'red'
group by r.model_family
order by red_rows desc, r.model_family
