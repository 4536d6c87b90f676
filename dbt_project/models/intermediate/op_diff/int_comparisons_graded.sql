-- grain: run × comparison module (attention, residual_norm, …): both sides' ops and the grade.
-- Each rule of seeds/grading_rules.csv is a boolean flag computed here; the lowest-priority-number
-- rule that holds decides grade and difference type (rules live in data, conditions in SQL).
with ops as (
    select * from {{ ref('int_side_ops_fused_joined') }}
),
per_side as (
    select run_id, display_module as module, side,
           list(op_type order by calls desc, op_type) as ops,
           list(calls order by calls desc, op_type) as op_calls,
           sum(calls) as calls,
           cast(sum(total_dur_ns) as bigint) as dur_ns,
           max(ranks) as ranks,
           list_sort(list(distinct op_type)) as op_set,
           list_sort(list(distinct base_op)) as base_set,
           bool_or(fused) as has_fused,
           count(distinct base_op) filter (where not fused) as n_unfused_base,
           list_sort(list(distinct fusion_scope) filter (where fused)) as scopes,
           list_sort(list(distinct equiv_class) filter (where equiv_class is not null)) as equivs,
           list_sort(list(distinct joined_by) filter (where joined)) as joined_by,
           -- kernels no catalog row names (placed by the fallback or uncategorized): what they compute is unknown
           list_sort(list(distinct op_type) filter (where category_source <> 'catalog')) as unknown_ops,
           -- base ops the row's fused kernels replace (catalog `replaces`)
           list_distinct(flatten(list(string_split(replaces, '+'))
                                 filter (where fused and replaces is not null and replaces <> ''))) as replaced_bases
    from ops
    group by run_id, display_module, side
),
side_loose as (
    -- base ops a side runs as basic ops of unknown context (left in their catalog module): they may compute
    -- a fused family's math that the other side runs fused, but nothing says so (docs/rules.md)
    select run_id, side,
           list_sort(list(distinct base_op) filter (where not fused and not context_known
                                                    and display_module = module
                                                    and module in {{ tilake_basic_modules() }})) as loose_bases
    from ops group by run_id, side
),
side_unplaced as (
    -- kernel calls a side runs in no module (uncategorized / other): the same math as a module the other
    -- side shows may run there under another kernel family or unlinked, so "one side only" is not evidence
    select run_id, side, sum(calls) filter (where display_module in ('other', 'uncategorized')) as unplaced
    from ops group by run_id, side
),
side_equivs as (
    select run_id, side, list_sort(list(distinct equiv_class) filter (where equiv_class is not null)) as all_equivs
    from ops group by run_id, side
),
modules as (
    select distinct run_id, module from per_side
),
fused_pairs as (
    select t.run_id, t.display_module as module,
           bool_or(t.fusion_scope = i.fusion_scope and t.backend = i.backend and t.base_op <> i.base_op)
               as diff_fused_same_backend,
           bool_or(t.fusion_scope = i.fusion_scope and t.backend <> i.backend) as diff_backend
    from ops t
    join ops i on i.run_id = t.run_id and i.display_module = t.display_module
    where t.side = 'train' and i.side = 'infer' and t.fused and i.fused
    group by t.run_id, t.display_module
),
joined as (
    select m.run_id, m.module,
           t.ops as train_ops, t.op_calls as train_op_calls, coalesce(t.calls, 0) as train_calls,
           i.ops as infer_ops, i.op_calls as infer_op_calls, coalesce(i.calls, 0) as infer_calls,
           t.dur_ns as train_dur_ns, i.dur_ns as infer_dur_ns, t.ranks as train_ranks, i.ranks as infer_ranks,
           t.op_set as t_set, i.op_set as i_set, t.base_set as t_base, i.base_set as i_base,
           coalesce(t.has_fused, false) as t_fused, coalesce(i.has_fused, false) as i_fused,
           coalesce(t.n_unfused_base, 0) as t_unfused, coalesce(i.n_unfused_base, 0) as i_unfused,
           t.scopes as t_scopes, i.scopes as i_scopes, t.equivs as t_equivs, i.equivs as i_equivs,
           list_concat(coalesce(t.joined_by, []), coalesce(i.joined_by, [])) as joined_by,
           te.all_equivs as t_all_equivs, ie.all_equivs as i_all_equivs,
           t.replaced_bases as t_replaced, i.replaced_bases as i_replaced,
           t.unknown_ops as t_unknown, i.unknown_ops as i_unknown,
           tl.loose_bases as t_loose, il.loose_bases as i_loose,
           coalesce(tu.unplaced, 0) as t_unplaced, coalesce(iu.unplaced, 0) as i_unplaced,
           coalesce(fp.diff_fused_same_backend, false) as diff_fused_same_backend,
           coalesce(fp.diff_backend, false) as diff_backend
    from modules m
    left join per_side t on t.run_id = m.run_id and t.module = m.module and t.side = 'train'
    left join per_side i on i.run_id = m.run_id and i.module = m.module and i.side = 'infer'
    left join side_equivs te on te.run_id = m.run_id and te.side = 'train'
    left join side_equivs ie on ie.run_id = m.run_id and ie.side = 'infer'
    left join side_unplaced tu on tu.run_id = m.run_id and tu.side = 'train'
    left join side_unplaced iu on iu.run_id = m.run_id and iu.side = 'infer'
    left join side_loose tl on tl.run_id = m.run_id and tl.side = 'train'
    left join side_loose il on il.run_id = m.run_id and il.side = 'infer'
    left join fused_pairs fp on fp.run_id = m.run_id and fp.module = m.module
),
sigs as (
    select run_id, module,
           bool_or(coalesce(dtype_differs, false)) as dtype_differs,
           bool_or(coalesce(format_differs, false)) as format_differs,
           bool_or(coalesce(hf32_differs, false)) as hf32_differs,
           string_agg(signature_text, '; ' order by op_type)
               filter (where dtype_differs or format_differs or hf32_differs) as signature_detail
    from {{ ref('int_op_signatures_compared') }}
    group by run_id, module
),
flags as (
    select j.*,
        j.t_set is not null and j.i_set is not null as both_sides,
        (j.t_set is null) <> (j.i_set is null) as one_side,
        coalesce(s.dtype_differs, false) as dtype_differs,
        coalesce(s.format_differs, false) as format_differs,
        coalesce(s.hf32_differs, false) as hf32_differs,
        s.signature_detail
    from joined j
    left join sigs s using (run_id, module)
),
rule_hits as (
    select f.run_id, f.module, r.rule_id, r.priority
    from flags f
    cross join {{ ref('grading_rules') }} r
    where case r.rule_id
        when 'same_ops_dtype_differs' then f.both_sides and f.t_set = f.i_set and f.dtype_differs
        when 'same_ops_hf32_differs' then f.both_sides and f.t_set = f.i_set and f.hf32_differs
        when 'same_ops_format_differs' then f.both_sides and f.t_set = f.i_set and f.format_differs
        when 'same_ops' then f.both_sides and f.t_set = f.i_set
        when 'same_base_op' then f.both_sides and f.t_base = f.i_base
        when 'one_side_with_equiv' then f.one_side and len(list_intersect(
                coalesce(f.t_equivs, f.i_equivs, []),
                coalesce(case when f.t_set is null then f.t_all_equivs else f.i_all_equivs end, []))) > 0
        when 'unknown_kernel_possibly_fused' then f.module in {{ tilake_family_modules() }}
                and len(list_concat(coalesce(f.t_unknown, []), coalesce(f.i_unknown, []))) > 0
        when 'one_side_basic_unplaced' then f.one_side and f.module in {{ tilake_family_modules() }} and (
                (f.t_set is null and len(list_intersect(list_concat(coalesce(f.i_replaced, []), f.i_base),
                                                        coalesce(f.t_loose, []))) > 0) or
                (f.i_set is null and len(list_intersect(list_concat(coalesce(f.t_replaced, []), f.t_base),
                                                        coalesce(f.i_loose, []))) > 0))
        when 'one_side_other_unplaced' then f.one_side and f.module not in ('other', 'uncategorized') and (
                (f.t_set is null and f.t_unplaced > 0) or (f.i_set is null and f.i_unplaced > 0))
        when 'one_side_no_equiv' then f.one_side
        when 'fused_vs_unfused' then f.both_sides and (
                (f.t_fused and not f.i_fused and f.i_unfused >= 2) or
                (f.i_fused and not f.t_fused and f.t_unfused >= 2))
        when 'different_fused_kernel' then f.both_sides and f.diff_fused_same_backend
        when 'fusion_degree' then f.both_sides and (f.t_fused or f.i_fused) and (
                coalesce(f.t_scopes, []) <> coalesce(f.i_scopes, []) or f.t_fused <> f.i_fused)
        when 'different_backend' then f.both_sides and f.diff_backend
        when 'equivalent_impl' then f.both_sides
                and len(list_intersect(coalesce(f.t_equivs, []), coalesce(f.i_equivs, []))) > 0
        when 'different_impl' then f.both_sides
        else false end
),
best as (
    select * from rule_hits
    qualify row_number() over (partition by run_id, module order by priority) = 1
)
select
    f.run_id, f.module,
    f.train_ops, f.train_op_calls, f.train_calls,
    f.infer_ops, f.infer_op_calls, f.infer_calls,
    f.t_fused as train_fused, f.i_fused as infer_fused,
    f.joined_by,
    case when f.t_set is null and f.i_set is not null then 'infer'
         when f.i_set is null and f.t_set is not null then 'train' end as only_side,
    b.rule_id,
    -- what differs inside the row, in words: the signatures (dtype/format/HF32) of op types both sides
    -- run, or the op versions only one side runs (same_base_op: MatMulV2 vs MatMulV3)
    case when b.rule_id = 'unknown_kernel_possibly_fused' then
             'unknown kernel, possibly fused: ' || array_to_string(list_concat(
                 list_transform(coalesce(f.t_unknown, []), x -> x || ' (train)'),
                 list_transform(coalesce(f.i_unknown, []), x -> x || ' (infer)')), ', ')
         when b.rule_id = 'same_base_op' then
             'train ' || coalesce(nullif(array_to_string(
                 list_filter(f.t_set, x -> not list_contains(f.i_set, x)), ', '), ''), '—')
             || ' vs infer ' || coalesce(nullif(array_to_string(
                 list_filter(f.i_set, x -> not list_contains(f.t_set, x)), ', '), ''), '—')
             || coalesce('; ' || f.signature_detail, '')
         else f.signature_detail end as rule_detail,
    f.train_dur_ns, f.infer_dur_ns, f.train_ranks, f.infer_ranks
from flags f
join best b using (run_id, module)
