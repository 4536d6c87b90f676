-- grain: one row per run × side × layer of the forward pass aligned (a side without layers: one row,
-- layer NULL, with the reason). A view: pipeline/align.py writes the rows after each build.
{{ config(materialized='view') }}

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
from {{ ref('stg_alignment__kernel_layers') }}
