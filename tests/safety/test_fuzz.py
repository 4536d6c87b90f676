"""Property-based fuzz (hypothesis, bounded examples): corrupted profiler DB pages and hostile dump.json
values end in success or one ``error:`` line — never a traceback — and a failed ingest leaves the
lake byte-identical."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from click.testing import CliRunner
from hostile import tree_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msprobe_mini import write_dump, write_map

from tilake.cli import main

PAGE = 4096   # SQLite page size of the synthetic (and torch_npu) profiler DBs
FUZZ = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _one_line_or_success(r) -> bool:
    """Exit 0 (or 3: ``dumps analyze`` wrote its outputs but no boundary could be compared), or exit 2
    whose output ends in exactly one ``error:`` line; never an uncaught exception."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output and "Logging error" not in r.output, r.output[-2000:]
    if r.exit_code in (0, 3):
        assert not any(line.startswith("error: ") for line in r.output.splitlines()), r.output[-2000:]
        return True
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and lines and lines[-1].startswith("error: "), r.output[-2000:]
    assert sum(line.startswith("error: ") for line in lines) == 1, r.output[-2000:]
    return False


mutation = st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=PAGE - 1),
                     st.binary(min_size=1, max_size=32))


@FUZZ
@given(muts=st.lists(mutation, min_size=1, max_size=4))
def test_corrupted_db_pages(built, muts):
    src = next(built["po"].glob("agent_loop_rollout_replica_0/*/ASCEND_PROFILER_OUTPUT/*.db"))
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        db = d / "infer" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / src.name
        db.parent.mkdir(parents=True)
        data = bytearray(src.read_bytes())
        pages = len(data) // PAGE
        for page, off, blob in muts:
            at = (page % pages) * PAGE + off
            data[at:at + len(blob)] = blob[:len(data) - at]
        db.write_bytes(bytes(data))
        lake = d / "lake"
        shutil.copytree(built["lake"], lake, symlinks=True)
        before, db_before = tree_digest(lake), db.read_bytes()
        r = CliRunner().invoke(main, ["ingest", "--infer", str(db), "--allow-missing", "--run-id", "fz",
                                      "--lake", str(lake)])
        ok = _one_line_or_success(r)
        assert db.read_bytes() == db_before   # the input is never modified
        if not ok:
            assert tree_digest(lake) == before


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) |
                           st.text(max_size=20) | st.sampled_from(["../x.pt", "/etc/passwd", "torch.bfloat16", ""]),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                           max_leaves=8)
FIELDS = ["data_name", "dtype", "shape", "type", "Max", None]   # None: replace the whole slot / entry


@FUZZ
@given(field=st.sampled_from(FIELDS), value=json_values, whole_entry=st.booleans())
def test_hostile_dump_json(tmp_path_factory, field, value, whole_entry):
    tmp = tmp_path_factory.mktemp("fz")
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    ents = [("Module.m.A.Lin.forward.0", None, {"output": [x]})]
    train, _infer = write_dump(tmp / "train", ents), write_dump(tmp / "infer", ents)
    sel = {"module": "m.A.Lin", "io": "output", "index": 0}
    mp = write_map(tmp / "m.yaml", [{"name": "a", "op": "matmul", "inputs": [], "train": sel, "infer": sel}])
    p = train / "dump.json"
    d = json.loads(p.read_text())
    if field is None and whole_entry:
        d["data"]["Module.m.A.Lin.forward.0"] = value
    elif field is None:
        d["data"]["Module.m.A.Lin.forward.0"]["output"] = value
    else:
        d["data"]["Module.m.A.Lin.forward.0"]["output"][0][field] = value
    p.write_text(json.dumps(d))
    before = tree_digest(tmp / "train")
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(tmp / "train"), "--infer", str(tmp / "infer"),
                                  "--map", str(mp), "--out", str(tmp / "out"), "--no-charts"])
    _one_line_or_success(r)
    assert tree_digest(tmp / "train") == before
