select
    run_id, side, rank, capture_id, source_kind, host_op_id, name as host_op_name, start_ns, end_ns,
    global_tid, connection_id, sequence_number, input_shapes, input_dtypes, callchain_id,
    kernel_count, coalesce(call_count, 1) as call_count
from {{ source('lake', 'host_ops') }}
