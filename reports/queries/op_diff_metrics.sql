-- verl's measured train–rollout mismatch of the run (evidence_missing when not logged)
select * from fct_run_metrics where run_id = $run_id order by display_order nulls last, metric
