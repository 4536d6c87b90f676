-- device time per comparison row and side: the summed kernel time (ns) and calls of the row's op types
-- (fct_side_ops), so a row's cost sits next to its counts; BIGINT, never HUGEINT
with row_ops as (
    select c.module, s.side,
           unnest(case when s.side = 'train' then c.train_ops else c.infer_ops end) as op_type
    from fct_op_comparison c
    cross join (values ('train'), ('infer')) s(side)
    where c.run_id = $run_id
)
select r.module, r.side,
       cast(sum(o.total_dur_ns) as bigint) as total_dur_ns,
       cast(sum(o.calls) as bigint) as calls
from row_ops r
join fct_side_ops o on o.run_id = $run_id and o.side = r.side and o.op_type = r.op_type
group by r.module, r.side
order by r.module, r.side
