"""tilake scan end to end with the stand-in RL script and stand-in analyser (no NPU here).

``python3 -m verl...`` in the launch script reaches ``tests/data/verl_launch/standin/verl_standin.sh``
through a ``python3`` shim on PATH; ``analyse()`` goes through :class:`StandInSeam`. Every record
of these runs is labelled ``stand-in (tests)``: the suite never pretends torch_npu ran.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.ingest.scan import seam as npu_seam
from tilake.ingest.scan.env import NO_NPU_MESSAGE
from tilake.ingest.scan.script import parse_script
from tilake.lake.store import Lake
from tilake.pipeline.scan import ScanStopped, scan

DATA = Path(__file__).resolve().parents[1] / "data" / "verl_launch"
sys.path.insert(0, str(DATA / "standin"))
from scan_standin import StandInSeam, shim_env  # noqa: E402

pytest.importorskip("tilake.synth", reason="tilake.synth (generator) not available")
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not available")

SCRIPT = "grpo_qwen3_megatron_vllm.sh"


@pytest.fixture
def job(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    shutil.copy(DATA / SCRIPT, d / "run.sh")
    model = tmp_path / "Qwen3-0.6B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "num_hidden_layers": 28}))
    env = shim_env(tmp_path, MODEL_PATH=str(model), STANDIN_LAYERS="2")
    return d / "run.sh", env, tmp_path


def _runs(lake: Lake):
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT run_id, model_id, model_family, rl_config, collection_method, tool_versions "
                           f"FROM read_parquet('{lake.raw}/runs/**/*.parquet', union_by_name=true)").fetchall()
    finally:
        con.close()


def _kernels(lake: Lake, rid: str) -> int:
    con = duckdb.connect()
    try:
        return con.execute(f"SELECT count(*) FROM read_parquet('{lake.raw}/kernels/**/*.parquet', "
                           f"union_by_name=true) WHERE run_id = ?", [rid]).fetchone()[0]
    finally:
        con.close()


def test_full_scan_and_rescan_replaces_the_run(job, monkeypatch):
    script, env, tmp = job
    original = script.read_bytes()
    lake = Lake(tmp / "lake")
    seam = StandInSeam()
    res = scan(script, lake, out_dir=tmp / "out", env=env, seam=seam)
    # stage 1: backup byte-identical, config parsed
    assert res.backup is not None and res.backup.read_bytes() == original
    assert res.backup.name.startswith("run.sh.bak_")
    assert res.parsed.config["model_path"] == env["MODEL_PATH"]
    # stage 2: block added, diff shown, quoting of the rest kept
    text = script.read_text()
    assert "# >>> tilake scan: profiler block" in text and '"${PROFILER[@]}" \\\n    "$@"' in text
    assert res.diff.startswith(f"--- {res.backup.name}\n+++ run.sh\n")
    # stage 3: run log, captures, analyse() through the stand-in seam
    po = script.parent / "profiler_output"
    log = (po / "run.log").read_text()
    assert "step:1" in log and "exit status 0" in log
    assert res.run.returncode == 0 and "rollout (vLLM inference)" in res.run.phases
    s3 = json.loads((po / "tilake_scan_stage3.json").read_text())
    assert s3["seam"] == "stand-in (tests)" and s3["real"] is False
    assert s3["sides"]["train"]["status"] == "device" and s3["sides"]["infer"]["status"] == "device"
    assert [c["export_type"] for c in seam.calls] == [None]
    # stages 4-5: report, CSV, lake
    assert res.status == "ok" and res.report_path.is_file() and res.csv_path.read_bytes()[:3] == b"\xef\xbb\xbf"
    assert res.grade_counts.get("red", 0) >= 1
    report = res.report_path.read_text()
    assert "stand-in (tests), not an NPU" in report and "采集阶段记录" in report
    rows = _runs(lake)
    assert len(rows) == 1
    rid, model_id, family, rl_config, method, versions = rows[0]
    assert rid == res.run_id == parse_script(script, env=env).run_id()
    assert (model_id, family) == ("Qwen/Qwen3-0.6B", "qwen3")
    cfg = json.loads(rl_config)
    assert cfg["train_backend"] == "megatron" and cfg["rollout_n"] == 2 and cfg["stage3"]["comparison"] == "run"
    assert json.loads(versions)["npu_seam_real"] is False
    kernels = _kernels(lake, rid)
    assert kernels > 0

    # second scan of the same script, through the CLI, with the host-side fallback on the
    # inference side: no new injection, same run id, the run's partitions are replaced
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(npu_seam, "get_seam", lambda: StandInSeam({"plain": "empty_cti"}))
    r = CliRunner().invoke(main, ["scan", str(script), "--lake", str(lake.root), "--out", str(tmp / "out2")])
    assert r.exit_code == 0, r.output
    assert "host-side fallback, not device" in r.output and "status: host_fallback" in r.output
    assert f"run id: {rid}" in r.output and script.read_text() == text and "(identical backup reused)" not in r.output
    assert "host 侧备选，非 device 侧" in (tmp / "out2" / "train_infer_op_diff_report.md").read_text()
    rows = _runs(lake)
    assert [row[0] for row in rows] == [rid]
    assert json.loads(rows[0][3])["stage3"]["sides"]["infer"]["status"] == "host_fallback"
    assert 0 < _kernels(lake, rid) != kernels          # replaced by the new capture, not added to the old one


def test_fallback_3_skips_comparison_and_keeps_lake(job):
    script, env, tmp = job
    lake = Lake(tmp / "lake")
    res = scan(script, lake, out_dir=tmp / "out", env=env, seam=StandInSeam({"plain": "fail", "db": "fail"}),
               lang="en", run_id="my.run-1")
    assert res.status == "comparison_skipped" and res.run_id == "my.run-1"
    assert not lake.root.exists()
    rep = res.report_path.read_text()
    assert "evidence_missing" in rep and "comparison skipped (fallback 3)" in rep
    assert "analyse('agent_loop_rollout_replica_0/" in rep and "→ failed" in rep
    assert "export_type=['db']" in rep and "no usable evidence on the infer side" in rep and "`my.run-1`" in rep
    with pytest.raises(TilakeError, match="invalid run id"):
        scan(script, lake, env=env, seam=StandInSeam(), run_id="../escape")


def test_run_killed_halfway_keeps_log_and_partial_output(job):
    script, env, tmp = job
    lake = Lake(tmp / "lake")
    env = dict(env, STANDIN_FAIL_AT="rollout")
    with pytest.raises(ScanStopped) as e:
        scan(script, lake, out_dir=tmp / "out", env=env, seam=StandInSeam())
    msg = str(e.value)
    assert "killed by SIGKILL (exit status 137" in msg and "the lake was not changed" in msg and "train:" in msg
    po = script.parent / "profiler_output"
    assert "rollout worker lost" in (po / "run.log").read_text()
    assert list(po.glob("e2e/*_ascend_pt/ASCEND_PROFILER_OUTPUT/*.db"))
    s3 = json.loads((po / "tilake_scan_stage3.json").read_text())
    assert s3["run"]["returncode"] == 137 and s3["sides"]["train"]["status"] == "device"
    assert not lake.root.exists() and not (tmp / "out").exists()


def test_nonzero_exit_stops_with_the_log_tail(job, capsys):
    script, env, tmp = job
    with pytest.raises(ScanStopped, match="exit status 5"):
        scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=dict(env, STANDIN_EXIT="5"), seam=StandInSeam())
    assert "Training finished (stand-in)." in capsys.readouterr().out


def test_profiler_args_are_verified_by_the_stand_in(job):
    """A script whose own profiler block is incomplete: the stand-in refuses (exit 3), the scan stops."""
    script, env, tmp = job
    text = script.read_text().replace('"$@"', 'global_profiler.tool=npu global_profiler.save_path=prof_out "$@"')
    script.write_text(text)
    with pytest.raises(ScanStopped, match="exit status 3"):
        scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=env, seam=StandInSeam())
    assert "profiler arguments incomplete" in (script.parent / "prof_out" / "run.log").read_text()


def test_existing_profiler_block_is_used_as_is_and_args_pass_through(job):
    """Seed-style script that already carries the PROFILER block: no injection, its save path is
    used, and arguments after the script (its "$@") reach verl after the profiler arguments."""
    script, env, tmp = job
    shutil.copy(DATA / "grpo_qwen3_megatron_vllm_prof.sh", script)
    original = script.read_bytes()
    out = tmp / "prof_out"      # the seed-style block expands it unquoted, as bash would
    argv_file = tmp / "argv.bin"
    env = dict(env, PROFILER_OUTPUT_DIR=str(out), STANDIN_ARGS_OUT=str(argv_file))
    res = scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=env, lang="en",
               seam=StandInSeam({"plain": "fail", "db": "fail"}), script_args=["trainer.total_training_steps=1"])
    assert res.diff == "" and script.read_bytes() == original and res.output_dir == out
    assert res.backup.read_bytes() == original
    assert res.run.returncode == 0 and (out / "run.log").is_file() and (out / "tilake_scan_stage3.json").is_file()
    from scan_standin import read_args
    argv = read_args(argv_file)
    assert argv[-1] == "trainer.total_training_steps=1" and "global_profiler.tool=npu" in argv
    assert res.stage3.side_status("train") == "device" and res.status == "comparison_skipped"


def test_real_seam_without_torch_npu_stops_at_stage_1(job):
    script, env, tmp = job
    before = sorted(p.name for p in script.parent.iterdir())
    seam = npu_seam.TorchNpuSeam()
    env = dict(env, PATH=os.environ.get("PATH", ""))          # the real python3, not the shim
    probe = seam.probe(env)
    if probe.torch_npu is not None:
        pytest.skip("torch_npu is importable here: this test covers machines without it")
    with pytest.raises(ScanStopped) as e:
        scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=env, seam=seam)
    assert NO_NPU_MESSAGE in str(e.value) and "nothing was written" in str(e.value)
    assert sorted(p.name for p in script.parent.iterdir()) == before
    assert not (tmp / "lake").exists()


def test_read_only_script_stops_before_running(job):
    script, env, tmp = job
    original = script.read_bytes()
    os.chmod(script, 0o444)
    with pytest.raises(TilakeError, match="read-only"):
        scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=env, seam=StandInSeam())
    backups = list(script.parent.glob("run.sh.bak_*"))
    assert len(backups) == 1 and backups[0].read_bytes() == original and script.read_bytes() == original
    assert not (script.parent / "profiler_output").exists()


def test_read_only_filesystem_stops_before_anything_is_written(job, monkeypatch):
    from tilake.ingest.scan import inject as scan_inject
    from tilake.pipeline import scan as scan_mod

    script, env, tmp = job
    before = sorted(p.name for p in script.parent.iterdir())
    monkeypatch.setattr(scan_mod, "fs_read_only", lambda p: True)
    monkeypatch.setattr(scan_inject, "fs_read_only", lambda p: True)
    with pytest.raises(TilakeError, match="read-only filesystem"):
        scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=env, seam=StandInSeam())
    assert sorted(p.name for p in script.parent.iterdir()) == before and not (tmp / "lake").exists()


def test_busy_lake_after_the_run_says_how_to_retry(job, monkeypatch):
    monkeypatch.setenv("TILAKE_LOCK_WAIT", "0")   # refuse at once (the default waits 60 s)
    script, env, tmp = job
    lake = Lake(tmp / "lake")
    with lake.locked():
        with pytest.raises(ScanStopped) as e:
            scan(script, lake, out_dir=tmp / "out", env=env, seam=StandInSeam())
    msg = str(e.value)
    assert "stages 4–5 failed after a successful run" in msg and "another tilake writer" in msg
    assert f"tilake scan --from-output {script.parent / 'profiler_output'} {script}" in msg
    assert (script.parent / "profiler_output" / "tilake_scan_stage3.json").is_file()


def test_dry_run_writes_nothing(job):
    script, env, tmp = job
    before = sorted(p.name for p in script.parent.iterdir())
    res = scan(script, Lake(tmp / "lake"), out_dir=tmp / "out", env=env, seam=StandInSeam(), dry_run=True)
    assert res.status == "dry_run" and "+    \"${PROFILER[@]}\" \\" in res.diff
    assert sorted(p.name for p in script.parent.iterdir()) == before and not (tmp / "lake").exists()


# ------------------------------------------------------------------------------ CLI
def test_cli_from_output_uses_the_scripts_run_id(tmp_path):
    from tilake import synth

    po = tmp_path / "profiler_output"
    synth.make_profiler_output(po, infer_form="db", job=synth.JobConfig(layers=2))
    before = sorted(str(p) for p in po.rglob("*"))
    script = DATA / SCRIPT
    r = CliRunner().invoke(main, ["scan", str(script), "--from-output", str(po), "--lake", str(tmp_path / "lake"),
                                  "--out", str(tmp_path / "out"), "--lang", "en"])
    assert r.exit_code == 0, r.output
    assert sorted(str(p) for p in po.rglob("*")) == before            # recorded output untouched
    rid = parse_script(script).run_id()
    assert f"run id: {rid}" in r.output
    rows = _runs(Lake(tmp_path / "lake"))
    assert [row[0] for row in rows] == [rid] and rows[0][4].startswith("tilake scan --from-output")
    assert json.loads(rows[0][3])["stage3"]["seam"] == "none (recorded output, nothing parsed)"
    assert (tmp_path / "out" / "train_infer_op_diff_report.md").read_text().startswith("# Train–infer operator diff report")


def test_cli_from_output_raw_inference_is_reported_not_parsed(tmp_path):
    from tilake import synth

    po = tmp_path / "po"
    synth.make_profiler_output(po, infer_form="raw", job=synth.JobConfig(layers=2))
    r = CliRunner().invoke(main, ["scan", "--from-output", str(po), "--lake", str(tmp_path / "lake"),
                                  "--out", str(tmp_path / "out"), "--lang", "en"])
    assert r.exit_code == 1, r.output
    assert "stages 4–5 skipped" in r.output and not (tmp_path / "lake").exists()
    rep = (tmp_path / "out" / "train_infer_op_diff_report.md").read_text()
    assert "torch_npu.profiler.profiler.analyse(" in rep and "(scan)" not in rep


def test_from_output_shows_the_original_scans_record(tmp_path):
    """A recorded tilake_scan_stage3.json (e.g. analyse() failed on the NPU host) is shown first."""
    from tilake import synth
    from tilake.ingest.scan.collect import collect, write_stage3

    po = tmp_path / "po"
    synth.make_profiler_output(po, infer_form="raw", job=synth.JobConfig(layers=2))
    seam = StandInSeam({"plain": "fail", "db": "fail"})
    write_stage3(collect(po, seam, seam.probe({})), po / "tilake_scan_stage3.json")
    r = CliRunner().invoke(main, ["scan", "--from-output", str(po), "--lake", str(tmp_path / "lake"),
                                  "--out", str(tmp_path / "out"), "--lang", "en"])
    assert r.exit_code == 1, r.output
    rep = (tmp_path / "out" / "train_infer_op_diff_report.md").read_text()
    assert "- (scan) " in rep and "→ failed" in rep and "- (--from-output) " in rep
    assert "[stand-in (tests)]" in rep


@pytest.mark.parametrize("name,needle", [("missing.sh", "no such file"),
                                         ("not_a_launch.sh", "not a verl launch script")])
def test_cli_bad_scripts(tmp_path, name, needle):
    src = DATA / name
    target = tmp_path / name
    if src.exists():
        shutil.copy(src, target)
    r = CliRunner().invoke(main, ["scan", str(target), "--lake", str(tmp_path / "lake"), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ([name] if src.exists() else [])
