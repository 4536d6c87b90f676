select
    run_id, side, rank, capture_id, source_kind, global_task_id, device_id, stream_id, task_id,
    start_ns, end_ns, dur_ns, kernel_name, op_type, op_type_derived, accelerator, device_task_type,
    block_dim, input_shapes, input_dtypes, input_formats, output_shapes, output_dtypes,
    output_formats, connection_id, cann_api_name, host_op_id, host_op_name, callchain_id,
    coalesce(call_count, 1) as call_count
from {{ source('lake', 'kernels') }}
