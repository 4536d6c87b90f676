"""Defects a new-user break test found: an --out inside the lake, Ctrl-C, $TILAKE_MEMORY_LIMIT named,
`tilake dbt` errors and colours, a broken stdout pipe, a folder with one side only, out-of-range
request rows, and the paths `tilake report` prints."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.errors import TilakeError
from tilake.files import check_out_dir
from tilake.lake.store import Lake

REPO = Path(__file__).resolve().parents[2]


def _error_line(r):
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "Aborted!" not in r.output, r.output
    assert sum(ln.startswith("error: ") for ln in lines) == 1, r.output
    return lines[-1]


def test_out_inside_the_lake_is_refused(tmp_path):
    lake = tmp_path / "lake"
    (lake / "raw" / "kernels").mkdir(parents=True)
    for out in (lake, lake / "raw" / "kernels", lake / "x"):
        with pytest.raises(TilakeError, match="inside the lake"):
            check_out_dir(out, lake)
    assert check_out_dir(tmp_path / "reports", lake) == tmp_path / "reports"   # beside the lake: fine
    line = _error_line(CliRunner().invoke(main, ["report", "r1", "--lake", str(lake), "--out", str(lake / "raw" / "kernels")]))
    assert "inside the lake" in line and str(lake / "raw" / "kernels") in line
    assert sorted(p.name for p in (lake / "raw" / "kernels").iterdir()) == []   # nothing written there
    line = _error_line(CliRunner().invoke(main, ["run", "--train", str(tmp_path), "--lake", str(lake), "--out", str(lake / "x")]))
    assert "inside the lake" in line


def test_ctrl_c_during_ingest_is_one_error_line(tmp_path, monkeypatch):
    import tilake.pipeline.profile as prof

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(prof, "ingest_command", interrupted)
    line = _error_line(CliRunner().invoke(main, ["ingest", str(tmp_path), "--lake", str(tmp_path / "lake")]))
    assert line == "error: interrupted by the user"


def test_ctrl_c_during_dbt_names_the_lake_and_the_run(tmp_path, monkeypatch):
    from dbt.cli.main import dbtRunner, dbtRunnerResult

    import tilake.pipeline.profile as prof
    from tilake.lake.warehouse import DbtInterrupted, build_swapped

    monkeypatch.setattr(dbtRunner, "invoke", lambda self, args: dbtRunnerResult(success=False, exception=KeyboardInterrupt()))
    lake = Lake(tmp_path / "lake")
    with pytest.raises(DbtInterrupted) as exc:
        build_swapped(lake)
    assert str(exc.value) == f"{lake.root}: interrupted during dbt build; the lake is unchanged"
    assert not lake.warehouse.exists() and not (lake.root / ".build").exists()
    # tilake run: the same line plus the command that finishes the job
    monkeypatch.setattr(prof, "collect_captures", lambda *a: [])
    monkeypatch.setattr(prof, "check_sides", lambda *a: None)
    monkeypatch.setattr(prof, "ingest_profile", lambda *a, **k: None)
    with pytest.raises(TilakeError) as exc:
        prof.run_profile(tmp_path, lake, "r1", tmp_path / "out")
    assert str(exc.value) == (f"{lake.root}: interrupted during dbt build; the lake is unchanged "
                              "(run `tilake build` to build run r1)")


def test_memory_limit_from_the_environment_names_the_variable(tmp_path):
    r = CliRunner().invoke(main, ["run", str(tmp_path), "--lake", str(tmp_path / "l")], env={"TILAKE_MEMORY_LIMIT": "abc"})
    assert _error_line(r).startswith("error: TILAKE_MEMORY_LIMIT='abc' is not a memory size")
    r = CliRunner().invoke(main, ["run", str(tmp_path), "--memory-limit", "abc"])
    assert _error_line(r).startswith("error: --memory-limit='abc' is not a memory size")


def test_dbt_passthrough_error_line_and_no_colours_when_piped(tmp_path, monkeypatch, capsys):
    from dbt.cli.main import dbtRunner, dbtRunnerResult

    from tilake.lake.warehouse import dbt_passthrough

    seen = {}

    def fake(self, args):
        seen["colors"] = os.environ.get("DBT_USE_COLORS")
        return dbtRunnerResult(success=False, exception=RuntimeError("No such command 'nosuchcmd'."))

    monkeypatch.setattr(dbtRunner, "invoke", fake)
    monkeypatch.delenv("DBT_USE_COLORS", raising=False)
    lake = Lake(tmp_path / "lake")
    lake.raw.mkdir(parents=True)
    assert dbt_passthrough(lake, ["nosuchcmd"]) == 2
    assert capsys.readouterr().err.startswith("error: dbt could not run: No such command 'nosuchcmd'.")
    assert seen["colors"] == "false" and "DBT_USE_COLORS" not in os.environ   # pytest's stdout is no tty


def test_scan_dry_run_into_head_exits_0_quietly(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cmd = (f"{sys.executable} -m tilake.cli scan {REPO / 'tests/data/verl_launch/grpo_qwen3_megatron_vllm.sh'} "
           "--dry-run | head -2; exit ${PIPESTATUS[0]}")
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 2 and "stage 1" in r.stdout
    assert r.stderr == ""


def test_one_sided_folder_names_the_folder_and_the_layouts(tmp_path):
    from tilake.pipeline.profile import check_sides

    with pytest.raises(TilakeError) as exc:
        check_sides([], tmp_path)
    text = str(exc.value)
    assert text.startswith(f"no train capture was found in {tmp_path.resolve()}")
    for part in ("e2e/", "agent_loop_rollout_replica_*", "--train PATH", "--allow-missing"):
        assert part in text, part
    check_sides([], tmp_path, allow_missing=True)   # recorded as evidence_missing instead


def test_request_rows_outside_the_inference_tensor_are_refused(tmp_path):
    torch = pytest.importorskip("torch")
    from tilake.diagnosis.pair import _select_request
    from tilake.pipeline.dumps import run_analyze

    tens = {"train": torch.zeros(8), "infer": torch.zeros(4, 8)}
    with pytest.raises(TilakeError, match=r"--request-index 99 is outside the inference tensor's first dimension of 4 \(shape \[4, 8\]\)"):
        _select_request(tens, {"request_index": 99}, [])
    _select_request(tens, {"request_index": 3}, notes := [])
    assert list(tens["infer"].shape) == [8] and notes == ["infer: request row 3 of batch [4, 8]"]
    tens = {"train": torch.zeros(3, 8), "infer": torch.zeros(10, 8)}
    with pytest.raises(TilakeError, match=r"--request-tokens 5:12 reaches past the inference tensor's 10 token rows"):
        _select_request(tens, {"request_tokens": [5, 12]}, [])
    with pytest.raises(TilakeError, match="--request-tokens 5:2: END must be after START"):
        run_analyze(tmp_path, tmp_path, tmp_path / "o", request_tokens=(5, 2))
    # an unbatched [seq, hidden] inference tensor (the real single-request pairA dump's shape) still refuses
    tens = {"train": torch.zeros(8, 32), "infer": torch.zeros(8, 32)}
    with pytest.raises(TilakeError, match=r"--request-index 99 .* first dimension of 8 \(shape \[8, 32\]\)"):
        _select_request(tens, {"request_index": 99}, [])
    _select_request(tens, {"request_index": 3}, notes := [])   # in range but no batch: nothing selected
    assert list(tens["infer"].shape) == [8, 32] and notes == []


def test_report_prints_every_file_it_wrote(tmp_path, capsys):
    from tilake.reports.run_console import print_report_paths

    out = {"report": tmp_path / "r.md", "csv": tmp_path / "t.csv", "chart": None, "runtime_ops": [tmp_path / "o.json"],
           "html": tmp_path / "r.html", "numeric_csv": tmp_path / "n.csv", "xlsx": tmp_path / "r.xlsx"}
    print_report_paths(out)
    assert capsys.readouterr().out.splitlines() == [
        f"report: {tmp_path / 'r.md'}", f"csv: {tmp_path / 't.csv'}", f"ops: {tmp_path / 'o.json'}",
        f"html: {tmp_path / 'r.html'}", f"numeric_csv: {tmp_path / 'n.csv'}", f"xlsx: {tmp_path / 'r.xlsx'}"]
