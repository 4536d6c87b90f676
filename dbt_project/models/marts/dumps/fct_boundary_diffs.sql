-- one row per run × round × compared activation boundary: exact gate, ULP figures, first divergence,
-- amplification relative to the round's first divergence, and each independent point's downstream
-- amplification. Incremental by dump run.
-- One home for each dump fact: the first divergence and growth_vs_first are computed once, by the
-- Python analysis (tilake.diagnosis.analyze, written by diagnosis/lake_rows.py); this mart reads
-- them and derives nothing a second way.
{{ tilake_per_run_incremental('dumps_registered_at', 'has_dumps') }},
{%- set due = tilake_todo_run_ids() %}

compared as (
    select *
    from {{ ref('stg_msprobe__boundary_results') }}
    where
        kind = 'activation'
        and status not in ('ISOLATED', 'not_compared')
        and {{ tilake_run_filter('run_id', due) }}
        and run_id in (select todo.run_id from todo)
)

select
    compared.run_id,
    todo.registered_at,
    compared.round,
    compared.position,
    compared.boundary,
    compared.layer,
    compared.op,
    compared.status,
    compared.reason,
    compared.train_source,
    compared.infer_source,
    compared.train_shape,
    compared.infer_shape,
    compared.train_dtype,
    compared.mismatch_count,
    compared.mismatch_fraction,
    1.0 - compared.mismatch_fraction as equality_rate,
    compared.max_abs_diff,
    compared.tensor_ulp,
    compared.max_elem_ulp_significant,
    compared.signed_mean_ulp,
    compared.pos_count,
    compared.neg_count,
    compared.ulp_hist,
    compared.rows_differing,
    compared.rows_total,
    compared.pattern,
    compared.systematic_bias,
    compared.diff_class,
    compared.role,
    compared.is_first_divergence,
    compared.first_divergence_status,
    max(compared.boundary) filter (where compared.is_first_divergence)
        over (partition by compared.run_id, compared.round) as first_divergence,
    compared.growth_vs_first,
    compared.downstream_differing,
    compared.downstream_max_abs_diff,
    compared.amplification
from compared
inner join todo on compared.run_id = todo.run_id
