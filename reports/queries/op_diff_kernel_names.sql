-- every kernel name of the run with its count (runtime_ops.json)
select * from fct_side_kernel_names where run_id = $run_id order by side, calls desc, kernel_name
