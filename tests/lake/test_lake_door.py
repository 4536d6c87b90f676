"""The lake's door (one lock and one ensure per command), the atomic write helpers, the settings
readers and the single schema definition (from which dbt's sources.yml is rendered)."""
from __future__ import annotations

import threading

import pytest
from profiler_helpers import llm_pair, raw

from tilake import settings
from tilake.errors import LakeBusyError
from tilake.files import atomic_path, atomic_write_bytes, atomic_write_json, atomic_write_text
from tilake.lake import schema
from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile
from tilake.synth.population import JobConfig, infer_population, train_population


def _count(monkeypatch, cls, name):
    calls = []
    orig = getattr(cls, name)

    def wrapped(self, *a, **kw):
        calls.append(name)
        return orig(self, *a, **kw)

    monkeypatch.setattr(cls, name, wrapped)
    return calls


def test_tilake_run_takes_the_lock_and_ensures_once(tmp_path, monkeypatch):
    llm_pair(tmp_path / "cap", train_population(JobConfig(layers=2)), infer_population(JobConfig(layers=2)))
    locks, ensures = _count(monkeypatch, Lake, "locked"), _count(monkeypatch, Lake, "ensure")
    lake = Lake(tmp_path / "lake")
    res = run_profile(None, lake, "r1", tmp_path / "out", train=[tmp_path / "cap" / "train"],
                      infer=[tmp_path / "cap" / "infer"], progress=False)
    assert res.status == "ok"
    assert (len(locks), len(ensures)) == (1, 1)     # main f95dc83: one lock, ensure three times
    assert lake.warehouse.is_file()


def test_door_is_reentrant_for_its_thread_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TILAKE_LOCK_WAIT", "0")   # refuse at once (the default waits 60 s)
    lake = Lake(tmp_path / "lake")
    errors = []

    def other():
        try:
            with lake.writing():
                pass
        except LakeBusyError as exc:
            errors.append(str(exc))

    with lake.writing():
        with lake.writing():               # the same thread: free
            assert lake.raw.is_dir()
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(errors) == 1 and "another tilake writer" in errors[0]


def test_failed_first_command_leaves_no_lake(tmp_path):
    lake = Lake(tmp_path / "lake")
    with pytest.raises(RuntimeError):
        with lake.writing():
            assert lake.schema_file("runs").is_file()
            raise RuntimeError("boom")
    assert not lake.root.exists()


def test_a_committed_run_survives_a_later_failure_in_the_same_command(tmp_path):
    lake = Lake(tmp_path / "lake")
    with pytest.raises(RuntimeError):
        with lake.writing():
            with lake.write_run("r1", ["runs"]) as w:
                w.write_rows("runs", [{"model_id": "m"}])
            raise RuntimeError("dbt could not start")
    assert raw(lake.root, "runs").aggregate("count(*)").fetchone()[0] == 1


def test_atomic_writes_replace_whole_files_and_leave_no_temp(tmp_path):
    f = tmp_path / "sub" / "a.json"
    atomic_write_json(f, {"π": 1, "p": tmp_path})
    assert f.read_text(encoding="utf-8") == '{\n "π": 1,\n "p": "' + str(tmp_path) + '"\n}\n'
    atomic_write_text(f, "x")
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert f.read_text() == "x" and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError):
        with atomic_path(f) as tmp:
            tmp.write_text("half")
            raise ValueError("killed")
    assert f.read_text() == "x"
    assert sorted(p.name for p in f.parent.iterdir()) == ["a.json"]


def test_settings_readers():
    assert settings.lake_path({}) == "./tilake-lake"
    assert settings.lake_path({"TILAKE_LAKE": "/x"}) == "/x"
    assert settings.threads({}) == 1 and settings.threads({"TILAKE_THREADS": "4"}) == 4
    assert settings.threads({"TILAKE_THREADS": "many"}) == 1 and settings.threads({"TILAKE_THREADS": "0"}) == 1


def test_lake_root_reads_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("TILAKE_LAKE", str(tmp_path / "env-lake"))
    assert Lake().root == tmp_path / "env-lake"
    monkeypatch.delenv("TILAKE_LAKE")
    monkeypatch.chdir(tmp_path)
    assert Lake().root == tmp_path / "tilake-lake"


def test_one_schema_definition_renders_the_dbt_sources():
    src = schema.dbt_sources()
    assert src["version"] == 2 and [s["name"] for s in src["sources"]] == ["lake", "lake_dumps", "lake_align"]
    tables = {t["name"]: t for s in src["sources"] for t in s["tables"]}
    assert list(tables) == list(schema.TABLES) == schema.PROFILE_TABLES + schema.DUMP_TABLES + schema.ALIGN_TABLES
    for name, cols in schema.TABLES.items():
        assert [(c["name"], c["data_type"]) for c in tables[name]["columns"]] == cols
    assert schema.PROFILE_TABLES == ["runs", "captures", "kernels", "host_ops", "call_stacks", "mstx_ranges",
                                     "run_metrics", "source_notes"]
    assert schema.DUMP_TABLES == ["dump_runs", "tensor_stats", "boundary_results", "stub_rounds", "dump_gates"]
    assert schema.PARTITIONS["kernels"] == ["side", "rank"] and schema.PARTITIONS["boundary_results"] == []
    assert len(schema.TABLES["kernels"]) == 33 and len(schema.TABLES["boundary_results"]) == 47
    k = {c["name"]: c for c in tables["kernels"]["columns"]}
    assert k["call_count"]["description"].startswith("1 per device row") and "description" not in k["task_id"]


def test_no_tmp_file_is_left_by_ensure(tmp_path):
    lake = Lake(tmp_path / "lake")
    with lake.writing():
        pass
    left = [p for p in lake.root.rglob("*") if p.name.startswith(".tmp-")]
    assert left == [] and lake.schema_file("stub_rounds").is_file()


def test_a_file_or_unwritable_place_as_lake_is_one_line(tmp_path):
    from tilake.errors import TilakeError

    f = tmp_path / "afile"
    f.write_text("x")
    for root, expect in ((f, "lake path exists and is not a folder"),
                         (f / "sub", "cannot create the lake folder or its lock file")):
        with pytest.raises(TilakeError) as ei:
            with Lake(root).writing():
                pass
        assert expect in str(ei.value) and "\n" not in str(ei.value)
    assert f.read_text() == "x"
