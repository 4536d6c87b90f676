-- grain: run × tool. Scalar entries of runs.tool_versions (scan's environment probe) plus user tags
-- named `tool.<name>` (e.g. `--tag tool.vllm-ascend=0.9.1` when ingesting recorded output); the tag
-- wins when both name the same tool. Tool names are normalised: lower case, '_' → '-'
-- (torch_npu → torch-npu, megatron_core → megatron-core). Keys starting with '_' and JSON
-- objects/lists are skipped.
with r as (
    select run_id, tool_versions, tags
    from {{ ref('int_runs_versioned') }}
    where has_profile
),

probed as (
    select r.run_id, u.k as raw_key, r.tool_versions::json ->> u.k as version, 2 as priority,
           json_type(r.tool_versions::json -> u.k) as value_type
    from r, unnest(json_keys(r.tool_versions::json)) as u (k)
    where r.tool_versions is not null and json_valid(r.tool_versions)
      and json_type(r.tool_versions::json) = 'OBJECT'
),

tagged as (
    select r.run_id, substr(u.k, 6) as raw_key, r.tags::json ->> u.k as version, 1 as priority,
           json_type(r.tags::json -> u.k) as value_type
    from r, unnest(json_keys(r.tags::json)) as u (k)
    where r.tags is not null and json_valid(r.tags) and json_type(r.tags::json) = 'OBJECT'
      and lower(u.k) like 'tool.%'
),

entries as (
    select run_id, replace(lower(trim(raw_key)), '_', '-') as tool, version, priority
    from (select * from probed union all select * from tagged)
    where value_type in ('VARCHAR', 'BIGINT', 'UBIGINT', 'DOUBLE')
      and not starts_with(raw_key, '_') and version is not null and version <> ''
)

select run_id, tool, version
from entries
qualify row_number() over (partition by run_id, tool order by priority) = 1
