"""``tilake scan --dry-run --profiler torch`` runs nothing of the script (issue 33): no ``$(...)`` of an
assignment, no sourced file, nothing under ``if false``, not the script's own interpreter. The environment check
is a fixed probe unless ``--allow-preamble`` is given, and the output says which ran."""
from __future__ import annotations

import json
import stat
from pathlib import Path

from click.testing import CliRunner

from tilake.cli import main


def _hostile(tmp_path: Path) -> Path:
    """A launch script whose every preamble trick would leave a marker file in ``tmp_path/marks``."""
    d = tmp_path / "s"
    d.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    (d / "evil.sh").write_text(f"touch {marks}/sourced\n")
    (d / "evil_if.sh").write_text(f"touch {marks}/under_if_false\n")
    fake = d / "python3"
    fake.write_text(f"#!/bin/sh\ntouch {marks}/own_python\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    script = d / "run.sh"
    script.write_text("#!/bin/bash\n"
                      f'HERE=$(touch {marks}/dollar_paren; pwd)\n'
                      "source ./evil.sh\n"
                      "if false; then\n  source ./evil_if.sh\nfi\n"
                      "false && source ./evil_if.sh\n"
                      "./python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=/nonexistent/Qwen2-7B "
                      "trainer.total_training_steps=1\n")
    return script


def test_dry_run_torch_runs_nothing_of_the_script(tmp_path):
    script = _hostile(tmp_path)
    before = script.read_bytes()
    r = CliRunner().invoke(main, ["scan", "--dry-run", "--profiler", "torch", "--lang", "en", str(script),
                                  "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "marks").iterdir()) == []
    assert "fixed probe only, nothing of the script runs" in r.output
    assert "--allow-preamble" in r.output
    assert script.read_bytes() == before and not (tmp_path / "lake").exists()


def test_allow_preamble_replays_only_unconditional_lines(tmp_path):
    script = _hostile(tmp_path)
    r = CliRunner().invoke(main, ["scan", "--dry-run", "--profiler", "torch", "--allow-preamble", "--lang", "en",
                                  "--format", "json", str(script), "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 0, r.output
    got = sorted(p.name for p in (tmp_path / "marks").iterdir())
    # allowed: the assignment's $(...), the top-level source and the interpreter the launch names;
    # never the lines whose condition is not known (if false / false &&)
    assert got == ["dollar_paren", "own_python", "sourced"], got
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    skipped = checks["preamble lines under a condition"]["found"]
    assert "line 5: source ./evil_if.sh" in skipped and "line 7" in skipped
    assert "after the script's preamble" in checks["interpreter the script runs"]["found"]


def test_from_output_refuses_allow_preamble(tmp_path):
    (tmp_path / "po").mkdir()
    r = CliRunner().invoke(main, ["scan", "--from-output", str(tmp_path / "po"), "--allow-preamble",
                                  "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 2 and "--allow-preamble" in r.output and "Traceback" not in r.output


def test_fixed_probe_does_not_import_modules_beside_the_script(tmp_path):
    """Run from the script's folder: a ``torch.py`` / ``verl.py`` there must not be what the probe imports."""
    import subprocess
    import sys

    script = _hostile(tmp_path)
    for mod in ("torch", "verl", "vllm"):
        (script.parent / f"{mod}.py").write_text(f"open({str(tmp_path / 'marks' / ('imported_' + mod))!r}, 'w')\n")
    code = "import sys; from tilake.cli import main; sys.argv = ['tilake'] + sys.argv[1:]; main()"
    for profiler in ("torch", "npu"):
        cp = subprocess.run([sys.executable, "-c", code, "scan", "--dry-run", "--profiler", profiler, script.name,
                             "--lake", str(tmp_path / "lake")], cwd=script.parent, capture_output=True, text=True,
                            timeout=300)
        assert cp.returncode == 0, cp.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "marks").iterdir()) == []
