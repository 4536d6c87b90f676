-- cookbook: did the set of fused kernels change when vllm-ascend was upgraded (run vs previous run of its family)?
select c.base_run_id, c.run_id, c.side, c.op_type, c.change,
       b.vllm_ascend as base_vllm_ascend, r.vllm_ascend as run_vllm_ascend
from fct_change_kernels c
join fct_run_registry b on b.run_id = c.base_run_id
join fct_run_registry r on r.run_id = c.run_id
where c.fused and b.vllm_ascend is distinct from r.vllm_ascend
order by c.run_id, c.side, c.op_type
