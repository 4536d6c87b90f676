-- grain: run. Backend of each side: the run metadata when known, else detected from runtime
-- call-stack frames (megatron/, fsdp, vllm/) or from inference-only kernels (vLLM-Ascend's
-- ReshapeAndCache / _triton_rope / FusedInferAttentionScore), else 'unknown'.
-- Reads the (small, incremental) per-op call-stack and kernel-name marts, never raw rows.
with frames as (
    select run_id, side,
           bool_or(stack ilike '%megatron%') as megatron,
           bool_or(stack ilike '%fsdp%') as fsdp,
           bool_or(stack ilike '%vllm%') as vllm,
           bool_or(stack ilike '%sglang%') as sglang
    from {{ ref('fct_op_call_stacks') }}
    group by run_id, side
),
kern as (
    select run_id,
           bool_or(side = 'infer' and (op_type in ('FusedInferAttentionScore') or kernel_name like 'ReshapeAndCache%'
                   or kernel_name like '_triton_rope%')) as vllm_kernels
    from {{ ref('int_kernel_names_aggregated') }}
    group by run_id
)
select r.run_id,
       case when r.train_backend is not null and r.train_backend <> 'unknown' then r.train_backend
            when ft.megatron then 'megatron' when ft.fsdp then 'fsdp' else 'unknown' end as train_backend_detected,
       case when r.infer_backend is not null and r.infer_backend <> 'unknown' then r.infer_backend
            when fi.vllm or k.vllm_kernels then 'vllm' when fi.sglang then 'sglang' else 'unknown'
       end as infer_backend_detected
from {{ ref('int_runs_versioned') }} r
left join frames ft on ft.run_id = r.run_id and ft.side = 'train'
left join frames fi on fi.run_id = r.run_id and fi.side = 'infer'
left join kern k on k.run_id = r.run_id
where r.has_profile
