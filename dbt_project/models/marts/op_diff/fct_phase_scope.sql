-- grain: run × side (train, infer): what the operator diff compares on that side — the phases, their
-- kernel calls, the ranks and TP — and a note when the sides differ in TP or rank count (the report
-- header and the per-rank columns of fct_op_comparison).
-- rows of one run derive from that run's rows only: `tilake runs rm` deletes them (tilake.lake.warehouse)
{{ config(meta={'tilake_rows_per_run': true}) }}
with s as (
    select * from {{ ref('int_phases_selected') }}
),
ranks as (
    select k.run_id, k.side, count(distinct k.rank) as ranks,
           cast(sum(k.calls) as bigint) as compared_calls,
           cast(sum(k.total_dur_ns) as bigint) as compared_dur_ns
    from {{ ref('int_kernel_phases_aggregated') }} k
    join s on s.run_id = k.run_id and s.side = k.side
    where s.compares_all or list_contains(s.compared_phases, k.phase)
    group by k.run_id, k.side
),
p as (
    select * from {{ ref('int_runs_parallelism') }}
),
both_sides as (
    select p.run_id, p.train_tp, p.infer_tp, p.layers,
           max(r.ranks) filter (where r.side = 'train') as train_ranks,
           max(r.ranks) filter (where r.side = 'infer') as infer_ranks
    from p left join ranks r using (run_id)
    group by p.run_id, p.train_tp, p.infer_tp, p.layers
)
select
    s.run_id, s.side, s.requested, s.scope, s.compared_phases, s.phases_seen, s.has_marks, s.compares_all,
    coalesce(r.compared_calls, 0) as compared_calls,
    cast(s.all_calls as bigint) as all_calls,
    r.compared_dur_ns,
    r.ranks,
    case s.side when 'train' then b.train_tp else b.infer_tp end as tp,
    b.layers,
    case when b.train_tp is not null and b.infer_tp is not null and b.train_tp <> b.infer_tp
             then 'train TP ' || b.train_tp || ' on ' || coalesce(b.train_ranks::varchar, '?') || ' ranks, infer TP '
                  || b.infer_tp || ' on ' || coalesce(b.infer_ranks::varchar, '?')
                  || ' ranks: figures are per rank; a TP-sharded op does 1/TP of the work per rank, '
                  || 'so *_dur_ns_tp_norm '
                  || '(per rank × TP) compares the work of one model replica'
         when b.train_ranks is not null and b.infer_ranks is not null and b.train_ranks <> b.infer_ranks
             then 'train ' || b.train_ranks || ' ranks, infer ' || b.infer_ranks
                  || ' ranks: figures are per rank (sums over ranks would mislead)'
                  || case when b.train_tp is null or b.infer_tp is null then '; TP not recorded for '
                          || case when b.train_tp is null and b.infer_tp is null then 'either side'
                                  when b.train_tp is null then 'train' else 'infer' end
                          || ': no TP normalisation' else '' end
    end as parallel_note
from s
left join ranks r using (run_id, side)
left join both_sides b using (run_id)
