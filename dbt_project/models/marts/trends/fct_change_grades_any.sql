-- A view over every ordered pair of runs (base_run_id, run_id): filter both columns, e.g.
--   select * from fct_change_grades_any where base_run_id = 'A' and run_id = 'B'
-- Same logic as fct_change_grades (macros/trends_changes.sql), computed when read.
{{ config(materialized='view') }}
{%- set pairs -%}
select a.run_id as base_run_id, b.run_id, 'any' as pair_kind
from {{ ref('fct_run_registry') }} as a, {{ ref('fct_run_registry') }} as b
where a.has_profile and b.has_profile and a.run_id <> b.run_id
{%- endset %}
{{ tilake_grade_changes(pairs) }}
