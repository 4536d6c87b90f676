"""Lake internals that are links or of the wrong kind are refused with one line; nothing outside the lake
is deleted or truncated (docs/security.md)."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from tilake.cli import main


def _outside(tmp_path):
    out = tmp_path / "outside"
    (out / "keep").mkdir(parents=True)
    (out / "keep" / "data.txt").write_text("precious")
    (out / "file.txt").write_text("precious")
    return out


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("name", [".trash", ".staging", ".dbt", ".build", "raw/kernels", "manifest"])
def test_internal_folder_as_a_link_is_refused(built, lake_copy, tmp_path, name):
    out = _outside(tmp_path)
    target = lake_copy / name
    if target.exists():
        os.rename(target, tmp_path / "moved")
    target.symlink_to(out, target_is_directory=True)
    r = _run("ingest", built["po"], "--run-id", "r1", "--lake", lake_copy)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert lines[-1].startswith("error:") and name in lines[-1] and "symbolic link" in lines[-1], r.output
    assert (out / "keep" / "data.txt").read_text() == "precious" and (out / "file.txt").read_text() == "precious"


def test_lock_as_a_link_is_refused_and_the_target_kept(built, lake_copy, tmp_path):
    out = _outside(tmp_path)
    (lake_copy / ".lock").unlink(missing_ok=True)
    (lake_copy / ".lock").symlink_to(out / "file.txt")
    r = _run("build", "--lake", lake_copy)
    assert r.exit_code == 2 and ".lock" in r.output and "symbolic link" in r.output, r.output
    assert (out / "file.txt").read_text() == "precious"


@pytest.mark.parametrize("name,folder", [(".staging", False), ("raw", False), (".lock", True), ("lake.json", True)])
def test_internal_of_the_wrong_kind_is_one_line(built, lake_copy, name, folder):
    p = lake_copy / name
    if p.is_dir():
        os.rename(p, lake_copy.parent / "moved")
    else:
        p.unlink(missing_ok=True)
    p.mkdir() if folder else p.write_text("x")
    r = _run("runs", "rm", "r1", "--no-build", "--lake", lake_copy)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip().splitlines()[-1].startswith("error:") and name in r.output, r.output


def test_newer_lake_is_refused_older_is_migrated(built, lake_copy):
    (lake_copy / "lake.json").write_text(json.dumps({"format": 99}))
    for args in (["runs", "rm", "r1", "--no-build"], ["sql", "select 1"], ["check"]):
        r = _run(*args, "--lake", lake_copy)
        assert r.exit_code != 0 and "format 99" in r.output and "newer tilake" in r.output, (args, r.output)
    assert (lake_copy / "raw" / "runs" / "run_id=r1").is_dir()
    # format 1: no lake.json, no run records → the next write records every run
    (lake_copy / "lake.json").unlink()
    for f in (lake_copy / "manifest").iterdir():
        f.unlink()
    r = _run("check", "--lake", lake_copy)
    assert r.exit_code == 1 and "format 1" in r.output
    r = _run("build", "--lake", lake_copy)
    assert r.exit_code == 0, r.output
    assert json.loads((lake_copy / "lake.json").read_text())["format"] == 2
    r = _run("check", "--lake", lake_copy)
    assert r.exit_code == 0 and "ok" in r.output, r.output


def test_check_names_a_lost_file_and_a_lost_registry_and_build_refuses(lake_copy):
    kern = sorted((lake_copy / "raw" / "kernels" / "run_id=r1").rglob("*.parquet"))[0]
    kern.unlink()
    r = _run("check", "--lake", lake_copy)
    assert r.exit_code == 1 and str(kern) in r.output and "missing" in r.output, r.output
    r = _run("build", "--lake", lake_copy)
    assert r.exit_code == 2 and "lost files" in r.output and "tilake check" in r.output, r.output
    import shutil

    shutil.rmtree(lake_copy / "raw" / "runs")
    r = _run("check", "--lake", lake_copy)
    assert r.exit_code == 1 and "run registry folder is missing" in r.output, r.output
    r = _run("runs", "--lake", lake_copy)      # not "no runs": the registry is named as lost
    assert r.exit_code == 2 and "raw/runs is missing" in r.output, r.output


def test_corrupt_raw_parquet_and_warehouse_are_one_line(lake_copy):
    f = sorted((lake_copy / "raw" / "host_ops" / "run_id=r1").rglob("*.parquet"))[0]
    f.write_bytes(b"PAR1 not really" + b"\0" * 64)
    lake_copy.joinpath("warehouse.duckdb").write_bytes(b"garbage" * 100)
    r = _run("check", "--lake", lake_copy)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert str(f) in r.output and "warehouse" in r.output, r.output
    r = _run("runs", "--lake", lake_copy)      # the registry does not read host_ops: it still lists
    assert r.exit_code == 0 and "r1" in r.output, r.output
    for args in (["sql", "select count(*) from raw_host_ops"], ["build"]):
        r = _run(*args, "--lake", lake_copy)
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (args, r.output)
        assert r.output.strip().splitlines()[-1].startswith("error:"), (args, r.output)


def test_check_names_files_no_commit_wrote(lake_copy):
    leaf = sorted((lake_copy / "raw" / "kernels" / "run_id=r1").rglob("*.parquet"))[0]
    stray = leaf.with_name("part-99999.parquet")
    stray.write_bytes(leaf.read_bytes())                      # rows a build would count twice
    other = lake_copy / "raw" / "kernels" / "run_id=zz"
    other.mkdir()
    (other / "part-1.parquet").write_bytes(leaf.read_bytes())
    r = _run("check", "--lake", lake_copy)
    assert r.exit_code == 1, r.output
    assert f"{stray}: no commit recorded this file" in r.output and f"{other}: no commit recorded" in r.output
