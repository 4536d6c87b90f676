-- staging view of raw `kernel_layers` (written by pipeline/align.py after each build): names as in the lake
select
    run_id,
    side,
    rank,
    forward_window,
    forward_count,
    forwards_identical,
    layer,
    start_pos,
    end_pos,
    kernel_count,
    kernels,
    method,
    confidence,
    period,
    anchor,
    frame,
    odd,
    odd_reason,
    status,
    reason,
    created_at
from {{ source('alignment', 'kernel_layers') }}
