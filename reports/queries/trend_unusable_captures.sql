-- trend: unusable_captures
-- title: captures that gave no usable evidence (evidence_missing, unparsed or error) per run
-- unit: captures
-- worse: higher
-- grain: one value per run with profiler captures (fct_run_capture_health)
select h.run_id, sum(h.captures_evidence_missing + h.captures_unparsed + h.captures_error) as value
from fct_run_capture_health h
group by h.run_id
