-- trend: k3_kl
-- title: k3 KL(rollout || training) of the profiled step (verl log)
-- unit: nats
-- worse: higher
-- grain: one value per run whose RL log holds rollout_corr/k3_kl (fct_run_metrics; runs without it are evidence_missing and left out, never 0)
select m.run_id, m.value
from fct_run_metrics m
where m.metric = 'rollout_corr/k3_kl' and m.status = 'ok'
