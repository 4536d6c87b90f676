-- trend: train_kernels
-- title: device kernel calls on the training path per run
-- unit: kernels
-- grain: one value per run with profiler captures (fct_run_op_kernels, side = train)
select r.run_id, coalesce(sum(k.calls), 0) as value
from fct_run_registry r
left join fct_run_op_kernels k on k.run_id = r.run_id and k.side = 'train'
where r.has_profile
group by r.run_id
