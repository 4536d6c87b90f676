{#- Reading only the runs an incremental model (re)builds.

    The staging views read every file of a raw table (raw/<table>/**/*.parquet). In a lake of N runs
    that is N × (sides × ranks) files, and DuckDB opens every one of them even when a join keeps one
    run's rows (a join does not prune Hive partitions; only a constant filter does).
    An incremental model instead asks, at compile time, which runs it will (re)build and reads only
    those runs' files:

      {{ tilake_per_run_incremental() }},
      k as (select … from {{ tilake_staged('kernels') }} k join todo using (run_id))

    `tilake_staged(table)` is the staging view (`stg_profiler__<table>`) on a first build, a
    --full-refresh, or when more than `tilake_max_listed_runs` runs are due; otherwise it is the
    same staging SELECT over `read_parquet([<schema file>, <files of the due runs>], hive_partitioning=true)`, with the file
    list taken from DuckDB's glob() at compile time. Measured on a 1 000-run lake (≈ 2 900 kernel
    files): 0.5–0.7 s per reference to the view vs a few ms for one run's files. -#}

{% macro tilake_todo_run_ids() %}
    {#- Run ids (sorted list) the current incremental model will (re)build, or none = read everything.
        Same runs as the model's `todo` CTE: the version column and flag come from the config that
        tilake_per_run_incremental() set (meta tilake_registered_at / tilake_has). -#}
    {%- if not execute or not is_incremental() -%}{{ return(none) }}{%- endif -%}
    {#- tilake's replay of a new run's build (tilake.lake.warehouse.compile_replay) compiles each model once
        with a marker in place of the list and fills the due runs in at every build -#}
    {%- if env_var('TILAKE_REPLAY_TEMPLATE', '') -%}{{ return(['#tilake-due-runs#']) }}{%- endif -%}
    {%- set meta = config.get('meta') or {} -%}
    {%- set registered_at = meta.get('tilake_registered_at', 'profile_registered_at') -%}
    {%- set has = meta.get('tilake_has', 'has_profile') -%}
    {%- set q -%}
        select v.run_id from {{ ref('int_runs_versioned') }} v
        where v.{{ has }}
          and not exists (select 1 from {{ this }} t
                          where t.run_id = v.run_id and t.registered_at = v.{{ registered_at }})
        order by 1
    {%- endset -%}
    {%- set ids = run_query(q).columns[0].values() | list -%}
    {%- if ids | length > var('tilake_max_listed_runs', 200) -%}{{ return(none) }}{%- endif -%}
    {{ return(ids) }}
{% endmacro %}

{% macro tilake_sql_str(s) -%}
    '{{ s | replace("'", "''") }}'
{%- endmacro %}

{% macro tilake_run_files(table, run_ids) %}
    {#- read_parquet over raw/<table>/_schema/…/schema.parquet (the schema) plus every file of the given
        runs, as a Hive dataset typed like the source (its meta tilake_hive_types, see lake/schema.py). -#}
    {%- set base = env_var('TILAKE_LAKE', '../tilake-lake') ~ '/raw/' ~ table -%}
    {%- set src = graph.sources.values() | selectattr('name', 'equalto', table) | first -%}
    {%- set files = [base ~ '/_schema/**/*.parquet'] -%}
    {%- if run_ids -%}
        {%- set q -%}
            select file from (
            {%- for r in run_ids %}
                select file from glob({{ tilake_sql_str(base ~ '/run_id=' ~ r ~ '/**/*.parquet') }})
                {%- if not loop.last %} union all{% endif %}
            {%- endfor %}
            ) order by 1
        {%- endset -%}
        {%- for f in run_query(q).columns[0].values() -%}{%- do files.append(f) -%}{%- endfor -%}
    {%- endif -%}
    read_parquet([{%- for f in files -%}{{ tilake_sql_str(f) }}{{ ', ' if not loop.last }}{%- endfor -%}],
                 hive_partitioning=true, hive_types={{ src.meta.tilake_hive_types }}, union_by_name=false)
{%- endmacro %}

{% macro tilake_staged(table, run_ids=none) %}
    {#- The staging relation of a lake table, restricted to `run_ids` when given (see above). -#}
    {%- if run_ids is none -%}{{ ref('stg_profiler__' ~ table) }}
    {%- elif run_ids == ['#tilake-due-runs#'] -%}
        {#- the replay template: a constant run_id filter on the view prunes its Hive partitions all the same -#}
        (select * from {{ ref('stg_profiler__' ~ table) }} where {{ tilake_run_filter('run_id', run_ids) }})
    {%- else -%}({{ tilake_stage_select(table, tilake_run_files(table, run_ids)) }})
    {%- endif -%}
{% endmacro %}

{% macro tilake_run_filter(column, run_ids) -%}
    {#- `column in (…)` for the due runs, or `true` when everything is read. -#}
    {%- if run_ids is none -%}true
    {%- elif run_ids | length == 0 -%}false
    {%- else -%}{{ column }} in ({%- for r in run_ids -%}{{ tilake_sql_str(r) }}{{ ', ' if not loop.last }}{%- endfor -%})
    {%- endif -%}
{%- endmacro %}
