-- device time per comparison row and side: the summed kernel time (ns) and calls of the row's ops, as the row
-- holds them (fct_op_comparison: an op type split across rows by its context counts in each row once);
-- BIGINT, never HUGEINT
select module, side, total_dur_ns, calls
from (
    select module, 'train' as side, cast(train_dur_ns as bigint) as total_dur_ns, cast(train_calls as bigint) as calls
    from fct_op_comparison where run_id = $run_id and train_ops is not null
    union all
    select module, 'infer' as side, cast(infer_dur_ns as bigint) as total_dur_ns, cast(infer_calls as bigint) as calls
    from fct_op_comparison where run_id = $run_id and infer_ops is not null
)
order by module, side
