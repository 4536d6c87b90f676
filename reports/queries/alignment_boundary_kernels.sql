-- Profile ⋈ dump of one run (fct_boundary_kernels), round 0: every boundary that differs or is the
-- first divergence, with the comparison row and aligned kernels computing it, and the join status.
-- Parameters: $run_id
select boundary, boundary_position, layer, op, status, role, is_first_divergence, diff_class, max_abs_diff,
       tensor_ulp, join_status, join_reason, module, comparison_grade, comparison_grade_emoji,
       comparison_train_ops, comparison_infer_ops, alignment_position, relation, confidence, train_kernels,
       infer_kernels, train_first, train_last, infer_first, infer_last
from main.fct_boundary_kernels
where run_id = $run_id and round = 0
order by boundary_position, alignment_position
