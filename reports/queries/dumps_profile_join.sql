-- Profile ⋈ dump of one run (fct_boundary_kernels): whether the dump analysis was joined to the profile of
-- the same step, rank and model ('joined'), refused (the reason) or has no profile ('no_profile').
-- Parameters: $run_id
select distinct join_status, join_reason
from main.fct_boundary_kernels
where run_id = $run_id
