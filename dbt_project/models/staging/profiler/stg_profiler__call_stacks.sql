-- staging view of raw `call_stacks`; the SELECT lives in macros/staging_lake.sql so incremental models can
-- apply it to the files of just the runs they rebuild (macros/lake_scan.sql)
{{ tilake_stage_select('call_stacks', source('profiler', 'call_stacks')) }}
