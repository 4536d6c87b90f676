-- trend: difference_points
-- title: independent difference points per dump-analysed run (all stub rounds)
-- unit: points
-- worse: higher
-- grain: one value per dump-analysed run with compared boundaries (fct_run_divergence)
select d.run_id, d.difference_points as value
from fct_run_divergence d
where d.first_divergence_status <> 'evidence_missing'
