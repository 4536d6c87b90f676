select run_id, side, rank, capture_id, message, start_ns, end_ns, global_tid
from {{ source('lake', 'mstx_ranges') }}
