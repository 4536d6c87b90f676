-- staging view of raw `mstx_ranges`; the SELECT lives in macros/staging_lake.sql so incremental models can
-- apply it to the files of just the runs they rebuild (macros/lake_scan.sql)
{{ tilake_stage_select('mstx_ranges', source('profiler', 'mstx_ranges')) }}
