-- ranked op types per side
select * from fct_side_ops where run_id = $run_id order by side desc, rank_in_side
