-- the core comparison table, in module order
select * from fct_op_comparison where run_id = $run_id order by display_order, module
