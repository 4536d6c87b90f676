"""The room rules of the package, checked on every run (README, "Architecture").

* import contracts (import-linter, ``[tool.importlinter]`` in ``pyproject.toml``): each room imports
  only downward, reports never import ingest/diagnosis code, no import cycles between siblings;
* files sized by subject, not by a line cap: a file over 1,000 lines is named as a warning (split it when a
  second subject has grown inside it); over 2,000 lines fails.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WARN_LINES = 1000
MAX_LINES = 2000


def _python_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                         cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"not a git checkout ({out.stderr.strip()})")
    return [f for f in out.stdout.split() if (REPO / f).is_file()]


def test_files_are_sized_by_subject():
    sizes = {f: len((REPO / f).read_text(encoding="utf-8").splitlines()) for f in _python_files()}
    big = {f: n for f, n in sizes.items() if n > WARN_LINES}
    if big:
        warnings.warn(f"files over {WARN_LINES} lines (split by subject when they hold two): {big}", stacklevel=1)
    assert {f: n for f, n in big.items() if n > MAX_LINES} == {}


def test_import_contracts():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    p = subprocess.run([exe, "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "4 kept, 0 broken" in p.stdout
