-- trend: device_time_ms
-- title: total device kernel time per run, both paths (ms = total_dur_ns / 1e6)
-- unit: ms
-- grain: one value per run with profiler captures (fct_run_op_kernels)
select r.run_id, coalesce(sum(k.total_dur_ns), 0) / 1e6 as value
from fct_run_registry r
left join fct_run_op_kernels k on k.run_id = r.run_id
where r.has_profile
group by r.run_id
