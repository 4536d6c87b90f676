-- one row per gated run: the bitwise acceptance gate (tilake dumps gate) as the Python gate decided it,
-- with the boundaries that keep it from passing (failing + not compared) as one figure for trends
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
select
    g.run_id,
    g.outcome,
    g.passed,
    g.line,
    g.map_name,
    g.budget_path,
    g.budget_sha256,
    g.mapped,
    g.exact,
    g.within_budget,
    g.failing,
    g.uncompared,
    g.not_mapped,
    g.failing + g.uncompared as boundaries_blocking,
    g.first_failing_boundary,
    g.first_failing_status,
    g.first_failing_max_elem_ulp,
    g.max_elem_ulp,
    g.failures,
    g.gated_at
from {{ ref('stg_msprobe__dump_gates') }} as g
