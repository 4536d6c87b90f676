"""``tilake example`` as a pip user without PyTorch meets it: the operator diff runs without torch, the
summary names the lake and the chart and prints ``export TILAKE_LAKE=…`` plus three commands that work
as printed; dump commands without torch stop with one "install tilake[dumps]" line."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tilake
from tilake.cli import main


def _no_torch_env(tmp: Path) -> dict:
    """PYTHONPATH with a sitecustomize that makes ``import torch`` fail (as on a machine without it)."""
    shim = tmp / "no_torch"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None  # import torch -> ImportError\n")
    here = [str(Path(p).resolve()) for p in sys.path if p and (Path(p) / "tilake" / "cli.py").is_file()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim)] + here[:1]), COLUMNS="100")
    env.pop(tilake.settings.LAKE, None)
    return env


def _tilake(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "tilake.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def no_torch_example(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("no_torch")
    env = _no_torch_env(tmp)
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr   # the shim works
    return tmp, env, _tilake(["example", "--out", str(tmp / "ex")], env, tmp)


def test_help_and_example_run_without_torch(no_torch_example):
    tmp, env, r = no_torch_example
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    for name in ("train_infer_op_diff_report.md", "train_infer_op_diff_report.html", "op_diff_overview.png",
                 "operator_diff.xlsx"):
        assert (tmp / "ex" / name).is_file(), name
    h = _tilake(["--help"], env, tmp)
    assert h.returncode == 0 and "example" in h.stdout and "dumps" in h.stdout


def test_summary_names_lake_and_chart_and_the_next_commands_work(no_torch_example):
    tmp, _env, r = no_torch_example
    lake = (tmp / "ex" / "lake").resolve()
    lines = r.stdout.splitlines()
    assert f"chart:  {tmp / 'ex' / 'op_diff_overview.png'}" in lines
    assert any(ln.startswith(f"lake:   {lake}") for ln in lines)
    at = lines.index(f"  export TILAKE_LAKE={lake}")
    nxt = [ln.strip() for ln in lines[at + 1:at + 4]]
    assert [n.split()[:2] for n in nxt] == [["tilake", "runs"], ["tilake", "sql"], ["tilake", "trend"]]
    outs = []
    for cmd in nxt:   # run each as printed (shell words), against the exported lake
        r2 = CliRunner(env={"TILAKE_LAKE": str(lake), "COLUMNS": "80"}).invoke(
            main, shlex.split(cmd)[1:] + (["--no-chart"] if "trend" in cmd else []))
        assert r2.exit_code == 0, (cmd, r2.output)
        outs.append(r2.output)
    assert "example-qwen3-0.6b-grpo" in outs[0]
    assert "different_fused_kernel" in outs[1] and "attention" in outs[1]
    assert "red_rows" in outs[2] and "by none" not in outs[2]


def test_dump_commands_without_torch_say_what_to_install(no_torch_example):
    tmp, env, _ = no_torch_example
    d = tmp / "dump"
    d.mkdir()
    for args, extra in ((["dumps", "analyze", "--train", str(d), "--infer", str(d), "--out", str(tmp / "o")], "dumps"),
                        (["dumps", "probe", "--train", str(d)], "dumps"),
                        (["example", "--backend", "torch", "--out", str(tmp / "t")], "torch")):
        r = _tilake(args, env, tmp)
        assert r.returncode == 2, (args, r.stderr[-2000:])
        assert r.stderr.strip().splitlines() == [f"error: this command needs PyTorch: pip install '.[{extra}]' (in the tilake source folder)"]


def test_torch_is_an_extra_not_a_dependency():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("torch")]
    extras = project["optional-dependencies"]
    for extra in ("dumps", "torch", "test"):   # .[test] pulls everything the tests import, torch included
        assert any(d.startswith("torch>=") for d in extras[extra]), extra
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert ci.index("pip install -q torch==2.13.0") < ci.index('pip install -q ".[test]"')   # the CPU wheel first
