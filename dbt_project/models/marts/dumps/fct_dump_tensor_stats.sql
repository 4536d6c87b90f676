-- one row per run × side × rank × round: dumped tensor population and health
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
select
    run_id,
    side,
    rank,
    round,
    count(*) as tensor_slots,
    count(*) filter (where status = 'ok') as tensors_read,
    count(*) filter (where status in ('missing', 'unreadable')) as tensors_unreadable,
    count(*) filter (where status = 'msprobe_summary') as msprobe_summaries,
    count(*) filter (where md5 is not null) as md5_slots,
    count(*) filter (where dtype_mismatch) as dtype_mismatches,
    sum(nbytes) filter (where status = 'ok') as tensor_bytes,
    sum(nan_count) as nan_values,
    sum(posinf_count + neginf_count) as inf_values,
    count(distinct content_hash) as distinct_contents,
    count(distinct md5) as distinct_md5
from {{ ref('stg_msprobe__tensor_stats') }}
group by run_id, side, rank, round
