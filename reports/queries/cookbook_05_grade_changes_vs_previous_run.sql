-- cookbook: which comparison rows changed grade against the previous run of the same family?
select c.base_run_id, c.run_id, c.module, c.base_grade, c.run_grade, c.change
from fct_change_grades c
join fct_run_registry r on r.run_id = c.run_id
order by r.run_seq, c.module
