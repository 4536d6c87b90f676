"""Inputs of the hostile-input tests: one synthetic profiler capture, ingested and built once per
session, copied per test (a dbt build costs ~15 s; a copy a few ms)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tilake.cli import main
from tilake.synth import JobConfig, make_profiler_output


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict:
    """``{"po": profiler_output folder, "lake": built lake}`` of run ``r1`` (1 layer, 1 train rank)."""
    base = tmp_path_factory.mktemp("safety-built")
    po = base / "po"
    make_profiler_output(po, job=JobConfig(layers=1), train_ranks=1)
    lake = base / "lake"
    r = CliRunner().invoke(main, ["ingest", str(po), "--run-id", "r1", "--lake", str(lake)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["build", "--lake", str(lake)])
    assert r.exit_code == 0, r.output
    return {"po": po, "lake": lake}


@pytest.fixture()
def lake_copy(built, tmp_path) -> Path:
    """A private copy of the built lake (symlinks kept)."""
    dst = tmp_path / "lake"
    shutil.copytree(built["lake"], dst, symlinks=True)
    return dst


@pytest.fixture()
def pair(tmp_path):
    """``(train rank folder, infer rank folder, map path)``: two identical msprobe dumps (msprobe_mini's
    writer) of boundaries ``a`` (``m.A.Lin``) and ``b`` (``m.B.Lin``) and a map of both."""
    import torch
    from msprobe_mini import write_dump, write_map

    x = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    ents = [("Module.m.A.Lin.forward.0", None, {"output": [x]}), ("Module.m.B.Lin.forward.0", None, {"output": [x * 2]})]
    train, infer = write_dump(tmp_path / "train", ents), write_dump(tmp_path / "infer", ents)
    sel = lambda m: {"module": m, "io": "output", "index": 0}  # noqa: E731
    mp = write_map(tmp_path / "mini.yaml", [{"name": n, "op": "matmul", "inputs": [], "train": sel(m), "infer": sel(m)}
                                            for n, m in (("a", "m.A.Lin"), ("b", "m.B.Lin"))])
    return train, infer, mp
