"""Torch-profiler Chrome traces → raw lake tables: counts equal a direct count of the JSON events;
CPU-only traces are labelled; truncated, legacy and unknown-schema traces never read as "no difference"."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import discover, explicit
from tilake.ingest.profiler.load import ingest_profile
from tilake.lake.store import Lake
from torch_trace_writer import FLASH, GEMM, INFER_CUDA, SILU_MUL, SOFTMAX, TRAIN_CUDA, make_trace, verl_cuda_layout

REAL = Path(__file__).resolve().parents[2] / "data" / "torch_cpu_trace" / "prof_rank-0.json.gz"


def _ingest(tmp_path: Path, caps, allow_missing=False):
    lake = Lake(tmp_path / "lake")
    res = ingest_profile(lake, "t1", caps, {}, allow_missing=allow_missing, progress=False)
    return lake, res


def _dicts(lake: Lake, table: str, where: str = "true"):
    con = duckdb.connect()
    rows = con.execute(f"SELECT * FROM read_parquet('{lake.raw}/{table}/run_id=t1/**/*.parquet', "
                       f"hive_partitioning=true, union_by_name=true) WHERE {where}").fetchall()
    cols = [d[0] for d in con.description]
    return [dict(zip(cols, r)) for r in rows]


def test_real_cpu_trace_counts_equal_direct_count(tmp_path):
    events = json.load(gzip.open(REAL))["traceEvents"]
    direct = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    names = Counter(e["name"] for e in events if e.get("cat") == "cpu_op")
    lake, res = _ingest(tmp_path, explicit(REAL, "train") + explicit(REAL, "infer"))
    assert [c.status for c in res.captures] == ["ok", "ok"]
    host = _dicts(lake, "host_ops", "side = 'train'")
    assert len(host) == direct["cpu_op"] == 54
    kernels = _dicts(lake, "kernels", "side = 'train'")
    per_name = Counter(k["kernel_name"] for k in kernels)
    # compute ops with only allocation/view ops inside them stand for kernels, once per event
    for name in ("aten::bmm", "aten::_softmax", "aten::_scaled_dot_product_flash_attention_for_cpu"):
        assert per_name[name] == names[name] > 0
    assert per_name == {"aten::bmm": 2, "aten::div": 1, "aten::_softmax": 1,
                        "aten::_scaled_dot_product_flash_attention_for_cpu": 1}
    assert {k["accelerator"] for k in kernels} == {"CPU"} and {k["device_task_type"] for k in kernels} == {"cpu_op"}
    cap = _dicts(lake, "captures", "side = 'train'")[0]
    assert cap["backend"] == "torch_trace" and cap["source_kind"] == "trace"
    assert "cpu_only" in cap["schema_variant"] and "CPU-only trace" in cap["reason"]
    rows = json.loads(cap["table_rows"])
    assert rows["cpu_op"] == direct["cpu_op"] and rows["python_function"] == direct["python_function"]
    assert rows["steps"] == 1 and cap["kernel_count"] == 5 and cap["host_op_count"] == 54
    ranges = sorted(r["message"] for r in _dicts(lake, "mstx_ranges", "side = 'train'"))
    assert ranges == ["ProfilerStep#0", "actor_update", "rollout_generate"]
    # with_stack: every kernel has a Python stack whose outermost frame is the script
    stacks = _dicts(lake, "call_stacks", "side = 'train'")
    chains = {}
    for s in stacks:
        chains.setdefault(s["callchain_id"], []).append((s["depth"], s["frame"]))
    for k in kernels:
        frames = [f for _, f in sorted(chains[k["callchain_id"]])]
        assert frames[-1].startswith("make_trace.py(")


def test_cuda_trace_kernels_linked_to_ops(tmp_path):
    p = tmp_path / "t" / "prof_rank-3.json.gz"
    counts = make_trace(p, TRAIN_CUDA, steps=2, annotation="actor_update", memcpy=2)
    lake, res = _ingest(tmp_path, explicit(p, "train") + explicit(p, "infer"))
    assert res.captures[0].capture.rank == 3
    kernels = _dicts(lake, "kernels", "side = 'train'")
    assert len(kernels) == counts["kernel"] == 8
    assert len(_dicts(lake, "host_ops", "side = 'train'")) == counts["cpu_op"] == 16
    by_op = Counter((k["op_type"], k["kernel_name"]) for k in kernels)
    assert by_op == {("aten::mm", GEMM): 2, ("aten::bmm", GEMM): 4, ("aten::_softmax", SOFTMAX): 2}
    assert {k["cann_api_name"] for k in kernels} == {"cudaLaunchKernel"}
    assert {k["accelerator"] for k in kernels} == {"GPU"} and not any(k["op_type_derived"] for k in kernels)
    cap = _dicts(lake, "captures", "side = 'train'")[0]
    rows = json.loads(cap["table_rows"])
    # memcpy/memset are kept apart: counted, not kernels
    assert rows["gpu_memcpy"] == counts["gpu_memcpy"] == 4 and rows["gpu_memset"] == 4
    assert rows["ac2g"] == 16 and rows["steps"] == 2 and rows["kernel"] == 8
    assert cap["schema_variant"].startswith("chrome_trace_v1+device") and cap["status"] == "ok"
    host = {h["host_op_id"]: h for h in _dicts(lake, "host_ops", "side = 'train'")}
    assert sum(h["kernel_count"] for h in host.values()) == 8
    assert all(host[k["host_op_id"]]["name"] == k["op_type"] for k in kernels)
    assert cap["session_start_ns"] > 1790857026000000000


def test_discover_verl_layout_sides(tmp_path):
    root = verl_cuda_layout(tmp_path / "profile")
    caps = discover(root)
    assert [(c.side, c.kind, c.rank, c.path.parent.name) for c in caps] == [
        ("train", "trace", 0, "actor_update"), ("infer", "trace", 0, "rollout_generate")]
    lake, _ = _ingest(tmp_path, caps)
    infer = Counter(k["kernel_name"] for k in _dicts(lake, "kernels", "side = 'infer'"))
    assert infer == {GEMM: 1, FLASH: 1, SILU_MUL: 1}
    assert len(INFER_CUDA) == 3


def test_truncated_gz_is_one_clear_error_and_lake_unchanged(tmp_path):
    p = tmp_path / "prof_rank-0.json.gz"
    make_trace(p, TRAIN_CUDA, steps=300)  # larger than ijson's read buffer: events come before the break
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    lake = Lake(tmp_path / "lake")
    with pytest.raises(TilakeError) as e:
        ingest_profile(lake, "t1", explicit(p, "train"), {}, progress=False)
    msg = str(e.value)
    assert "truncated or corrupt trace" in msg and str(p) in msg and "\n" not in msg
    assert not (lake.raw / "kernels" / "run_id=t1").exists()
    # recorded in capture health when the run goes on without that side: truncated, no rows, never "no difference"
    lake, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    assert res.captures[0].status == "evidence_missing" and res.side_evidence["train"] == "evidence_missing"
    cap = _dicts(lake, "captures")[0]
    assert cap["truncated"] is True and cap["kernel_count"] == 0 and "truncated or corrupt trace" in cap["reason"]
    assert json.loads(cap["table_rows"])["kernel"] > 0  # events read before the break are counted
    assert not list((lake.raw / "kernels").glob("run_id=t1/**/*.parquet"))


def test_truncated_plain_json_is_an_error(tmp_path):
    p = tmp_path / "x.pt.trace.json"
    make_trace(p, TRAIN_CUDA, gz=False)
    p.write_bytes(p.read_bytes()[:-200])
    with pytest.raises(TilakeError, match="truncated or corrupt trace"):
        _ingest(tmp_path, explicit(p, "train"))


def test_other_schema_is_evidence_missing_not_no_difference(tmp_path):
    p = tmp_path / "prof_rank-0.json.gz"
    doc = {"schemaVersion": 7, "traceEvents": [
        {"ph": "X", "cat": "torch_op_v7", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
        {"ph": "X", "cat": "device_task_v7", "name": "gemm", "pid": 0, "tid": 7, "ts": 1.5, "dur": 1.0}]}
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(TilakeError, match="train side has no device evidence"):
        _ingest(tmp_path, explicit(p, "train"))
    lake, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    cap = res.captures[0]
    assert cap.status == "evidence_missing"
    assert "schemaVersion 7 is not one tilake knows" in cap.reason and "torch_op_v7=1" in cap.reason
    assert res.side_evidence == {"train": "evidence_missing", "infer": "evidence_missing"}


def test_old_category_spellings_are_read(tmp_path):
    p = tmp_path / "prof_rank-0.json"
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "Kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": 2.0, "dur": 1.0,
         "args": {"External id": 1, "correlation": 9, "device": 0, "stream": 7}}]}
    p.write_text(json.dumps(doc))
    lake, res = _ingest(tmp_path, explicit(p, "train") + explicit(p, "infer"))
    k = _dicts(lake, "kernels", "side = 'train'")
    assert [(x["op_type"], x["kernel_name"], x["dur_ns"]) for x in k] == [("aten::mm", GEMM, 1000)]


def test_legacy_array_trace_is_evidence_missing(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps([{"name": "mm", "ph": "X", "ts": 1, "dur": 2, "tid": 1, "pid": "CPU functions",
                              "args": {}}]))
    _, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    assert res.captures[0].status == "evidence_missing" and "legacy autograd-profiler" in res.captures[0].reason


def test_not_a_trace_is_an_error(tmp_path):
    p = tmp_path / "prof_rank-0.json"
    p.write_text(json.dumps({"hello": 1}))
    with pytest.raises(TilakeError, match="not a Chrome trace: no traceEvents array"):
        _ingest(tmp_path, explicit(p, "train"))


def test_trace_with_no_ops_is_evidence_missing(tmp_path):
    p = tmp_path / "prof_rank-0.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}))
    _, res = _ingest(tmp_path, explicit(p, "train"), allow_missing=True)
    assert res.captures[0].status == "evidence_missing"
    assert "no cpu_op or kernel events" in res.captures[0].reason


def test_find_vllm_and_verl_trace_names(tmp_path):
    from tilake.ingest.torch.find import find_traces, is_trace_name

    make_trace(tmp_path / "vllm_traces" / "host_123.1764547200000.pt.trace.json.gz", INFER_CUDA)
    make_trace(tmp_path / "actor_update" / "actor_prof_rank-2.json.gz", TRAIN_CUDA)
    (tmp_path / "actor_update" / "notes.json").write_text("{}")
    found = [(p.name, r) for p, r in find_traces(tmp_path)]
    assert found == [("actor_prof_rank-2.json.gz", 2), ("host_123.1764547200000.pt.trace.json.gz", 0)]
    assert not is_trace_name("trace_view.json")  # Ascend's own Chrome trace is not a torch-profiler one
    sides = {c.path.name: c.side for c in discover(tmp_path)}
    assert sides == {"actor_prof_rank-2.json.gz": "train", "host_123.1764547200000.pt.trace.json.gz": "infer"}
