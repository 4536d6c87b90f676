-- what each side compares: phases, kernel calls, ranks, TP and the parallel note
select * from fct_phase_scope where run_id = $run_id order by side desc
