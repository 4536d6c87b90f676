"""One bundled example run (ingest → dbt build → every report output), shared by the report tests."""
from __future__ import annotations

import duckdb
import pytest

from tilake.pipeline.example import EXAMPLE_RUN_ID, run_example


@pytest.fixture(scope="session")
def example_run(tmp_path_factory):
    """``(out_dir, ProfileResult)`` of ``tilake example`` written into a temporary folder (Chinese)."""
    out = tmp_path_factory.mktemp("reports_example")
    return out, run_example(out)


def raw_device_ns(lake_root, side: str, op_types) -> int:
    """Sum of ``dur_ns`` of the raw kernels of ``op_types`` on ``side`` (independent of the marts)."""
    glob = str(lake_root / "raw" / "kernels" / f"run_id={EXAMPLE_RUN_ID}" / "**" / "*.parquet")
    ops = ", ".join(f"'{o}'" for o in op_types)
    return duckdb.sql(f"SELECT sum(dur_ns) FROM read_parquet('{glob}', hive_partitioning=false, union_by_name=true) "
                      f"WHERE side = '{side}' AND op_type IN ({ops})").fetchone()[0]
