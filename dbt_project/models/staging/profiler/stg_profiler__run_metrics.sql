-- staging view of raw `run_metrics`; the SELECT lives in macros/staging_lake.sql so incremental models can
-- apply it to the files of just the runs they rebuild (macros/lake_scan.sql)
{{ tilake_stage_select('run_metrics', source('profiler', 'run_metrics')) }}
