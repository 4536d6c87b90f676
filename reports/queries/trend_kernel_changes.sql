-- trend: kernel_changes
-- title: op types added or removed (both paths) against the previous run of the same model family
-- unit: op types
-- grain: one value per run that has a previous profiled run in its family (fct_change_kernels); pairs with a
--        side lacking evidence are left out (evidence_missing, not 0)
select r.run_id, count(c.op_type) filter (where c.change in ('added', 'removed')) as value
from fct_run_registry r
left join fct_change_kernels c on c.run_id = r.run_id and c.base_run_id = r.previous_profile_run_id
where r.previous_profile_run_id is not null
group by r.run_id
having count(*) filter (where c.change = 'evidence_missing') = 0
