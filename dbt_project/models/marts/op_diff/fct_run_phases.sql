-- grain: run × side × rank × phase × phase_source × pass: kernel calls and device time per phase and rank,
-- and whether the operator diff compares them (capture health: how each kernel got its phase).
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
select
    k.run_id, k.side, k.rank, k.phase, k.phase_source, k.pass,
    cast(sum(k.calls) as bigint) as calls,
    cast(sum(k.total_dur_ns) as bigint) as dur_ns,
    count(distinct k.op_type) as op_types,
    min(k.example_phase_mark) as example_mark,
    bool_or(s.compares_all or coalesce(list_contains(s.compared_phases, k.phase), false)) as compared
from {{ ref('int_kernel_phases_aggregated') }} k
join {{ ref('int_phases_selected') }} s on s.run_id = k.run_id and s.side = k.side
group by k.run_id, k.side, k.rank, k.phase, k.phase_source, k.pass
