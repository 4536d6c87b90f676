-- grain: run × side × op_type: the most frequent runtime call stack of the op's host op
-- (PYTORCH_CALLCHAINS, innermost frame first as torch_npu stores it) and the MSTX phase.
-- Incremental by run: reads kernel rows, call stacks and MSTX ranges of new/re-ingested runs only.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},
{%- set due = tilake_todo_run_ids() %}
k as (
    select kk.run_id, kk.side, kk.rank, kk.capture_id, kk.op_type, kk.kernel_name, kk.callchain_id,
           kk.host_op_name, kk.start_ns
    from {{ tilake_staged('kernels', due) }} kk
    join todo on todo.run_id = kk.run_id
    where kk.callchain_id is not null
),
top_chain as (
    select run_id, side, op_type, rank, capture_id, callchain_id,
           min(host_op_name) as host_op_name, count(*) as kernels
    from k
    group by run_id, side, op_type, rank, capture_id, callchain_id
    qualify row_number() over (
        partition by run_id, side, op_type order by count(*) desc, rank, capture_id, callchain_id
    ) = 1
),
frames as (
    select t.run_id, t.side, t.op_type, t.host_op_name, t.kernels,
           string_agg(s.frame, chr(10) order by s.depth) as stack,
           count(s.frame) as depth
    from top_chain t
    join {{ tilake_staged('call_stacks', due) }} s
      on s.run_id = t.run_id and s.side = t.side and s.rank = t.rank and s.capture_id = t.capture_id
     and s.callchain_id = t.callchain_id
    group by all
),
phase as (
    select k.run_id, k.side, k.op_type, string_agg(distinct m.message, ', ' order by m.message) as phases
    from {{ tilake_staged('kernels', due) }} k
    join todo on todo.run_id = k.run_id
    join {{ tilake_staged('mstx_ranges', due) }} m
      on m.run_id = k.run_id and m.side = k.side and m.rank = k.rank
     and k.start_ns between m.start_ns and m.end_ns
    group by k.run_id, k.side, k.op_type
)
select f.*, p.phases, 'PYTORCH_CALLCHAINS' as stack_source, todo.registered_at
from frames f
join todo using (run_id)
left join phase p using (run_id, side, op_type)
