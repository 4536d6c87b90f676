"""``tilake ingest`` tells DuckDB's jemalloc to give freed pages back at once for trace ingests only
(settings.prime_duckdb_allocator; docs/settings.md): not when an input holds an Ascend profiler DB, not over the
user's own setting, not once DuckDB is loaded (it reads the variable once)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tilake import settings


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv(settings.DUCKDB_ALLOCATOR, raising=False)
    monkeypatch.delitem(sys.modules, "duckdb", raising=False)   # as a command line that has not loaded it yet
    yield
    os.environ.pop(settings.DUCKDB_ALLOCATOR, None)


def test_a_trace_ingest_purges_at_once(fresh, tmp_path):
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(b"")
    assert settings.prime_duckdb_allocator([trace, None]) is True
    assert os.environ[settings.DUCKDB_ALLOCATOR] == settings.DUCKDB_ALLOCATOR_DEFAULT


@pytest.mark.parametrize("where", ["file", "deep"])
def test_an_input_holding_a_profiler_db_keeps_the_defaults(fresh, tmp_path, where):
    db = tmp_path / "node" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    assert settings.prime_duckdb_allocator([trace, db if where == "file" else tmp_path]) is False
    assert settings.DUCKDB_ALLOCATOR not in os.environ


def test_the_users_setting_and_a_loaded_duckdb_win(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv(settings.DUCKDB_ALLOCATOR, "")
    assert settings.prime_duckdb_allocator([tmp_path]) is False
    assert os.environ[settings.DUCKDB_ALLOCATOR] == ""
    monkeypatch.delenv(settings.DUCKDB_ALLOCATOR)
    monkeypatch.setitem(sys.modules, "duckdb", object())
    assert settings.prime_duckdb_allocator([tmp_path]) is False
    assert settings.DUCKDB_ALLOCATOR not in os.environ


def test_the_ingest_command_sets_it_before_duckdb_loads(tmp_path):
    """A real command-line process: the variable is set when DuckDB is first imported (run ids are checked
    without DuckDB, so nothing loads it earlier)."""
    code = (
        "import sys, os\n"
        "class F:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'duckdb':\n"
        "            print('AT_IMPORT', os.environ.get('DUCKDB_JE_MALLOC_CONF'))\n"
        "            sys.meta_path.remove(self)\n"
        "sys.meta_path.insert(0, F())\n"
        "from tilake.cli import main\n"
        "sys.argv = ['tilake', 'ingest', '--lake', sys.argv[1], '--run-id', 'r1', '--train', sys.argv[2]]\n"
        "main()\n")
    env = {k: v for k, v in os.environ.items() if k != "DUCKDB_JE_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "lake"), str(tmp_path / "missing.json")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert f"AT_IMPORT {settings.DUCKDB_ALLOCATOR_DEFAULT}" in out.stdout, out.stdout + out.stderr
