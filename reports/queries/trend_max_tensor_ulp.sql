-- trend: max_tensor_ulp
-- title: largest tensor-scale ULP over the boundaries compared in round 0
-- unit: ULP
-- worse: higher
-- grain: one value per dump-analysed run with compared boundaries (fct_run_divergence)
select d.run_id, d.max_tensor_ulp as value
from fct_run_divergence d
where d.first_divergence_status <> 'evidence_missing' and d.max_tensor_ulp is not null
