"""Stage 3 of tilake scan: capture verification, analyse() through the seam, fallback chain.

The analyser here is a stand-in (tests/data/verl_launch/standin): every record it produces says
``seam = "stand-in (tests)"`` and ``real = False``; nothing pretends torch_npu ran.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tilake.ingest.scan.collect import HOST_FALLBACK_LABEL, collect, compute_task_rows, write_stage3

DATA = Path(__file__).resolve().parents[2] / "data" / "verl_launch"
sys.path.insert(0, str(DATA / "standin"))
from scan_standin import StandInSeam  # noqa: E402

synth = pytest.importorskip("tilake.synth", reason="tilake.synth (generator) not available")


def _tree(tmp_path: Path, form: str = "raw") -> Path:
    root = tmp_path / "profiler_output"
    synth.make_profiler_output(root, infer_form=form, job=synth.JobConfig(layers=2))
    return root


def _files(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_analyse_writes_db_device_evidence_on_both_sides(tmp_path):
    root = _tree(tmp_path)
    seam = StandInSeam()
    st = collect(root, seam, seam.probe({}))
    assert [c["export_type"] for c in seam.calls] == [None]          # one plain analyse(), inference only
    assert st.side_status("train") == "device" and st.side_status("infer") == "device"
    assert st.comparison_possible
    infer = [s for s in st.sources if s.side == "infer"][0]
    assert infer.compute_task_info_rows and infer.compute_task_info_rows > 0 and infer.fallback is None
    train_ops = [o for o in st.operations if o["side"] == "train" and o["operation"] == "analyse()"]
    assert train_ops and train_ops[0]["result"] == "skipped"          # e2e DB parsed during the run
    # the normal Text-mode warnings are recognised, not failures
    pats = {w["pattern"]: w["count"] for w in st.known_warnings}
    assert pats == {"Failed to get acl to npu flow events": 1, "Failed to get task data from db": 1,
                    "no such table: TASK": 1}
    j = st.to_json()
    assert j["seam"] == "stand-in (tests)" and j["real"] is False and j["comparison"] == "run"
    assert all(o["real"] is False for o in j["records"])
    assert any("[stand-in (tests)]" in line for line in j["operations"])


def test_fallback_1_export_type_db(tmp_path):
    root = _tree(tmp_path)
    seam = StandInSeam({"plain": "nothing", "db": "db"})
    st = collect(root, seam, seam.probe({}))
    assert [c["export_type"] for c in seam.calls] == [None, ["db"]]
    infer = [s for s in st.sources if s.side == "infer"][0]
    assert infer.status == "device" and infer.fallback == "export_type_db"
    fb = [o for o in st.operations if o["fallback"] == "1: export_type=['db']"]
    assert fb and fb[0]["result"] == "ok"


def test_fallback_1_impossible_without_export_type(tmp_path):
    root = _tree(tmp_path)
    seam = StandInSeam({"plain": "nothing"}, export_type_supported=False)
    st = collect(root, seam, seam.probe({}))
    assert [c["export_type"] for c in seam.calls] == [None]
    fb = [o for o in st.operations if o["fallback"] == "1: export_type=['db']"]
    assert fb[0]["result"] == "skipped" and "7.1.0" in fb[0]["detail"]
    assert st.side_status("infer") == "failed" and not st.comparison_possible
    assert "inference" not in st.to_json()["reason"] and "infer side" in st.to_json()["reason"]


def test_fallback_2_host_side_csv(tmp_path):
    root = _tree(tmp_path)
    seam = StandInSeam({"plain": "empty_cti"})
    st = collect(root, seam, seam.probe({}))
    infer = [s for s in st.sources if s.side == "infer"][0]
    assert infer.status == "host_fallback" and infer.fallback == "host_csv"
    assert infer.compute_task_info_rows == 0 and infer.csv.endswith("api_statistic.csv")
    assert infer.label == HOST_FALLBACK_LABEL == "host-side fallback, not device"
    assert st.to_json()["sides"]["infer"]["label"] == HOST_FALLBACK_LABEL
    assert st.comparison_possible
    assert len(seam.calls) == 1          # a DB exists: fallback 1 does not apply


@pytest.mark.parametrize("modes", [{"plain": "fail", "db": "fail"}, {"plain": "empty_cti_nocsv"}])
def test_fallback_3_nothing_usable(tmp_path, modes):
    root = _tree(tmp_path)
    seam = StandInSeam(modes)
    st = collect(root, seam, seam.probe({}))
    assert st.side_status("infer") == "failed" and st.side_status("train") == "device"
    assert not st.comparison_possible
    j = st.to_json()
    assert j["comparison"] == "skipped" and "infer side" in j["reason"]
    results = [(o["operation"].split("(")[0], o["result"]) for o in j["records"] if o["side"] == "infer"]
    assert ("analyse", "failed" if modes["plain"] == "fail" else "ok") in results
    out = write_stage3(st, tmp_path / "s3.json")
    assert json.loads(out.read_text())["format"] == "tilake-scan-stage3/1"


def test_recorded_output_is_not_modified(tmp_path):
    root = _tree(tmp_path)
    before = _files(root)
    seam = StandInSeam()
    st = collect(root, seam, None, run_analyse=False)
    assert seam.calls == [] and _files(root) == before
    assert st.side_status("infer") == "failed"
    skipped = [o for o in st.operations if o["side"] == "infer" and o["operation"] == "analyse()"]
    assert skipped[0]["result"] == "skipped" and "analyse(" in skipped[0]["detail"]


def test_already_parsed_inference_needs_no_analyse(tmp_path):
    root = _tree(tmp_path, form="db")
    seam = StandInSeam()
    st = collect(root, seam, seam.probe({}))
    assert seam.calls == [] and st.side_status("infer") == "device"


def test_missing_sides_and_read_only_db_access(tmp_path):
    root = tmp_path / "po"
    root.mkdir()
    st = collect(root, StandInSeam(), None)
    assert st.side_status("train") == "failed" and st.side_status("infer") == "failed"
    tree = _tree(tmp_path)
    db = next(tree.glob("e2e/*/ASCEND_PROFILER_OUTPUT/*.db"))
    n, note = compute_task_rows(db)
    assert n and n > 0 and note == ""
    assert not list(db.parent.glob("*-wal")) and not list(db.parent.glob("*-shm"))
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite at all" * 100)
    n, note = compute_task_rows(bad)
    assert n is None and "not readable as SQLite" in note


def test_real_torch_npu_fixtures(tmp_path, shared_dir):
    """Real torch_npu output (msinsight fixtures, a CNN job): a Db export as the training side and
    a Text export as the inference side. The WAL-mode DB is counted without side files appearing."""
    import hashlib
    import shutil

    src = shared_dir / "fixtures" / "profiler" / "msinsight" / "test" / "data" / "pytorch"
    if not src.is_dir():
        pytest.skip(f"{src} not found")
    root = tmp_path / "profiler_output"
    shutil.copytree(src / "db" / "level1" / "rank0_ascend_pt", root / "e2e" / "rank0_ascend_pt")
    shutil.copytree(src / "text" / "level1" / "rank0_ascend_pt",
                    root / "agent_loop_rollout_replica_0" / "rank0_ascend_pt")
    db = root / "e2e" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    assert db.read_bytes()[18:20] == b"\x02\x02"            # WAL journal mode (file header)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    before = _files(root)
    seam = StandInSeam()
    st = collect(root, seam, None)
    assert seam.calls == [] and _files(root) == before      # nothing parsed, no -wal/-shm created
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    train = [s for s in st.sources if s.side == "train"][0]
    assert (train.status, train.compute_task_info_rows) == ("device", 187)
    infer = [s for s in st.sources if s.side == "infer"][0]
    assert infer.status == "device" and infer.fallback == "text_export" and infer.csv.endswith("kernel_details.csv")
    assert st.comparison_possible


def test_text_only_parse_counts_as_device_rows_in_text_form(tmp_path):
    root = _tree(tmp_path)
    seam = StandInSeam({"plain": "text", "db": "nothing"})
    st = collect(root, seam, seam.probe({}))
    infer = [s for s in st.sources if s.side == "infer"][0]
    # analyse() gave CSVs only; fallback 1 was tried (no DB), then the text export's device rows were used
    assert [c["export_type"] for c in seam.calls] == [None, ["db"]]
    assert infer.status == "device" and infer.fallback == "text_export" and infer.label == "device (text export)"


def test_older_and_relocated_layouts_and_several_replicas(tmp_path):
    """verl before PR #4320 wrote <save>/<step>/e2e/…; newer verl with relocate_results moves a replica's
    folder up to <save>/rollout-replica<r>_<name> (reference doc §4.1). Every replica is parsed."""
    import shutil

    gen = tmp_path / "gen"
    synth.make_profiler_output(gen, infer_form="raw", infer_replicas=2, job=synth.JobConfig(layers=2))
    root = tmp_path / "po"
    (root / "1").mkdir(parents=True)
    shutil.move(str(gen / "e2e"), str(root / "1" / "e2e"))
    shutil.move(str(gen / "agent_loop_rollout_replica_0"), str(root / "agent_loop_rollout_replica_0"))
    pt = next((gen / "agent_loop_rollout_replica_1").glob("*_ascend_pt"))
    shutil.move(str(pt), str(root / f"rollout-replica1_{pt.name}"))
    seam = StandInSeam()
    st = collect(root, seam, seam.probe({}))
    assert len(seam.calls) == 2
    assert [s.side for s in st.sources] == ["train", "infer", "infer"]
    assert all(s.status == "device" for s in st.sources)
    assert st.sources[0].path.startswith("1/e2e/") and st.sources[2].path.startswith("rollout-replica1_")


def test_rank_without_kernels_says_what_it_holds_not_empty_folder(tmp_path, shared_dir):
    """Real capture ``fixtures/real_public/msinsight_st_level2``: ranks 1 and 3 hold ``analysis.db``,
    ``communication*.json`` and ``step_trace_time.csv`` but no kernel data (issue 12 item 8)."""
    import shutil

    src = shared_dir / "fixtures" / "real_public" / "msinsight_st_level2"
    if not src.is_dir():
        pytest.skip(f"{src} not found")
    root = tmp_path / "profiler_output"
    for r in (0, 1):
        shutil.copytree(src / f"rank_{r}_ascend_pt", root / "e2e" / f"rank_{r}_ascend_pt")
    seam = StandInSeam()
    st = collect(root, seam, None, run_analyse=False)
    by_path = {s.path: s for s in st.sources if s.side == "train"}
    r1 = by_path["e2e/rank_1_ascend_pt"]
    assert (r1.status, r1.label) == ("failed", "evidence_missing")
    assert "empty" not in r1.note
    assert r1.note.startswith("kernel data missing: no ascend_pytorch_profiler*.db, kernel_details.csv")
    for f in ("ASCEND_PROFILER_OUTPUT/analysis.db", "ASCEND_PROFILER_OUTPUT/communication.json",
              "ASCEND_PROFILER_OUTPUT/step_trace_time.csv", "profiler_metadata.json"):
        assert f in r1.note
    assert by_path["e2e/rank_0_ascend_pt"].status == "device"
    (root / "e2e" / "rank_9_ascend_pt").mkdir()
    st = collect(root, seam, None, run_analyse=False)
    r9 = [s for s in st.sources if s.path == "e2e/rank_9_ascend_pt"][0]
    assert r9.note == "empty *_ascend_pt folder (no DB, CSV or raw data)"
