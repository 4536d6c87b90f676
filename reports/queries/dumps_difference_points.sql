-- Every independent difference point of a run, in round and execution order (fct_difference_points).
-- Parameters: $run_id
select point_no, round, boundary, op, status, diff_class, max_abs_diff, tensor_ulp, pattern,
       systematic_bias, downstream_differing, amplification
from main.fct_difference_points
where run_id = $run_id
order by point_no
