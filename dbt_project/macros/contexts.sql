{#- The module a kernel's context names (docs/rules.md "Module by context"): what the capture says about the
    code that ran it, never its op name.

    1. frame: the kernel's call stack (Ascend PYTORCH_CALLCHAINS, torch with_stack python_function chain with
       its `nn.Module: <class>_<n>` module frames): the innermost frame that matches a `frame` rule of
       seeds/context_rules.csv decides (lowest priority among the rules matching that frame); a rule whose
       module is `none` (a Linear, a tensor-parallel layer) ends the walk: the context is known and names
       no family (context_module 'none');
    2. range: else the latest-started range of its capture (torch record_function / user_annotation, MSTX
       range) that holds the kernel's start and matches a `range` rule;
    3. else NULL: the context is unknown.
    Matching runs on distinct frames and the few ranges that match a rule, never per kernel row. -#}

{% macro tilake_kernel_contexts(kernels, stacks, ranges) %}
with k as (
    select * from {{ kernels }}
),
chains as (
    select distinct run_id, side, capture_id, callchain_id from k where callchain_id is not null
),
frames as (
    select s.run_id, s.side, s.capture_id, s.callchain_id, s.depth, s.frame
    from {{ stacks }} s
    join chains c
      on c.run_id = s.run_id and c.side = s.side and c.capture_id = s.capture_id
     and c.callchain_id = s.callchain_id
),
frame_hits as (
    select f.frame, r.module, r.rule_id
    from (select distinct frame from frames where frame is not null) f
    join {{ ref('context_rules') }} r on r.pattern_kind = 'frame' and regexp_matches(f.frame, r.pattern)
    qualify row_number() over (partition by f.frame order by r.priority, r.rule_id) = 1
),
chain_context as (
    select f.run_id, f.side, f.capture_id, f.callchain_id, h.module, h.rule_id
    from frames f
    join frame_hits h on h.frame = f.frame
    qualify row_number() over (partition by f.run_id, f.side, f.capture_id, f.callchain_id
                               order by f.depth, h.rule_id) = 1
),
range_hits as (
    select g.run_id, g.side, g.capture_id, g.start_ns, g.end_ns, r.module, r.rule_id
    from {{ ranges }} g
    join {{ ref('context_rules') }} r on r.pattern_kind = 'range' and regexp_matches(g.message, r.pattern)
    where g.start_ns is not null and g.end_ns is not null
    qualify row_number() over (partition by g.run_id, g.side, g.capture_id, g.start_ns, g.message
                               order by r.priority, r.rule_id) = 1
),
framed as (
    select k.*, cc.module as frame_module, cc.rule_id as frame_rule
    from k
    left join chain_context cc
      on cc.run_id = k.run_id and cc.side = k.side and cc.capture_id = k.capture_id
     and cc.callchain_id = k.callchain_id
),
ranged as (
    select f.*, rh.module as range_module, rh.rule_id as range_rule, rh.end_ns as range_end
    from framed f
    asof left join range_hits rh
      on rh.run_id = f.run_id and rh.side = f.side and rh.capture_id = f.capture_id and f.start_ns >= rh.start_ns
)
select
    r.* exclude (frame_module, frame_rule, range_module, range_rule, range_end),
    case when r.frame_module is not null then r.frame_module
         when r.range_module is not null and r.start_ns < r.range_end then r.range_module end as context_module,
    case when r.frame_module is not null then 'frame:' || r.frame_rule
         when r.range_module is not null and r.start_ns < r.range_end then 'range:' || r.range_rule end
        as context_rule
from ranged r
{% endmacro %}

{% macro tilake_basic_modules() -%}
{#- Catalog modules of basic ops (one element-wise, layout, matmul, softmax or reduction op each): a kernel of
    one of these, not fused, is shown in the module its context names (tilake_kernel_contexts); with no
    context it stays in its catalog module and never joins a fused family's row. -#}
('elementwise', 'cast_layout', 'linear', 'softmax', 'reduction', 'other', 'uncategorized')
{%- endmacro %}

{% macro tilake_family_modules() -%}
{#- Comparison modules of the fused families (attention, norm, RoPE, activation, KV cache, MoE): the math a fused
    kernel does on one side and basic ops may do on the other (one_side_basic_unplaced). -#}
('attention', 'residual_norm', 'rope', 'activation', 'kv_cache', 'moe')
{%- endmacro %}
