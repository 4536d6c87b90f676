-- cookbook: share of device time spent in attention kernels, per run and path
select k.run_id, k.side, r.model_family,
       round(coalesce(sum(k.total_dur_ns) filter (where k.category = 'attention'), 0)
             / nullif(sum(k.total_dur_ns), 0), 4) as attention_share
from fct_run_op_kernels k
join fct_run_registry r on r.run_id = k.run_id
group by k.run_id, k.side, r.model_family, r.run_seq
order by r.run_seq, k.side
