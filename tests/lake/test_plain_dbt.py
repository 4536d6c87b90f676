"""The README's plain ``dbt build`` (``cd dbt_project && TILAKE_LAKE=… dbt build --profiles-dir .``) on a
lake that does not exist: one clear error, no traceback (tilake/lake/dbt_plugin.py via profiles.yml)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tilake.lake.dbt_plugin import Plugin, lake_problem
from tilake.lake.warehouse import PROJECT_DIR


def test_lake_problem_names_the_folder(tmp_path):
    assert lake_problem(str(tmp_path / "nope")).startswith(f"TILAKE_LAKE={tmp_path / 'nope'} does not exist: ")
    assert "is not a tilake lake (no raw/ folder)" in lake_problem(str(tmp_path))
    (tmp_path / "raw").mkdir()
    assert lake_problem(str(tmp_path)) == ""
    with pytest.raises(RuntimeError, match="does not exist"):   # dbt-duckdb turns RuntimeError into one message
        Plugin("dbt_plugin", {"lake": str(tmp_path / "nope")})
    Plugin("dbt_plugin", {"lake": str(tmp_path)})


def test_the_profile_loads_the_check_with_the_lake():
    prof = yaml.safe_load((PROJECT_DIR / "profiles.yml").read_text(encoding="utf-8"))
    plugins = prof["tilake"]["outputs"]["lake"]["plugins"]
    assert plugins == [{"module": "tilake.lake.dbt_plugin", "config": {"lake": "{{ env_var('TILAKE_LAKE', '../tilake-lake') }}"}}]


@pytest.mark.skipif(not shutil.which("dbt", path=str(Path(sys.executable).parent)), reason="no dbt script beside python")
def test_plain_dbt_build_on_a_missing_lake_is_one_error(tmp_path):
    env = dict(os.environ, TILAKE_LAKE=str(tmp_path / "no-lake"), DBT_SEND_ANONYMOUS_USAGE_STATS="false", DO_NOT_TRACK="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cp = subprocess.run([str(Path(sys.executable).parent / "dbt"), "build", "--profiles-dir", ".", "--no-use-colors",
                         "--target-path", str(tmp_path / "target"), "--log-path", str(tmp_path / "logs")],
                        cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=600)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0 and "Traceback" not in out and "Cannot open file" not in out
    assert f"TILAKE_LAKE={tmp_path / 'no-lake'} does not exist: set TILAKE_LAKE to a lake written by tilake" in out
    assert not (tmp_path / "no-lake").exists()
