"""Small files (issue 24 item 4): a run's many small Parquet files merged into one per partition folder.

Input: a synthetic verl ``profiler_output/`` of the real torch_npu DB schema (``tilake.synth``) with 12
rollout replicas (each its own rank slot) and 2 training ranks; a writer then stages the replicas' capture
rows one file each into one leaf. Checks: the commit merges a leaf with more than ``AUTO_MIN_FILES`` files; ``tilake runs compact RUN`` merges the rest; rows (every column
of every table, as a multiset) are the same as before, and a re-run finds nothing to do.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.lake import schema
from tilake.lake.compact import AUTO_MIN_FILES, compact_run
from tilake.lake.duck import connect
from tilake.lake.store import Lake, raw_source


def _rows(lake: Lake, all_columns: bool = True) -> dict:
    """Rows per profile table (sorted reprs); ``all_columns=False`` leaves out ``runs.created_at`` (two
    ingests of one run differ only there)."""
    con = connect()
    out = {}
    try:
        for t in schema.PROFILE_TABLES:
            cols = ", ".join(f'"{c}"' for c, _ in schema.TABLES[t] if all_columns or c != "created_at")
            out[t] = sorted(map(repr, con.execute(f"SELECT {cols} FROM {raw_source(lake, t)}").fetchall()))
        return out
    finally:
        con.close()


def _files(lake: Lake, table: str, leaf: str) -> int:
    return len(list((lake.raw / table / "run_id=r" / leaf).glob("*.parquet")))


@pytest.fixture(scope="module")
def profiler_output(tmp_path_factory):
    from tilake.synth import JobConfig, make_profiler_output

    root = tmp_path_factory.mktemp("compact") / "profiler_output"
    make_profiler_output(root, train_ranks=2, infer_replicas=AUTO_MIN_FILES + 4, job=JobConfig(layers=1),
                         with_stack=False, infer_with_stack=False)
    return root


def _many_small_files(lake: Lake, n: int) -> list:
    """Stage ``n`` one-row files into the leaf ``side=infer/rank=0`` of run ``r``'s captures (the rows of the
    ingested rollout replicas, each its own file, as a writer that stages per capture lays them out) and commit.
    Returns the rows written, sorted."""
    con = connect()
    try:
        rows = con.execute(f"SELECT * FROM {raw_source(lake, 'captures')} WHERE side = 'infer' ORDER BY rank").fetchall()
        cols = [d[0] for d in con.description]
    finally:
        con.close()
    assert len(rows) >= n
    with lake.write_run("r", ["captures"]) as w:
        for row in rows[:n]:
            sel = ", ".join(f"{v!r} AS \"{c}\"" if v is not None else f"NULL AS \"{c}\"" for c, v in zip(cols, row)
                            if c in dict(schema.file_columns("captures")))
            w.copy_query("captures", f"SELECT {sel}", {"side": "infer", "rank": 0})
    return rows[:n]


def test_commit_compacts_many_small_files_rows_unchanged(profiler_output, tmp_path):
    from tilake.pipeline.profile import ingest_command

    n = AUTO_MIN_FILES + 4
    lake = Lake(tmp_path / "lake")
    ingest_command(profiler_output, lake, "r", progress=False)
    _many_small_files(lake, n)
    assert [p.name for p in (lake.raw / "captures" / "run_id=r" / "side=infer" / "rank=0").glob("*.parquet")] \
        == ["part-c00001.parquet"]           # n one-row files of one leaf: merged into one at the commit
    # the same writes with automatic compaction off give the same rows
    import tilake.lake.store as store

    plain = Lake(tmp_path / "plain")
    ingest_command(profiler_output, plain, "r", progress=False)
    orig = store.compact_staged
    store.compact_staged = lambda *a, **k: 0
    try:
        _many_small_files(plain, n)
    finally:
        store.compact_staged = orig
    assert _files(plain, "captures", "side=infer/rank=0") == n
    before = _rows(plain)
    assert _rows(plain, False) == _rows(lake, False) and len(before["captures"]) == n
    # runs compact on the uncompacted lake: every leaf with >= 2 files merged, rows unchanged
    kernels_train = _files(plain, "kernels", "side=train/rank=0")
    assert kernels_train >= 2     # compute kernels and HCCL ops are two writes
    merged = compact_run(plain, "r")
    assert merged["captures"] == n - 1 and merged["kernels"] >= kernels_train - 1
    assert _files(plain, "kernels", "side=train/rank=0") == 1
    assert _rows(plain) == before
    assert compact_run(plain, "r") == {}
    assert not any((plain.root / ".staging").glob("*")) if (plain.root / ".staging").exists() else True


def test_runs_compact_cli(profiler_output, tmp_path):
    from tilake.pipeline.profile import ingest_command

    lake = Lake(tmp_path / "lake")
    ingest_command(profiler_output, lake, "r", progress=False)
    r = CliRunner().invoke(main, ["runs", "compact", "r", "--lake", str(lake.root)])
    assert r.exit_code == 0 and "merged away" in r.output, r.output
    r = CliRunner().invoke(main, ["runs", "compact", "nope", "--lake", str(lake.root)])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "run nope is not in the lake" in r.output
