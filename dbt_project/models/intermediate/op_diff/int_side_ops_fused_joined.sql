-- grain: run × side × op_type × display_module: an op type's calls in each comparison module it is shown in.
-- Module by context, never by op name (docs/rules.md): a basic op (not fused, catalog module in
-- tilake_basic_modules: element-wise, layout, matmul, softmax, reduction, other) is shown in the module its
-- context names (int_kernel_contexts_aggregated: call-stack frame or record_function range, macros/contexts.sql),
-- so the aten::mul of HF's apply_rotary_pos_emb sits in RoPE and an RMSNorm's mul in the norm row; with no
-- context it stays in its catalog module (Elementwise …) on both sides and joins no fused family's row.
-- Fused and family ops stay in their catalog module. context_known: every call of the group has a known context
-- (a family, or 'none': a Linear, a tensor-parallel layer). joined_by: the other side's fused op in the module whose
-- `replaces` names the op's base op (the fused kernel the moved op stands against).
-- A table, incremental by run: the report marts read it, and only new/re-ingested runs are joined.
{{ tilake_per_run_incremental('profile_registered_at', 'has_profile') }},
{%- set due = tilake_todo_run_ids() %}
ops as (
    select a.*, todo.registered_at from {{ ref('int_side_ops_aggregated') }} a
    join todo using (run_id)
    where {{ tilake_run_filter('a.run_id', due) }}
),
ctx as (
    select run_id, side, op_type, context_module, calls, kernel_rows, total_dur_ns, ranks
    from {{ ref('int_kernel_contexts_aggregated') }}
    where {{ tilake_run_filter('run_id', due) }} and run_id in (select run_id from todo)
),
placed as (
    select o.* exclude (calls, kernel_rows, total_dur_ns, ranks),
           case when not coalesce(o.fused, false) and o.module in {{ tilake_basic_modules() }}
                     and c.context_module is not null and c.context_module <> 'none'
                then c.context_module else o.module end as display_module,
           c.context_module is not null as context_known,
           coalesce(c.calls, o.calls) as calls,
           coalesce(c.kernel_rows, o.kernel_rows) as kernel_rows,
           coalesce(c.total_dur_ns, o.total_dur_ns) as total_dur_ns,
           coalesce(c.ranks, o.ranks) as ranks
    from ops o
    left join ctx c
      on c.run_id = o.run_id and c.side = o.side and c.op_type is not distinct from o.op_type
),
shown as (
    select run_id, side, op_type, display_module,
           any_value(category) as category, any_value(module) as module, bool_or(fused) as fused,
           any_value(fusion_scope) as fusion_scope, any_value(replaces) as replaces, any_value(base_op) as base_op,
           any_value(backend) as backend, any_value(equiv_class) as equiv_class, any_value(direction) as direction,
           sum(calls) as calls, sum(kernel_rows) as kernel_rows, sum(total_dur_ns) as total_dur_ns,
           max(ranks) as ranks, any_value(kernel_names) as kernel_names, any_value(example_kernel) as example_kernel,
           bool_or(op_type_derived) as op_type_derived, any_value(source_kinds) as source_kinds,
           any_value(category_source) as category_source, any_value(registered_at) as registered_at,
           bool_and(context_known) as context_known
    from placed
    group by run_id, side, op_type, display_module
),
fused as (
    select run_id, side, op_type as fused_op, display_module,
           unnest(string_split(replaces, '+')) as replaced_base
    from shown
    where fused and replaces is not null and replaces <> ''
),
against as (
    select s.run_id, s.side, s.op_type, s.display_module, min(f.fused_op) as joined_by
    from shown s
    join fused f
      on f.run_id = s.run_id and f.side <> s.side and f.display_module = s.display_module
     and f.replaced_base = s.base_op
    where s.display_module <> s.module
    group by all
)
select s.run_id, s.side, s.op_type, s.category, s.module, s.fused, s.fusion_scope, s.replaces, s.base_op, s.backend,
       s.equiv_class, s.direction, s.calls, s.kernel_rows, s.total_dur_ns, s.ranks, s.kernel_names, s.example_kernel,
       s.op_type_derived, s.source_kinds, s.category_source, s.registered_at, s.display_module, a.joined_by,
       s.display_module <> s.module as joined, s.context_known
from shown s
left join against a using (run_id, side, op_type, display_module)
