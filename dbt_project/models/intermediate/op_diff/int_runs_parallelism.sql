-- grain: one run with a profile: TP per side and the layer count as recorded (runs.settings from the
-- launch script, else runs.parallel_config; layers from rl_config.num_layers). NULL = not recorded.
select
    run_id,
    coalesce(try_cast(json_extract_string(settings, '$.train_tp.value') as integer),
             try_cast(json_extract_string(parallel_config, '$.tp') as integer)) as train_tp,
    coalesce(try_cast(json_extract_string(settings, '$.infer_tp.value') as integer),
             try_cast(json_extract_string(parallel_config, '$.infer_tp') as integer)) as infer_tp,
    coalesce(try_cast(json_extract_string(settings, '$.num_layers.value') as integer),
             try_cast(json_extract_string(rl_config, '$.num_layers') as integer)) as layers
from {{ ref('stg_profiler__runs') }}
