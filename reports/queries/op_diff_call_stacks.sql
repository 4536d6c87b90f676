-- runtime call stacks per side and op type
select * from fct_op_call_stacks where run_id = $run_id order by side desc, op_type
