{#- Incremental-by-run pattern of the trend marts (materialized='incremental', unique_key='run_id',
    incremental_strategy='delete+insert'). Any per-run mart can adopt it:

      {{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert',
                post_hook="{{ tilake_delete_removed_runs() }}") }}
      with todo as ({{ tilake_runs_to_build() }})
      select ..., todo.registered_at from <per-run source> join todo using (run_id)

    A run is (re)built when its registration timestamp (runs.created_at, or dump_runs.created_at
    with registered_at='dumps_registered_at') is not yet in the mart; rows of runs that left the
    lake are deleted after each build. -#}

{% macro tilake_runs_to_build(registered_at='profile_registered_at', has='has_profile', columns=[]) %}
    select v.run_id, v.{{ registered_at }} as registered_at
           {%- for c in columns %}, v.{{ c }}{% endfor %}
    from {{ ref('int_runs_versioned') }} v
    where v.{{ has }}
    {% if is_incremental() %}
      and not exists (select 1 from {{ this }} t
                      where t.run_id = v.run_id and t.registered_at = v.{{ registered_at }})
    {% endif %}
{% endmacro %}

{% macro tilake_delete_removed_runs(has='has_profile') %}
delete from {{ this }} where run_id not in (select run_id from {{ ref('int_runs_versioned') }} where {{ has }})
{% endmacro %}

{#- The whole per-run incremental header in one call: the config and the `todo` CTE of runs to
    (re)build. Use as the first lines of a model, then continue with `, next_cte as (…)` or a select:

      {{ tilake_per_run_incremental() }}
      select … from … join todo using (run_id)
-#}
{% macro tilake_per_run_incremental(registered_at='profile_registered_at', has='has_profile', columns=[]) %}
{{ config(
    materialized='incremental',
    unique_key='run_id',
    incremental_strategy='delete+insert',
    post_hook="{{ tilake_delete_removed_runs('" ~ has ~ "') }}",
    meta={'tilake_registered_at': registered_at, 'tilake_has': has}
) }}
with todo as (
    {{ tilake_runs_to_build(registered_at, has, columns) }}
)
{% endmacro %}
