"""Big captures (issue #12 "Big captures", ``../shared/fixtures/bugs/BR-22``), reproduced at a small scale.

BR-22: the second capture of one ingest crashed ("Cannot switch temporary directory after the current one
has been used") once the first one had spilled to disk; 2,000,000 STRING_IDS rows were enough. The input
here is BR-22's own recipe (``make_input.py``: ``tilake.synth`` big-db in the real torch_npu schema plus
unused STRING_IDS rows) at 100,000 kernels and 2,000,000 strings, under a 256 MiB memory limit.
"""
from __future__ import annotations

import sqlite3

import pytest
from profiler_helpers import llm_pair, raw

from tilake import settings
from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake import duck
from tilake.lake.store import Lake
from tilake.synth import write_big_db
from tilake.synth.population import JobConfig, infer_population


def _big_db(path, rows: int, strings: int):
    write_big_db(path, rows)
    c = sqlite3.connect(path)
    base = c.execute("SELECT max(id) FROM STRING_IDS").fetchone()[0] + 1
    c.executemany("INSERT INTO STRING_IDS VALUES (?,?)", ((base + i, f"aten::unused_string_{i}") for i in range(strings)))
    c.commit()
    c.close()
    return path


def test_second_capture_after_a_spilled_one(tmp_path, monkeypatch):
    monkeypatch.setenv(settings.MEMORY_LIMIT, "256MB")
    db = _big_db(tmp_path / "train" / "ascend_pytorch_profiler_0.db", 100_000, 2_000_000)
    caps = llm_pair(tmp_path / "small", infer_pop=infer_population(JobConfig(layers=1)))
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "br22", explicit(db, "train") + explicit(tmp_path / "small" / "infer", "infer"),
                         progress=False)
    assert [c.status for c in res.captures] == ["ok", "ok"]
    n_train = raw(lake.root, "kernels", "side = 'train' AND global_task_id IS NOT NULL")
    assert len(n_train) == 100_000
    assert res.captures[1].kernels == caps["infer"]["kernels"]


def test_spill_folder_set_once_per_connection(monkeypatch):
    """A connection that has spilled keeps working: its folder is fixed at connect time."""
    monkeypatch.setenv(settings.MEMORY_LIMIT, "64MB")
    con = duck.connect()
    limit, tmp = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchone()
    assert limit == "61.0 MiB" and tmp.startswith(str(duck.spill_root()))
    for _ in range(2):  # a sort of 3 M rows (~70 MB) spills under 64 MB
        assert con.execute("SELECT count(*) FROM (SELECT range AS x FROM range(3000000) ORDER BY hash(x))").fetchone()[0] == 3_000_000
    other = duck.connect()
    assert other.execute("SELECT current_setting('temp_directory')").fetchone()[0] != tmp


def test_memory_limit_setting(monkeypatch):
    assert settings.memory_limit({"TILAKE_MEMORY_LIMIT": "700MB"}) == "700MB"
    assert settings.memory_limit({"TILAKE_MEMORY_LIMIT": "1.5GiB"}) == "1.5GiB"
    d = settings.memory_limit({})
    assert d.endswith("MiB") and 256 <= int(d[:-3]) <= 2048
    with pytest.raises(TilakeError, match="TILAKE_MEMORY_LIMIT='lots' is not a memory size"):
        settings.memory_limit({"TILAKE_MEMORY_LIMIT": "lots"})


def test_memory_limit_option(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tilake.cli import main

    monkeypatch.delenv(settings.MEMORY_LIMIT, raising=False)
    r = CliRunner().invoke(main, ["ingest", str(tmp_path), "--memory-limit", "lots", "--lake", str(tmp_path / "l")])
    assert r.exit_code == 2 and "--memory-limit='lots' is not a memory size" in r.output
    monkeypatch.setenv(settings.MEMORY_LIMIT, "300MB")  # the option's value overrides the variable
    r = CliRunner().invoke(main, ["ingest", str(tmp_path / "none"), "--memory-limit", "320MB", "--lake", str(tmp_path / "l")])
    assert settings.memory_limit() == "320MB"


def test_progress_lines_name_tables_and_row_counts(tmp_path):
    """While a DB is read, the progress line names the table being read with its row count, then the
    kernel rows written so far (BR-22: not only a bar per capture at the end)."""
    from tilake.ingest.profiler.load import _ingest_db
    from tilake.lake import schema

    db = tmp_path / "train" / "ascend_pytorch_profiler_0.db"
    write_big_db(db, 5000)
    cap = explicit(db, "train")[0]
    lines = []
    with Lake(tmp_path / "lake").write_run("p", schema.PROFILE_TABLES) as w:
        res = _ingest_db(cap, w, {"side": "train", "rank": 0}, {"capture_id": cap.capture_id}, say=lines.append)
    assert res.kernels >= 5000
    assert "reading STRING_IDS (" in lines[0]
    assert "reading TASK (5,000 rows) · reading COMPUTE_TASK_INFO (5,000 rows)" in " | ".join(lines)
    assert "joining kernels: 0/5,000 rows written" in lines
    assert any(x.startswith("5,000 kernels written") for x in lines)
