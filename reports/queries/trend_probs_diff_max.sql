-- trend: probs_diff_max
-- title: max |p_train - p_rollout| of the profiled step (verl log)
-- unit: probability
-- worse: higher
-- grain: one value per run whose RL log holds training/rollout_probs_diff_max (fct_run_metrics; runs without it are evidence_missing and left out, never 0)
select m.run_id, m.value
from fct_run_metrics m
where m.metric = 'training/rollout_probs_diff_max' and m.status = 'ok'
