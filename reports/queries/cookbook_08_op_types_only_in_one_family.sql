-- cookbook: op types that only one model family ever ran (per path)
with fam as (
    select r.model_family, k.side, k.op_type
    from fct_run_op_kernels k
    join fct_run_registry r on r.run_id = k.run_id
    group by all
)
select side, op_type, min(model_family) as only_in_family
from fam
group by side, op_type
having count(distinct model_family) = 1
   and (select count(distinct model_family) from fam) > 1
order by side, op_type
