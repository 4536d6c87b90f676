-- cookbook: runs whose captures are not all healthy (no device evidence, unparsed, errors, truncated sessions)
select h.run_id, h.side, h.evidence, h.captures, h.captures_evidence_missing, h.captures_unparsed,
       h.captures_error, h.captures_truncated
from fct_run_capture_health h
where h.evidence <> 'device' or h.captures_truncated > 0
   or h.captures_evidence_missing + h.captures_unparsed + h.captures_error > 0
order by h.run_id, h.side
