-- cookbook: is the first divergence moving earlier over training steps?
select r.model_family, r.step, d.run_id, d.first_divergence_position, d.first_divergence_boundary,
       d.first_divergence_class, d.max_tensor_ulp
from fct_run_divergence d
join fct_run_registry r on r.run_id = d.run_id
where d.first_divergence_status = 'found'
order by r.model_family, r.step, r.run_seq
