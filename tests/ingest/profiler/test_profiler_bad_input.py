"""Bad input: each gives one clear line and leaves the lake unchanged (or is recorded honestly)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from profiler_helpers import lake_state, llm_pair, mart, pt_db, raw, tree_digest

from tilake.cli import main
from tilake.errors import LakeBusyError, TilakeError
from tilake.ingest.profiler.discover import discover, explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.pipeline.profile import run_profile
from tilake.synth.layout import make_profiler_output
from tilake.synth.population import JobConfig, infer_population, train_population

SMALL = JobConfig(layers=2)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A small valid train/infer pair and a lake that already holds one ingested run."""
    root = tmp_path_factory.mktemp("bad")
    caps = llm_pair(root / "cap", train_population(SMALL), infer_population(SMALL))
    lake = Lake(root / "lake")
    ingest_profile(lake, "good", explicit(root / "cap" / "train", "train") + explicit(root / "cap" / "infer", "infer"),
                   progress=False)
    return root, lake, caps


def _fails_cleanly(lake, run_id, caps, expect):
    before = lake_state(lake.root)
    with pytest.raises(TilakeError) as ei:
        ingest_profile(lake, run_id, caps, progress=False)
    msg = str(ei.value)
    assert "\n" not in msg and expect in msg, msg
    assert lake_state(lake.root) == before
    return msg


def _infer(base_root):
    return explicit(base_root / "cap" / "infer", "infer")


def test_non_sqlite_file_named_db(base, tmp_path):
    root, lake, _ = base
    bad = pt_db(tmp_path, "x")
    bad.parent.mkdir(parents=True)
    bad.write_text("this is not a database\n")
    msg = _fails_cleanly(lake, "r1", explicit(bad, "train") + _infer(root), "not a SQLite database")
    assert str(bad) in msg


def test_truncated_db(base, tmp_path):
    root, lake, caps = base
    src = Path(caps["train"]["path"])
    bad = pt_db(tmp_path, "t")
    bad.parent.mkdir(parents=True)
    bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2 + 100])
    _fails_cleanly(lake, "r2", explicit(bad, "train") + _infer(root), "truncated SQLite database")


def test_db_without_compute_task_info(base, tmp_path):
    root, lake, _ = base
    db = pt_db(tmp_path, "n")
    from tilake.synth.db import write_profiler_db
    write_profiler_db(db, train_population(SMALL), device_tables="no_compute_table")
    msg = _fails_cleanly(lake, "r3", explicit(db, "train") + _infer(root), "no COMPUTE_TASK_INFO table")
    assert "train side has no device evidence" in msg


def test_device_tables_empty_host_full_is_evidence_missing(base, tmp_path):
    root, lake, _ = base
    db = pt_db(tmp_path, "e")
    from tilake.synth.db import write_profiler_db
    write_profiler_db(db, train_population(SMALL), device_tables="empty")
    msg = _fails_cleanly(lake, "r4", explicit(db, "train") + _infer(root), "device kernels were not exported")
    assert "while host tables have" in msg
    # recorded honestly when asked to keep going: the report never claims "no difference"
    res = run_profile(None, lake, "r4", tmp_path / "out", train=[db], infer=[root / "cap" / "infer"],
                      allow_missing=True, progress=False)
    assert res.status == "evidence_missing" and res.evidence["train"] == "evidence_missing"
    assert set(res.grade_counts) == {"evidence_missing"}
    md = res.report_path.read_text(encoding="utf-8")
    assert "**evidence_missing**" in md and "无差异" not in md.split("## 7.")[1].split("P0")[0]
    cap = mart(lake.root, "SELECT status, reason FROM fct_capture_health WHERE run_id='r4' AND side='train'")[0]
    assert cap[0] == "evidence_missing" and "COMPUTE_TASK_INFO ⋈ TASK has 0 rows" in cap[1]


def test_inference_side_only_raw_prof_folders(tmp_path):
    out = tmp_path / "profiler_output"
    make_profiler_output(out, infer_form="raw", job=SMALL)
    lake = Lake(tmp_path / "lake")
    caps = discover(out)
    assert [c.kind for c in caps if c.side == "infer"] == ["raw"]
    msg = _fails_cleanly(lake, "raw1", caps, "analyse(")
    assert msg.startswith("infer side has no device evidence")
    assert not (tmp_path / "lake" / "raw" / "kernels").exists() or not list(
        (tmp_path / "lake" / "raw" / "kernels").glob("run_id=*"))


def test_eight_ranks_two_unparsed_report_covers_six(tmp_path):
    out = tmp_path / "profiler_output"
    make_profiler_output(out, train_ranks=8, unparsed_train_ranks=(3, 5), job=SMALL)
    lake = Lake(tmp_path / "lake")
    res = run_profile(out, lake, "r8", tmp_path / "rep", progress=False)
    st = {(c.capture.rank, c.status) for c in res.ingest.captures if c.capture.side == "train"}
    assert st == {(r, "unparsed" if r in (3, 5) else "ok") for r in range(8)}
    row = mart(lake.root, "SELECT train_ranks_seen, train_ranks_usable, train_ranks_missing FROM dim_runs")[0]
    assert row == (8, 6, [3, 5])
    md = res.report_path.read_text(encoding="utf-8")
    assert "6/8" in md and "3, 5" in md
    kranks = raw(lake.root, "kernels", "side = 'train'").aggregate("count(distinct rank)").fetchone()[0]
    assert kranks == 6


def test_host_ops_with_zero_and_three_kernels_attributed_by_connection_id(base):
    _root, lake, caps = base
    probes = caps["train"]["probes"]
    cols = raw(lake.root, "host_ops", "false").columns
    ops = [dict(zip(cols, r)) for r in raw(lake.root, "host_ops", "run_id = 'good' AND side = 'train'").fetchall()]
    zero = [o for o in ops if o["name"] == probes["zero_kernels"]["name"]
            and o["start_ns"] == probes["zero_kernels"]["start_ns"]]
    three = [o for o in ops if o["name"] == probes["three_kernels"]["name"]
             and o["start_ns"] == probes["three_kernels"]["start_ns"]]
    assert len(zero) == 1 and zero[0]["kernel_count"] == 0
    assert len(three) == 1 and three[0]["kernel_count"] == 3
    names = sorted(r[0] for r in raw(lake.root, "kernels",
                                     f"run_id = 'good' AND host_op_id = {three[0]['host_op_id']}")
                   .aggregate("kernel_name").fetchall())
    assert names == sorted(probes["three_kernels"]["kernel_names"])


def test_reingest_replaces_without_duplicates(base):
    root, lake, caps = base
    n1 = raw(lake.root, "kernels", "run_id = 'good'").aggregate("count(*)").fetchone()[0]
    ingest_profile(lake, "good", explicit(root / "cap" / "train", "train") + _infer(root), progress=False)
    n2 = raw(lake.root, "kernels", "run_id = 'good'").aggregate("count(*)").fetchone()[0]
    assert n1 == n2 == caps["train"]["kernels"] + caps["infer"]["kernels"]
    assert raw(lake.root, "runs", "run_id = 'good'").aggregate("count(*)").fetchone()[0] == 1


def test_second_writer_is_refused(base, monkeypatch):
    monkeypatch.setenv("TILAKE_LOCK_WAIT", "0")   # refuse at once (the default waits 60 s)
    root, lake, _ = base
    before = lake_state(lake.root)
    hold, release = threading.Event(), threading.Event()

    def holder():
        with lake.locked():
            hold.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    hold.wait(10)
    try:
        with pytest.raises(LakeBusyError) as ei:
            ingest_profile(lake, "r9", explicit(root / "cap" / "train", "train") + _infer(root), progress=False)
        assert "another tilake writer" in str(ei.value)
    finally:
        release.set()
        t.join()
    assert lake_state(lake.root) == before


@pytest.mark.parametrize("run_id", ["../escape", "a/b", "..", "", "x y"])
def test_run_id_cannot_escape_the_lake(base, run_id):
    root, lake, _ = base
    _fails_cleanly(lake, run_id, _infer(root), "invalid run id")


def test_schema_variants_and_truncated_session(tmp_path):
    from tilake.synth.db import write_profiler_db
    lake = Lake(tmp_path / "lake")
    variants = {"bn": dict(block_columns="blockNum", schema="8.5"), "bd": dict(block_columns="block_dim"),
                "wal": dict(wal=True), "trunc": dict(session_end="null")}
    for name, kw in variants.items():
        db = pt_db(tmp_path / name, "v")
        summary = write_profiler_db(db, train_population(SMALL), **kw)
        before = tree_digest(tmp_path / name)
        ingest_profile(lake, name, explicit(db, "train") + explicit(db, "infer"), progress=False)
        assert tree_digest(tmp_path / name) == before   # byte-identical, nothing beside it
        got = raw(lake.root, "kernels", f"run_id = '{name}' AND side = 'train'").aggregate(
            "count(*), count(block_dim)").fetchone()
        assert got[0] == summary["kernels"]
        assert got[1] == summary["compute_kernels"]
    cols = raw(lake.root, "captures", "false").columns
    caps = {r[0]: dict(zip(cols, r[1:])) for r in raw(lake.root, "captures", "side = 'train'").aggregate(
        "run_id, *").fetchall()}
    assert caps["bn"]["schema_variant"].startswith("blockNum+opState")
    assert caps["bd"]["schema_variant"].startswith("block_dim")
    assert "wal" in caps["wal"]["schema_variant"]
    assert caps["trunc"]["truncated"] is True and caps["trunc"]["kernel_count"] > 0


def test_cli_prints_one_line_error_exit_2(tmp_path):
    bad = tmp_path / "ascend_pytorch_profiler_0.db"
    bad.write_text("nope")
    r = CliRunner().invoke(main, ["ingest", "--lake", str(tmp_path / "lake"), "--train", str(bad),
                                  "--infer", str(bad), "--run-id", "x"])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not a SQLite database" in lines[0]
    r = CliRunner().invoke(main, ["run", str(tmp_path / "missing"), "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output
