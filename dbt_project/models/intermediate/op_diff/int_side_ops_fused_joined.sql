-- grain: run × side × op_type, with the comparison module it is shown in.
-- The fused join: an unfused op X on side B moves into module M when the other side A runs a fused
-- kernel F in M whose `replaces` sequence names X's base op, and B has no kernel of F's fusion
-- scope in M (e.g. train Add joins the residual+norm row against inference AddRmsNormBias).
-- A table, incremental by run: the report marts read it, and only new/re-ingested runs are joined.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},
{%- set due = tilake_todo_run_ids() %}
ops as (
    select a.*, todo.registered_at from {{ ref('int_side_ops_aggregated') }} a
    join todo using (run_id)
    where {{ tilake_run_filter('a.run_id', due) }}
),
fused as (
    select run_id, side, op_type as fused_op, module, fusion_scope,
           unnest(string_split(replaces, '+')) as replaced_base
    from ops
    where fused and replaces is not null and replaces <> ''
),
pulls as (
    select distinct x.run_id, x.side, x.op_type, f.module as joined_module, f.fused_op as joined_by,
           f.side as fused_side
    from ops x
    join fused f
      on f.run_id = x.run_id and f.side <> x.side and f.replaced_base = x.base_op
    where not x.fused
      and x.module <> f.module
      and not exists (
          select 1 from ops y
          where y.run_id = x.run_id and y.side = x.side and y.module = f.module
            and y.fusion_scope = f.fusion_scope)
),
one_pull as (
    select * from pulls
    qualify row_number() over (partition by run_id, side, op_type order by joined_module, joined_by) = 1
)
select o.*,
       coalesce(p.joined_module, o.module) as display_module,
       p.joined_by,
       p.joined_module is not null as joined
from ops o
left join one_pull p using (run_id, side, op_type)
