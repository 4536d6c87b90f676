-- grain: one row per run × round × activation boundary of the dump analysis × aligned kernel group that
-- computes it (the boundary's modules from seeds/boundary_modules.csv, the n-th group of that module in
-- the same layer); one row with no group when none applies. The join is a claim about one computation:
-- it is refused (join_status 'refused', the reason in join_reason) when the dump's model, step or rank
-- differ from the profile's, and 'no_profile' when the run holds no kernel alignment. A view over the
-- dump rows and the alignment rows, which are written after the builds. A module whose own boundaries of the
-- layer (the kinds boundary_modules maps to it alone) are all EXACT is never joined to a shared boundary of that
-- layer: the dump shows its output bitwise equal, so it does not compute the difference.
{{ config(materialized='view') }}

with b as (
    select
        run_id,
        round,
        boundary,
        position as boundary_position,
        layer,
        op,
        status,
        role,
        is_first_divergence,
        diff_class,
        max_abs_diff,
        tensor_ulp,
        case when layer is not null then regexp_replace(boundary, '^L[0-9]+\.', '') else boundary end
            as boundary_suffix
    from {{ ref('stg_msprobe__boundary_results') }}
    where kind = 'activation'
),

dump_scope as (
    select
        run_id,
        nullif(json_extract_string(task_card, '$.model'), 'unknown') as dump_model,
        try_cast(json_extract_string(task_card, '$.dumps.train.step') as integer) as dump_step,
        try_cast(json_extract_string(task_card, '$.dumps.train.rank') as integer) as dump_train_rank,
        try_cast(json_extract_string(task_card, '$.dumps.infer.rank') as integer) as dump_infer_rank
    from {{ ref('stg_msprobe__dump_runs') }}
),

al_scope as (
    select run_id, min(train_rank) as train_rank, min(infer_rank) as infer_rank
    from {{ ref('stg_alignment__kernel_alignment') }}
    group by run_id
),

checked as (
    select
        d.run_id,
        case
            when a.run_id is null then 'no_profile'
            when
                d.dump_model is not null and p.model_id is not null and lower(d.dump_model) <> lower(p.model_id)
                or d.dump_step is not null and p.step is not null and d.dump_step <> p.step
                or d.dump_train_rank is not null and d.dump_train_rank <> a.train_rank
                or d.dump_infer_rank is not null and d.dump_infer_rank <> a.infer_rank
                then 'refused'
            else 'joined'
        end as join_status,
        case
            when a.run_id is null then 'the run holds no kernel alignment (no profile ingested, or evidence_missing)'
            else concat_ws(
                '; ',
                case
                    when d.dump_model is not null and p.model_id is not null
                        and lower(d.dump_model) <> lower(p.model_id)
                        then 'model differs: dump ' || d.dump_model || ', profile ' || p.model_id
                end,
                case
                    when d.dump_step is not null and p.step is not null and d.dump_step <> p.step
                        then 'step differs: dump step ' || d.dump_step || ', profile step ' || p.step
                end,
                case
                    when d.dump_train_rank is not null and d.dump_train_rank <> a.train_rank
                        then 'train rank differs: dump rank ' || d.dump_train_rank || ', profile rank ' || a.train_rank
                end,
                case
                    when d.dump_infer_rank is not null and d.dump_infer_rank <> a.infer_rank
                        then 'infer rank differs: dump rank ' || d.dump_infer_rank || ', profile rank ' || a.infer_rank
                end
            )
        end as join_reason
    from dump_scope as d
    left join {{ ref('stg_profiler__runs') }} as p on d.run_id = p.run_id
    left join al_scope as a on d.run_id = a.run_id
),

own as (
    -- boundary kinds one module computes alone (boundary_modules maps the suffix to that module only)
    select boundary_suffix, any_value(module) as module
    from {{ ref('boundary_modules') }}
    where per_layer
    group by boundary_suffix
    having count(distinct module) = 1
),

cleared as (
    -- modules whose own boundaries in a layer and round are all bitwise equal (EXACT): such a module is
    -- never blamed for a shared boundary of that layer (RoPE for attn_core.out when q/k after RoPE are EXACT)
    select
        b.run_id,
        b.round,
        b.layer,
        o.module
    from b
    inner join own as o on b.boundary_suffix = o.boundary_suffix
    where b.layer is not null
    group by b.run_id, b.round, b.layer, o.module
    having bool_and(b.status = 'EXACT')
),

mods as (
    select
        b.*,
        c.join_status,
        nullif(c.join_reason, '') as join_reason,
        bm.module,
        bm.module_ordinal
    from b
    inner join checked as c on b.run_id = c.run_id
    left join {{ ref('boundary_modules') }} as bm
        on
            b.boundary_suffix = bm.boundary_suffix
            and bm.per_layer = (b.layer is not null)
            and c.join_status = 'joined'
    where not exists (
        select 1 from cleared as x
        where
            x.run_id = b.run_id and x.round = b.round and x.layer = b.layer and x.module = bm.module
            and not exists (select 1 from own as o where o.boundary_suffix = b.boundary_suffix)
    )
),

grouped as (
    select
        mods.*,
        k.position as alignment_position,
        k.relation,
        k.confidence,
        k.train_kernels,
        k.infer_kernels,
        k.train_first,
        k.train_last,
        k.infer_first,
        k.infer_last,
        k.phase_pair
    from mods
    left join {{ ref('fct_kernel_alignment') }} as k
        on
            mods.run_id = k.run_id
            and mods.layer = k.layer
            and mods.module = k.module
            and (mods.module_ordinal is null or mods.module_ordinal = k.module_ordinal)
)

select
    g.run_id,
    g.round,
    g.boundary,
    g.boundary_position,
    g.layer,
    g.op,
    g.status,
    g.role,
    g.is_first_divergence,
    g.diff_class,
    g.max_abs_diff,
    g.tensor_ulp,
    g.join_status,
    g.join_reason,
    g.module,
    cmp.grade as comparison_grade,
    cmp.grade_emoji as comparison_grade_emoji,
    cmp.train_ops as comparison_train_ops,
    cmp.infer_ops as comparison_infer_ops,
    g.alignment_position,
    g.relation,
    g.confidence,
    g.train_kernels,
    g.infer_kernels,
    g.train_first,
    g.train_last,
    g.infer_first,
    g.infer_last,
    g.phase_pair
from grouped as g
left join {{ ref('fct_op_comparison') }} as cmp on g.run_id = cmp.run_id and g.module = cmp.module
