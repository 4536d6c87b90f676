-- The dump report's profile ⋈ dump section (fct_boundary_kernels): the first divergence and every
-- independent difference point of every round, each with the comparison row(s) and aligned kernel groups
-- that compute it (one row per group; one row with no group when none applies). Parameters: $run_id
select round, boundary, boundary_position, layer, status, role, is_first_divergence, tensor_ulp, module,
       comparison_grade, comparison_grade_emoji, alignment_position, relation, confidence, train_kernels,
       infer_kernels, train_first, train_last, infer_first, infer_last
from main.fct_boundary_kernels
where run_id = $run_id and join_status = 'joined' and (is_first_divergence or role = 'independent_point')
order by round, boundary_position, alignment_position nulls last, module
