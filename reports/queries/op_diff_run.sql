-- one run with both sides' evidence
select * from dim_runs where run_id = $run_id
