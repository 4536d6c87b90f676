-- First divergence and amplification chain per run and round (reads the fct_boundary_diffs mart).
-- Parameters: $run_id
select round, first_divergence_status, first_divergence, position, boundary, status, diff_class,
       max_abs_diff, tensor_ulp, growth_vs_first
from main.fct_boundary_diffs
where run_id = $run_id and (is_first_divergence or growth_vs_first is not null or first_divergence_status <> 'found')
order by round, position
