select run_id, side, rank, capture_id, callchain_id, depth, frame
from {{ source('lake', 'call_stacks') }}
