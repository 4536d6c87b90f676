-- Layers of each side of one run (fct_kernel_layers): method, confidence, odd layers. Parameters: $run_id
select side, rank, forward_window, forward_count, forwards_identical, layer, start_pos, end_pos, kernel_count,
       kernels, method, confidence, period, anchor, frame, odd, odd_reason, status, reason
from main.fct_kernel_layers
where run_id = $run_id
order by side desc, layer nulls first
