-- trend: first_divergence
-- title: position of the first divergent boundary in round 0 (lower = earlier in the forward pass)
-- unit: boundary position
-- grain: one value per dump-analysed run whose first divergence was found (fct_run_divergence)
select d.run_id, d.first_divergence_position as value
from fct_run_divergence d
where d.first_divergence_status = 'found'
