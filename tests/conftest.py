"""Shared pytest fixtures. ``../shared`` sits beside the repository (CI copies it there)."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only ``shared/`` folder; tests using it skip with a reason when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED} (it sits beside the repository)")
    return SHARED
