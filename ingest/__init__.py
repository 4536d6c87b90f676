"""Readers of foreign formats (profiler DBs, text exports, msprobe dumps) and the lake writer.

Ingest is the only code that reads foreign formats: it normalises names, units (ns) and types
once, records what it saw (capture health) and writes Parquet atomically into the lake.
"""
