"""tilake — the train–infer consistency lake.

Answers two questions for RL on Ascend NPUs (verl: Megatron actor/ref, vLLM rollout):
which operators differ between the training and inference paths (profiler databases), and
where the numbers part (msprobe dumps). Everything lands in an embedded DuckDB/Parquet lake
and is derived with dbt. See ARCHITECTURE in the README.
"""

__version__ = "0.1.0"
