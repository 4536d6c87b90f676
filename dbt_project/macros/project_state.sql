{#- Record which version of this dbt project built the warehouse (see on-run-end in dbt_project.yml), and
    the user rules merged into its seeds (JSON {dir, sha256, files}; '' without rules, tilake.lake.rules). -#}
{% macro tilake_record_project_state(results) %}
    {%- if execute and flags.WHICH in ('build', 'run') and not invocation_args_dict.get('select') -%}
        {%- set failed = results | selectattr('status', 'in', ['error', 'runtime error', 'skipped']) | list -%}
        {%- if failed | length == 0 -%}
            create or replace table main.tilake_project_state as
            select {{ tilake_sql_str(var('tilake_project_sha', '')) }} as project_sha256,
                   current_timestamp as built_at,
                   {{ tilake_sql_str(var('tilake_rules', '')) }} as rules
        {%- endif -%}
    {%- endif -%}
{% endmacro %}

{#- Marts without HUGEINT: DuckDB's sum() of a BIGINT is a HUGEINT (int128), which pandas, Excel
    exports and Arrow readers turn into floats; every mart column of that type (or a list of it) becomes BIGINT after
    the model is built (post-hook in dbt_project.yml; sums of int64 counts and nanoseconds stay far
    below 2^63). Incremental inserts into the altered table cast on the way in. -#}
{% macro tilake_no_hugeint() %}
    {%- if not execute -%}{{ return('') }}{%- endif -%}
    {%- set q -%}
        select column_name, replace(data_type, 'HUGEINT', 'BIGINT') as new_type from information_schema.columns
        where table_catalog = {{ tilake_sql_str(this.database) }} and table_schema = {{ tilake_sql_str(this.schema) }}
          and table_name = {{ tilake_sql_str(this.identifier) }} and data_type like '%HUGEINT%'
        order by ordinal_position
    {%- endset -%}
    {%- set res = run_query(q) -%}
    {%- if res.rows | length == 0 -%}{{ return('select 1') }}{%- endif -%}
    {%- for r in res.rows -%}
        alter table {{ this }} alter column "{{ r[0] }}" type {{ r[1] }};
    {% endfor -%}
{% endmacro %}
