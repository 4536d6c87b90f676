-- grain: see _trends__models.yml. Each run against the previous run of its model family
-- (int_run_pairs_ordered, pair_kind 'dumps'); logic in macros/trends_changes.sql.
{%- set pairs -%}
select base_run_id, run_id, pair_kind
from {{ ref('int_run_pairs_ordered') }}
where pair_kind = 'dumps'
{%- endset %}
{{ tilake_divergence_changes(pairs) }}
