"""tilake — the train–infer consistency lake.

Answers two questions for RL on Ascend NPUs (verl: Megatron actor/ref, vLLM rollout):
which operators differ between the training and inference paths (profiler databases), and
where the numbers part (msprobe dumps). Everything lands in an embedded DuckDB/Parquet lake
and is derived with dbt. See ARCHITECTURE in the README.

From Python: ``tilake.open_lake(path)`` (:mod:`tilake.api`) returns a read-only DuckDB connection
over the marts and the raw tables.
"""

__version__ = "0.1.0"
__all__ = ["open_lake", "__version__"]


def __getattr__(name):
    # PEP 562: `tilake.open_lake` imports DuckDB only when used, so `import tilake.cli` stays light
    if name == "open_lake":
        from tilake.api import open_lake

        return open_lake
    raise AttributeError(f"module 'tilake' has no attribute {name!r}")
