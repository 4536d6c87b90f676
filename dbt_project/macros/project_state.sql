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
