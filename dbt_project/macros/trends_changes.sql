{#- Change logic shared by the change marts (previous run of the family, tables) and their
    any-pair views (`*_any`, filtered by the reader). `pairs` is a SQL select yielding
    base_run_id, run_id, pair_kind. One definition, two materialisations. -#}

{% macro tilake_kernel_changes(pairs) %}
with pairs as (
    {{ pairs }}
),

k as (
    select run_id, side, op_type, category, module, fused, calls, total_dur_ns
    from {{ ref('fct_run_op_kernels') }}
),

ev as (
    -- a side without device/host evidence in either run gives no kernel verdict for that side
    select run_id, side, evidence from {{ ref('fct_run_capture_health') }}
),

pair_sides as (
    select p.base_run_id, p.run_id, p.pair_kind, s.side,
           coalesce(eb.evidence, 'evidence_missing') as base_evidence,
           coalesce(er.evidence, 'evidence_missing') as run_evidence
    from pairs p
    cross join (values ('train'), ('infer')) s(side)
    left join ev eb on eb.run_id = p.base_run_id and eb.side = s.side
    left join ev er on er.run_id = p.run_id and er.side = s.side
),

b as (
    select p.base_run_id, p.run_id, p.side, k.op_type, k.category, k.module, k.fused, k.calls, k.total_dur_ns
    from pair_sides p join k on k.run_id = p.base_run_id and k.side = p.side
),

r as (
    select p.base_run_id, p.run_id, p.side, k.op_type, k.category, k.module, k.fused, k.calls, k.total_dur_ns
    from pair_sides p join k on k.run_id = p.run_id and k.side = p.side
),

joined as (
    select coalesce(b.base_run_id, r.base_run_id) as base_run_id,
           coalesce(b.run_id, r.run_id) as run_id,
           coalesce(b.side, r.side) as side,
           coalesce(b.op_type, r.op_type) as op_type,
           coalesce(r.category, b.category) as category,
           coalesce(r.module, b.module) as module,
           coalesce(r.fused, b.fused) as fused,
           b.calls as base_calls,
           r.calls as run_calls,
           b.total_dur_ns as base_dur_ns,
           r.total_dur_ns as run_dur_ns
    from b
    full outer join r
      on r.base_run_id = b.base_run_id and r.run_id = b.run_id and r.side = b.side and r.op_type = b.op_type
)

select ps.base_run_id, ps.run_id, ps.pair_kind, ps.side, j.op_type, j.category, j.module, j.fused,
       case when j.base_calls is null then 'added' else 'removed' end as change,
       j.base_calls, j.run_calls, j.base_dur_ns, j.run_dur_ns,
       ps.base_evidence, ps.run_evidence
from pair_sides ps
join joined j on j.base_run_id = ps.base_run_id and j.run_id = ps.run_id and j.side = ps.side
where (j.base_calls is null or j.run_calls is null)
  and ps.base_evidence <> 'evidence_missing' and ps.run_evidence <> 'evidence_missing'
union all
select ps.base_run_id, ps.run_id, ps.pair_kind, ps.side, null, null, null, null,
       'evidence_missing', null, null, null, null, ps.base_evidence, ps.run_evidence
from pair_sides ps
where ps.base_evidence = 'evidence_missing' or ps.run_evidence = 'evidence_missing'
{% endmacro %}


{% macro tilake_grade_changes(pairs) %}
with pairs as (
    {{ pairs }}
),

g as (
    select run_id, module, grade from {{ ref('fct_run_grade_counts') }}
),

b as (
    select p.base_run_id, p.run_id, p.pair_kind, g.module, g.grade
    from pairs p join g on g.run_id = p.base_run_id
),

r as (
    select p.base_run_id, p.run_id, p.pair_kind, g.module, g.grade
    from pairs p join g on g.run_id = p.run_id
),

joined as (
    select coalesce(b.base_run_id, r.base_run_id) as base_run_id,
           coalesce(b.run_id, r.run_id) as run_id,
           coalesce(b.pair_kind, r.pair_kind) as pair_kind,
           coalesce(b.module, r.module) as module,
           b.grade as base_grade,
           r.grade as run_grade
    from b
    full outer join r on r.base_run_id = b.base_run_id and r.run_id = b.run_id and r.module = b.module
)

select j.base_run_id, j.run_id, j.pair_kind, j.module, j.base_grade, j.run_grade,
       case when j.base_grade is null then 'added'
            when j.run_grade is null then 'removed'
            when j.base_grade = 'evidence_missing' or j.run_grade = 'evidence_missing' then 'evidence_missing'
            when gr.severity_rank < gb.severity_rank then 'worse'
            else 'better' end as change
from joined j
left join {{ ref('grades') }} gb on gb.grade = j.base_grade
left join {{ ref('grades') }} gr on gr.grade = j.run_grade
where j.base_grade is distinct from j.run_grade
{% endmacro %}


{% macro tilake_divergence_changes(pairs) %}
with pairs as (
    {{ pairs }}
),

d as (
    select * from {{ ref('fct_run_divergence') }}
)

select
    p.base_run_id, p.run_id, p.pair_kind,
    b.first_divergence_status as base_status,
    r.first_divergence_status as run_status,
    b.first_divergence_boundary as base_boundary,
    r.first_divergence_boundary as run_boundary,
    b.first_divergence_position as base_position,
    r.first_divergence_position as run_position,
    b.first_divergence_class as base_class,
    r.first_divergence_class as run_class,
    r.first_divergence_position - b.first_divergence_position as position_delta,
    case
        when b.run_id is null or r.run_id is null
             or b.first_divergence_status = 'evidence_missing' or r.first_divergence_status = 'evidence_missing'
            then 'evidence_missing'
        when b.first_divergence_status = 'undetermined' or r.first_divergence_status = 'undetermined'
            then 'undetermined'
        when b.first_divergence_status = 'none' and r.first_divergence_status = 'none' then 'unchanged'
        when b.first_divergence_status = 'none' then 'appeared'
        when r.first_divergence_status = 'none' then 'disappeared'
        when r.first_divergence_position < b.first_divergence_position then 'earlier'
        when r.first_divergence_position > b.first_divergence_position then 'later'
        when (r.first_divergence_boundary is distinct from b.first_divergence_boundary) then 'moved'
        else 'unchanged'
    end as movement
from pairs p
left join d b on b.run_id = p.base_run_id
left join d r on r.run_id = p.run_id
{% endmacro %}
