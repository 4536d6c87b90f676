"""One bundled example run (ingest → dbt build → every report output), shared by the report tests."""
from __future__ import annotations

import pytest

from tilake.pipeline.example import run_example


@pytest.fixture(scope="session")
def example_run(tmp_path_factory):
    """``(out_dir, ProfileResult)`` of ``tilake example`` written into a temporary folder (Chinese)."""
    out = tmp_path_factory.mktemp("reports_example")
    return out, run_example(out)
