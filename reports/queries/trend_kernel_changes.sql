-- trend: kernel_changes
-- title: op types added or removed (both paths) against the previous run of the same model family
-- unit: op types
-- grain: one value per run that has a previous run in its family (fct_change_kernels)
select c.run_id, count(*) filter (where c.change in ('added', 'removed')) as value
from fct_change_kernels c
group by c.run_id
having count(*) filter (where c.change = 'evidence_missing') = 0
