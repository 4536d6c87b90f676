-- grain: run with a profile × metric (every metric of seeds/rl_metrics.csv, plus any other mismatch metric
-- the run's log holds): verl's measured train–rollout mismatch beside the op diff. A metric the log does
-- not hold (or a run with no log) is status evidence_missing with value NULL, never 0.
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
with runs as (
    select run_id, log_path, step as run_step from {{ ref('stg_profiler__runs') }}
),
m as (
    select * from {{ ref('stg_profiler__run_metrics') }}
),
-- the value of the profiled step when it was logged, else of the last logged step
picked as (
    select m.run_id, m.metric, m.step, m.value, m.source_path, m.line_no, m.format,
           count(*) over (partition by m.run_id, m.metric) as steps_logged
    from m join runs r using (run_id)
    qualify row_number() over (partition by m.run_id, m.metric
                               order by (m.step is not distinct from r.run_step) desc, m.step desc nulls last,
                                        m.line_no desc) = 1
),
wanted as (
    select r.run_id, s.metric from runs r cross join {{ ref('rl_metrics') }} s
    union
    select distinct run_id, metric from m
)
select
    w.run_id, w.metric,
    s.display_order, s.label_en, s.label_zh,
    p.step, p.value, coalesce(p.steps_logged, 0) as steps_logged,
    p.source_path, p.line_no, p.format,
    case when p.value is not null then 'ok' else 'evidence_missing' end as status,
    case when p.value is not null then null
         when r.log_path is null
             then 'no RL log recorded with the run (tilake run --log FILE; tilake scan keeps its run.log)'
         else 'not in the RL log ' || r.log_path end as reason
from wanted w
join runs r using (run_id)
left join {{ ref('rl_metrics') }} s using (metric)
left join picked p using (run_id, metric)
