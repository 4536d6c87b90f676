"""Shared pytest fixtures. ``../shared`` sits beside the repository (CI copies it there)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
# our own test inputs: writers of msprobe dumps and profiler captures (tests/fixtures/), and
# per-scenario data files (tests/data/<scenario>/)
sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only ``shared/`` folder; tests using it skip with a reason when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED} (it sits beside the repository)")
    return SHARED


@pytest.fixture(scope="session", autouse=True)
def _report_source_matches_its_schema():
    """Every ``report_source.json`` a test writes is validated against its JSON Schema (tests/fixtures/report_schema.py)."""
    from report_schema import validating_writes

    with validating_writes():
        yield
