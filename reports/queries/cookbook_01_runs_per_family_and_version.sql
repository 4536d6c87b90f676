-- cookbook: how many runs per model family and vllm-ascend version?
select model_family, coalesce(vllm_ascend, 'unknown') as vllm_ascend, count(*) as runs
from fct_run_registry
group by all
order by model_family, vllm_ascend
