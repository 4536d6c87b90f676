"""Shared pytest fixtures. ``../shared`` sits beside the repository (CI copies it there)."""
from __future__ import annotations

import re
import sys
from functools import lru_cache
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


@pytest.fixture(scope="session")
def example_run(tmp_path_factory):
    """``(out_dir, ProfileResult)`` of ``tilake example`` (Chinese) in a temporary folder, built once per
    session and shared by every test that only reads it (reports, API, build progress): ~20 s each saved.
    Tests that write runs into the lake make their own."""
    from tilake.pipeline.example import run_example

    out = tmp_path_factory.mktemp("example_shared")
    return out, run_example(out)


# --- markers (registered in pyproject.toml): `python -m pytest -q -m "not slow"` is the quick loop -------------
# A test is marked by what its module does (its source) and by the fixtures it uses:
#   dbt     — builds a warehouse (a dbt build: seconds each); also slow
#   ray     — starts a local Ray; also slow
#   msprobe — reads or writes msprobe dumps (tests/fixtures/msprobe_*, the dump analysis)
#   torch   — imports PyTorch
# `slow` is dbt + ray + SLOW (path or path::test-name prefixes measured at ≥ 10 s each on 2 loaded cores
# without a build; `--durations=30` of the quick loop, 2026-12-04).
_DBT = re.compile(r"build_swapped\(|run_example\(|run_joined_example\(|run_command\(|run_profile\(|dbt_build\(|"
                  r"dbt_passthrough\(|build_command\(|scan_command\(|cli_scan\(|dumps_command\(|"
                  r"\[\"(?:build|example|run|dbt|scan|dumps|gate)\"|_invoke\(\"(?:build|example|run|dbt|scan|dumps|gate)\"|"
                  r"\"--build\"|example_run\b|built\b|lake_copy\b|build=True")
_TORCH = re.compile(r"^\s*(?:import torch|from torch\b)|importorskip\(\"torch\"\)", re.M)
_RAY = re.compile(r"^\s*import ray\b|\"--ray\"|ray_local|\bray=", re.M)
_MSPROBE = re.compile(r"msprobe|dumps_gen|dumps_mini", re.I)
SLOW = (
    "tests/ingest/torch/test_trace_stage.py::test_fast_read_equals_the_streaming_read",   # every real/quirky trace
    "tests/ingest/torch/test_trace_ingest.py::test_real_trace_quirks",
    "tests/lake/test_plain_dbt.py::test_plain_dbt_build",          # a plain `dbt build` subprocess
    "tests/lake/test_compact.py",
    "tests/ingest/profiler/test_profiler_big_capture.py::test_second_capture_after_a_spilled_one",
    "tests/ingest/profiler/test_profiler_text_rows.py::test_op_statistic_only_rank",
    "tests/ingest/scan/test_scan_env.py::test_real_seam",
    "tests/ingest/scan/test_scan_torch.py::test_every_real_script",
    "tests/ingest/profiler/test_parallel_ingest.py",
)
# fixtures that build a warehouse (a test using one is `dbt`)
DBT_FIXTURES = {"example_run", "example", "built", "lake_copy"}


@lru_cache(maxsize=None)
def _module_marks(path: str) -> frozenset:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    marks = set()
    if _DBT.search(text):
        marks.add("dbt")
    if _TORCH.search(text):
        marks.add("torch")
    if _RAY.search(text):
        marks.add("ray")
    if _MSPROBE.search(text):
        marks.add("msprobe")
    return frozenset(marks)


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).resolve().parents[1]
    for item in items:
        path = str(getattr(item, "path", None) or item.fspath)
        marks = set(_module_marks(path))
        if DBT_FIXTURES & set(getattr(item, "fixturenames", ())):
            marks.add("dbt")
        try:
            nodeid = Path(path).resolve().relative_to(root).as_posix() + "::" + item.name
        except ValueError:
            nodeid = item.nodeid
        if marks & {"dbt", "ray"} or nodeid.startswith(SLOW):
            marks.add("slow")
        for m in sorted(marks):
            item.add_marker(getattr(pytest.mark, m))
