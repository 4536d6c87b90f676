-- A view over every ordered pair of runs (base_run_id, run_id): filter both columns, e.g.
--   select * from fct_change_divergence_any where base_run_id = 'A' and run_id = 'B'
-- Pairs where at least one run has a dump analysis (the other gives movement = evidence_missing).
-- Same logic as fct_change_divergence (macros/trends_changes.sql), computed when read.
{{ config(materialized='view') }}
{%- set pairs -%}
select a.run_id as base_run_id, b.run_id, 'any' as pair_kind
from {{ ref('fct_run_registry') }} as a, {{ ref('fct_run_registry') }} as b
where (a.has_dumps or b.has_dumps) and a.run_id <> b.run_id
{%- endset %}
{{ tilake_divergence_changes(pairs) }}
