{#- The phase of every kernel (docs/phases.md): which verl / vLLM phase it ran in and how that is known.

    1. mark: the kernel starts inside an MSTX range / torch user annotation whose message matches a
       `mark` rule of seeds/phase_rules.csv for its side (lowest priority wins); of several ranges of one
       capture, the one that started last at or before the kernel (ASOF join: verl's phase ranges do not
       nest among themselves; micro_batch*/mini_batch* ranges match no rule and are ignored);
    2. op_type: else a training kernel whose op type matches an `op_type` rule (backward, optimizer) is
       in that rule's phase (update_actor);
    3. none: else no phase.
    `pass` is fwd | bwd | optimizer: the op_type rule's pass when one matches, else the mark rule's. -#}

{% macro tilake_kernel_phases(kernels, ranges) %}
with k as (
    select * from {{ kernels }}
),
marks as (
    select r.run_id, r.side, r.capture_id, r.message, r.start_ns, r.end_ns, p.phase, p.pass as mark_pass
    from {{ ranges }} r
    join {{ ref('phase_rules') }} p
      on p.match_on = 'mark' and p.side = r.side and regexp_matches(r.message, p.pattern)
    where r.start_ns is not null and r.end_ns is not null
    qualify row_number() over (partition by r.run_id, r.side, r.capture_id, r.message, r.start_ns
                               order by p.priority) = 1
),
op_types as (
    select o.run_id, o.side, o.op_type, p.phase as op_phase, p.pass as op_pass
    from (select distinct run_id, side, op_type from k where op_type is not null) o
    join {{ ref('phase_rules') }} p
      on p.match_on = 'op_type' and p.side = o.side and regexp_matches(o.op_type, p.pattern)
    qualify row_number() over (partition by o.run_id, o.side, o.op_type order by p.priority) = 1
),
placed as (
    select k.*, m.phase as m_phase, m.mark_pass, m.message as m_message, m.end_ns as m_end
    from k
    asof left join marks m
      on m.run_id = k.run_id and m.side = k.side and m.capture_id = k.capture_id and k.start_ns >= m.start_ns
)
select
    p.* exclude (m_phase, mark_pass, m_message, m_end),
    case when p.m_phase is not null and p.start_ns < p.m_end then p.m_phase else o.op_phase end as phase,
    case when p.m_phase is not null and p.start_ns < p.m_end then 'mark'
         when o.op_phase is not null then 'op_type'
         else 'none' end as phase_source,
    case when p.m_phase is not null and p.start_ns < p.m_end then coalesce(o.op_pass, p.mark_pass, 'fwd')
         else o.op_pass end as pass,
    case when p.m_phase is not null and p.start_ns < p.m_end then p.m_message end as phase_mark
from placed p
left join op_types o on o.run_id = p.run_id and o.side = p.side and o.op_type = p.op_type
{% endmacro %}

{% macro tilake_dtype_sig(dtypes) -%}
{#- A kernel's dtypes in short form: `DT_BF16;DT_BF16` → `bf16,bf16`;
    torch `["c10::BFloat16","float",""]` → `bfloat16,float`. -#}
nullif(array_to_string(list_filter(
    list_transform(string_split(regexp_replace(lower(coalesce({{ dtypes }}, '')), '[\[\]"]|dt_|c10::| ', '', 'g'),
                                case when contains(coalesce({{ dtypes }}, ''), ';') then ';' else ',' end),
                   x -> nullif(x, '')),
    x -> x is not null and x not in ('none', 'scalar', 'scalarlist', 'n/a')), ','), '')
{%- endmacro %}

{% macro tilake_format_sig(formats) -%}
{#- A kernel's formats in short form: `FORMAT_ND;FORMAT_FRACTAL_NZ` → `ND,NZ`. -#}
nullif(array_to_string(list_filter(
    list_transform(string_split(
                       regexp_replace(upper(coalesce({{ formats }}, '')), 'FORMAT_|FRACTAL_| |[\[\]"]', '', 'g'), ';'),
                   x -> nullif(x, '')),
    x -> x is not null and x not in ('N/A', 'NULL')), ','), '')
{%- endmacro %}

{% macro tilake_compared_kernels(due) %}
{#- FROM … WHERE of a per-run incremental model over the compared phases: the phase aggregate `k`
    (int_kernel_phases_aggregated) of the due runs (`todo`), in the phases int_phases_selected compares. -#}
from {{ ref('int_kernel_phases_aggregated') }} k
join todo on todo.run_id = k.run_id
join {{ ref('int_phases_selected') }} s on s.run_id = k.run_id and s.side = k.side
where {{ tilake_run_filter('k.run_id', due) }}
  and (s.compares_all or list_contains(s.compared_phases, k.phase))
{%- endmacro %}

{% macro tilake_kernel_sums() -%}
{#- The sums of a compared-kernel aggregate over `k` (tilake_compared_kernels): registration time, calls, kernel
    rows, kernel time (ns) and ranks. -#}
any_value(todo.registered_at) as registered_at,
    sum(k.calls) as calls,
    sum(k.kernel_rows) as kernel_rows,
    sum(k.total_dur_ns) as total_dur_ns,
    count(distinct k.rank) as ranks
{%- endmacro %}
