-- grain: one run. The run registry for trends: model, family, step, host, created_at, the common
-- tool versions as columns (NULL = not recorded), tags, and the run's place in its family
-- (previous_run_id: previous run of the family; previous_profile_run_id: previous run with profiler
-- captures, the base of the change marts).
with v as (
    select * from {{ ref('int_runs_versioned') }}
),

tools as (
    select run_id,
           max(version) filter (where tool = 'torch-npu') as torch_npu,
           max(version) filter (where tool = 'cann') as cann,
           max(version) filter (where tool = 'vllm') as vllm,
           max(version) filter (where tool = 'vllm-ascend') as vllm_ascend,
           max(version) filter (where tool = 'megatron-core') as megatron_core,
           max(version) filter (where tool = 'msprobe') as msprobe,
           max(version) filter (where tool = 'torch') as torch
    from {{ ref('int_run_tool_versions_unnested') }}
    group by run_id
)

select
    v.run_id,
    v.has_profile,
    v.has_dumps,
    v.model_id,
    v.model_family,
    v.model_family_source,
    v.step,
    v.host,
    v.kind,
    v.train_backend,
    v.infer_backend,
    v.created_at,
    v.profile_registered_at,
    v.dumps_registered_at,
    t.torch_npu,
    t.cann,
    t.vllm,
    t.vllm_ascend,
    t.megatron_core,
    t.msprobe,
    t.torch,
    v.tool_versions,
    v.tags,
    v.settings,
    v.phases,
    v.dump_verdict,
    v.dump_consistency,
    row_number() over (order by v.created_at, v.run_id) as run_seq,
    row_number() over (partition by v.model_family order by v.created_at, v.run_id) as family_seq,
    lag(v.run_id) over (partition by v.model_family order by v.created_at, v.run_id) as previous_run_id,
    p.base_run_id as previous_profile_run_id
from v
left join tools t on t.run_id = v.run_id
left join {{ ref('int_run_pairs_ordered') }} p on p.run_id = v.run_id and p.pair_kind = 'profile'
