"""Old names that reproducer scripts (shared/fixtures/bugs, shared/fixtures/reliability) still call."""
import importlib
import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_python_m_tilake_ingest_synth_runs_the_generator(tmp_path):
    out = tmp_path / "po"
    proc = subprocess.run([sys.executable, "-m", "tilake.ingest.synth", "profiler-output", str(out),
                           "--layers", "1", "--train-ranks", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert len(info["train"]) == 1
    assert (out / "profiler_output").exists() or any(out.rglob("*.db"))


def test_dumps_gen_and_dumps_mini_names_resolve(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    gen = importlib.import_module("dumps_gen")
    mini = importlib.import_module("dumps_mini")
    for name in ("Cfg", "prompt", "weights", "dump_train", "dump_infer"):
        assert callable(getattr(gen, name))
    assert callable(mini.write_dump) and callable(mini.write_map)
