-- cookbook: the ten op types with the most device time in the latest run (both paths)
with latest as (
    select run_id from fct_run_registry where has_profile order by run_seq desc limit 1
)
select k.run_id, k.side, k.op_type, round(k.total_dur_ns / 1e6, 3) as device_ms, k.calls, k.category, k.fused
from fct_run_op_kernels k
join latest l on l.run_id = k.run_id
order by k.total_dur_ns desc, k.side, k.op_type
limit 10
