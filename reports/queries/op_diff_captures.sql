-- capture health of the run (evidence sources table)
select * from fct_capture_health where run_id = $run_id order by side desc, rank, path
