-- kernels that match no op_catalog entry
select * from fct_uncategorized_kernels where run_id = $run_id order by side desc, calls desc, kernel_name
