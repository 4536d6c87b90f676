"""Parallel rank ingest (issue 12, speed): ranks ingested at once write the rows of a one-by-one ingest.

Input: a synthetic verl ``profiler_output`` (:func:`tilake.synth.make_profiler_output`, whose DBs copy the
schema of the real level-1 capture in ``../shared/fixtures``): 4 training ranks + 2 rollout replicas.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import assign_worker_ranks, dedupe, discover
from tilake.ingest.profiler.load import _share_of, _WorkerWriter, ingest_profile
from tilake.lake import schema
from tilake.lake.store import Lake
from tilake.synth import JobConfig, make_profiler_output

TABLES = [t for t in schema.PROFILE_TABLES if t != "runs"]  # runs.created_at is the wall clock


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("par") / "profiler_output"
    make_profiler_output(root, train_ranks=4, infer_replicas=2, seed=3, job=JobConfig(layers=2))
    return root


def _caps(root: Path):
    return sorted(assign_worker_ranks(dedupe(discover(root))), key=lambda c: (c.side != "train", c.rank, str(c.path)))


def _rows(lake: Lake, table: str):
    files = sorted(lake.raw.glob(f"{table}/**/*.parquet"))
    if not files:
        return []
    con = duckdb.connect()
    rel = con.execute(f"SELECT * EXCLUDE (run_id) FROM read_parquet({[str(f) for f in files]}, hive_partitioning=true, "
                      "union_by_name=true)")
    cols = [d[0] for d in rel.description]
    return sorted((tuple(str(v) for v in r) for r in rel.fetchall()), key=str), cols


def test_parallel_ingest_writes_the_rows_of_a_sequential_one(capture, tmp_path):
    caps = _caps(capture)
    # two rollout replicas share infer rank 0 (one partition folder) and are ingested at once
    assert len(caps) == 6 and len({(c.side, c.rank) for c in caps}) == 5
    seq, par = Lake(tmp_path / "seq"), Lake(tmp_path / "par")
    rs = ingest_profile(seq, "r", caps, progress=False, workers=1)
    rp = ingest_profile(par, "r", _caps(capture), progress=False, workers=4)
    assert [(c.capture.side, c.capture.rank, c.status, c.kernels, c.reason) for c in rp.captures] == \
           [(c.capture.side, c.capture.rank, c.status, c.kernels, c.reason) for c in rs.captures]
    assert rs.kernels > 1000 and rp.kernels == rs.kernels
    for t in TABLES:
        assert _rows(par, t) == _rows(seq, t), t
    # part files of different workers never collide (one file per table and capture at least)
    assert len(list(par.raw.glob("kernels/**/*.parquet"))) == len(list(seq.raw.glob("kernels/**/*.parquet")))


def test_parallel_ingest_raises_the_first_bad_capture_and_leaves_the_lake_unchanged(capture, tmp_path):
    caps = _caps(capture)
    lake = Lake(tmp_path / "lake")
    ingest_profile(lake, "r", caps, progress=False, workers=2)
    before = sorted(str(p.relative_to(lake.root)) for p in lake.root.rglob("*.parquet"))
    bad = tmp_path / "bad.db"
    bad.write_bytes(caps[2].path.read_bytes()[:5000])  # a truncated SQLite file (train rank 2)
    broken = _caps(capture)
    broken[2].path = bad
    with pytest.raises(TilakeError) as seq_err:
        ingest_profile(lake, "r", broken, progress=False, workers=1)
    with pytest.raises(TilakeError) as par_err:
        ingest_profile(lake, "r", broken, progress=False, workers=4)
    assert str(par_err.value) == str(seq_err.value)
    assert str(bad) in str(par_err.value) and "\n" not in str(par_err.value)
    assert sorted(str(p.relative_to(lake.root)) for p in lake.root.rglob("*.parquet")) == before


def test_memory_limit_is_split_between_workers():
    assert _share_of("2GiB", 4) == "512MiB"
    assert _share_of("2GB", 2) == "953MiB"
    assert _share_of("100MiB", 8) == "64MiB"  # floor


def test_worker_writer_has_its_own_instance_share_and_file_names(tmp_path):
    lake = Lake(tmp_path / "lake")
    with lake.write_run("r", schema.PROFILE_TABLES) as w:
        ww = _WorkerWriter(w, 3, "512MiB", 1)
        mem, threads = ww.con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()
        assert mem.replace(" ", "") in ("512.0MiB", "512MiB") and int(threads) == 1
        ww.con.execute("CREATE TEMP TABLE only_here AS SELECT 1")
        assert w.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'only_here'").fetchone()[0] == 0
        target = ww._target("kernels", {"side": "train", "rank": 0})
        assert target.name == "part-w03-00001.parquet"
        assert target.parent == w.staging / "kernels" / "run_id=r" / "side=train" / "rank=0"
        ww._close()
