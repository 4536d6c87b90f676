-- fused kernels joined against the other side's unfused ops
select * from fct_fused_matches where run_id = $run_id order by module, fused_side, fused_op
