"""Edge cases found by a fresh-user trial: host-only evidence, malformed CSV numbers, duplicates,
unwritable output folders, empty run ids, orphaned staging folders."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from profiler_helpers import llm_pair, mart, raw

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from tilake.pipeline.profile import collect_captures, run_profile
from tilake.synth.population import JobConfig, infer_population, train_population
from tilake.synth.text import write_text_export

SMALL = JobConfig(layers=2)
KD_HEADER = "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim\n"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("edge")
    llm_pair(root, train_population(SMALL), infer_population(SMALL))
    return root


def test_host_only_inference_side_never_concludes_no_difference(pair, tmp_path):
    api_only = tmp_path / "infer" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    write_text_export(api_only, infer_population(SMALL))
    for f in ("kernel_details.csv", "op_statistic.csv", "operator_details.csv"):
        (api_only / f).unlink(missing_ok=True)
    assert (api_only / "api_statistic.csv").exists()
    lake = Lake(tmp_path / "lake")
    res = run_profile(None, lake, "host", tmp_path / "out", train=[pair / "train"], infer=[tmp_path / "infer"],
                      progress=False)
    assert res.evidence == {"train": "device", "infer": "host_fallback"}
    assert "green" not in res.grade_counts
    rules = {r for (r,) in mart(lake.root, "SELECT DISTINCT rule_id FROM fct_op_comparison")}
    assert "host_fallback_unconfirmed" in rules
    md = res.report_path.read_text(encoding="utf-8")
    assert "host 侧备选，非 device 侧" in md and "无差异</span> ×" not in md


@pytest.mark.parametrize("bad,expect", [("NaN", "is not a time"), ("inf", "is not a time"),
                                        ("1e999", "is not a time"), ("abc", "is not a time"),
                                        ("-5", "negative time")])
def test_malformed_kernel_details_numbers_are_one_line_errors(pair, tmp_path, bad, expect):
    d = tmp_path / "t_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    d.mkdir(parents=True)
    (d / "kernel_details.csv").write_text(KD_HEADER + "1,aclnnMm_MatMulCommon_MatMulV2,MatMulV2,AI_CORE,"
                                          f"100.5\t,{bad},0,20\n", encoding="utf-8")
    lake = Lake(tmp_path / "lake")
    with pytest.raises(TilakeError) as ei:
        ingest_profile(lake, "bad", explicit(pair / "train", "train") + explicit(d.parent, "infer"), progress=False)
    msg = str(ei.value)
    assert "\n" not in msg and expect in msg and "kernel_details.csv line 2 Duration(us)" in msg
    assert not lake.root.exists()


def test_kernel_details_without_time_columns_is_refused(pair, tmp_path):
    d = tmp_path / "t_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    d.mkdir(parents=True)
    (d / "kernel_details.csv").write_text("Name,Type\naclnnMm_MatMulCommon_MatMulV2,MatMulV2\n", encoding="utf-8")
    with pytest.raises(TilakeError, match="lacks column\\(s\\) Start Time\\(us\\), Duration\\(us\\)"):
        ingest_profile(Lake(tmp_path / "lake"), "bad", explicit(d.parent, "infer"), progress=False)


def test_same_capture_named_twice_is_read_once(pair, tmp_path):
    db = next((pair / "train").rglob("*.db"))
    caps = collect_captures(None, train=[pair / "train", db, db.parent.parent], infer=[pair / "infer"])
    assert [c.side for c in caps] == ["train", "infer"]


def test_unwritable_out_dir_fails_before_touching_the_lake(pair, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    lake = Lake(tmp_path / "lake")
    with pytest.raises(TilakeError, match="output folder is not writable"):
        run_profile(None, lake, "o", blocker / "sub", train=[pair / "train"], infer=[pair / "infer"], progress=False)
    assert not lake.root.exists()


def test_empty_run_id_is_refused(pair, tmp_path):
    r = CliRunner().invoke(main, ["ingest", "--lake", str(tmp_path / "lake"), "--run-id", "",
                                  "--train", str(pair / "train"), "--infer", str(pair / "infer")])
    assert r.exit_code == 2 and "invalid run id ''" in r.output


def test_orphaned_staging_is_swept_by_the_next_writer(pair, tmp_path):
    lake = Lake(tmp_path / "lake")
    caps = explicit(pair / "train", "train") + explicit(pair / "infer", "infer")
    ingest_profile(lake, "a", caps, progress=False)
    orphan = lake.root / ".staging" / "deadbeef" / "kernels"
    orphan.mkdir(parents=True)
    (orphan / "part.parquet").write_bytes(b"junk")
    ingest_profile(lake, "b", caps, progress=False)
    assert not (lake.root / ".staging").exists() or not any((lake.root / ".staging").iterdir())
    assert raw(lake.root, "runs", "true").aggregate("count(*)").fetchone()[0] == 2


def test_build_refuses_a_missing_lake(tmp_path):
    r = CliRunner().invoke(main, ["build", "--lake", str(tmp_path / "typo")])
    assert r.exit_code == 2 and "no lake here" in r.output
    assert not (tmp_path / "typo").exists()
