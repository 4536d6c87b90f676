-- trend: probs_pearson_corr
-- title: Pearson correlation of training and rollout token probabilities (verl log)
-- unit: correlation
-- worse: lower
-- grain: one value per run whose RL log holds training/rollout_actor_probs_pearson_corr (fct_run_metrics; runs without it are evidence_missing and left out, never 0)
select m.run_id, m.value
from fct_run_metrics m
where m.metric = 'training/rollout_actor_probs_pearson_corr' and m.status = 'ok'
