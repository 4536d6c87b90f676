-- grain: run × comparison module × op_type present on both sides: the dtype / format / HF32 signatures
-- each side runs the op type with (compared phases only) and which of them differ. A side with no
-- recorded dtypes (torch traces without record_shapes, level-0 DBs) is not compared: NULL, never "equal".
with sel as (
    select k.run_id, k.side, k.op_type, k.input_dtypes, k.input_formats, k.hf32_eligible, k.calls
    from {{ ref('int_kernel_phases_aggregated') }} k
    join {{ ref('int_phases_selected') }} s on s.run_id = k.run_id and s.side = k.side
    where s.compares_all or list_contains(s.compared_phases, k.phase)
),
mods as (
    select distinct run_id, side, op_type, display_module as module from {{ ref('int_side_ops_fused_joined') }}
),
per_side as (
    -- the distinct dtypes / formats an op type runs with (a set: optional inputs change the arity of
    -- the per-input lists, not the precision)
    select s.run_id, m.module, s.side, s.op_type,
           list_sort(list_distinct(flatten(list(string_split(s.input_dtypes, ','))
                                           filter (where s.input_dtypes is not null)))) as dtypes,
           list_sort(list_distinct(flatten(list(string_split(s.input_formats, ','))
                                           filter (where s.input_formats is not null)))) as formats,
           list_sort(list(distinct s.hf32_eligible) filter (where s.hf32_eligible is not null)) as hf32
    from sel s
    join mods m on m.run_id = s.run_id and m.side = s.side and m.op_type = s.op_type
    group by s.run_id, m.module, s.side, s.op_type
)
select
    t.run_id, t.module, t.op_type,
    t.dtypes as train_dtypes, i.dtypes as infer_dtypes,
    t.formats as train_formats, i.formats as infer_formats,
    t.hf32 as train_hf32, i.hf32 as infer_hf32,
    case when len(t.dtypes) > 0 and len(i.dtypes) > 0 then t.dtypes <> i.dtypes end as dtype_differs,
    case when len(t.formats) > 0 and len(i.formats) > 0 then t.formats <> i.formats end as format_differs,
    case when len(t.hf32) > 0 and len(i.hf32) > 0 then t.hf32 <> i.hf32 end as hf32_differs,
    -- "MatMulV2 bf16 ND vs MatMulV2 bf16 ND/NZ" (each side's distinct dtypes and formats joined with /)
    t.op_type || ' ' || coalesce(nullif(array_to_string(t.dtypes, '/'), ''), '?') || ' '
        || coalesce(array_to_string(t.formats, '/'), '')
        || case when len(t.hf32) > 0 then ' HF32 ' || array_to_string(t.hf32, '/') else '' end
        || ' vs ' ||
    i.op_type || ' ' || coalesce(nullif(array_to_string(i.dtypes, '/'), ''), '?') || ' '
        || coalesce(array_to_string(i.formats, '/'), '')
        || case when len(i.hf32) > 0 then ' HF32 ' || array_to_string(i.hf32, '/') else '' end as signature_text
from per_side t
join per_side i on i.run_id = t.run_id and i.module = t.module and i.op_type = t.op_type
where t.side = 'train' and i.side = 'infer'
