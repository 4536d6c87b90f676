-- staging view of raw `source_notes`; the SELECT lives in macros/staging_lake.sql so incremental models can
-- apply it to the files of just the runs they rebuild (macros/lake_scan.sql)
{{ tilake_stage_select('source_notes', source('profiler', 'source_notes')) }}
